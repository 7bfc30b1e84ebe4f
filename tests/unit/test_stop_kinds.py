"""Why a reply ended is declared once: the engine's StopReason, and the stored
record's ReplyStop, which extends it with what ends a reply outside the engine."""

from __future__ import annotations

import re
from pathlib import Path

from gambit.engine.text.reply import StopReason
from gambit.storage.reply_stats import CUT_STOPS, DELIBERATE_STOPS, STOP_WORDS, ReplyStop

APP = Path(__file__).resolve().parents[2] / "app" / "gambit"
DEFINED_IN = {APP / "engine" / "text" / "reply.py", APP / "storage" / "reply_stats.py"}


def test_a_stored_stop_is_the_engines_or_one_of_the_apps_own() -> None:
    assert {r.value for r in StopReason} <= {s.value for s in ReplyStop}
    assert {s.value for s in ReplyStop} - {r.value for r in StopReason} == {
        "interrupted", "window closed", "error"
    }  # fmt: skip
    assert set(STOP_WORDS) | CUT_STOPS | DELIBERATE_STOPS <= set(ReplyStop)
    assert ReplyStop.EOG not in CUT_STOPS and ReplyStop.STOP_STRING not in CUT_STOPS


def test_no_stop_kind_is_spelt_outside_the_modules_that_declare_them() -> None:
    """A stop kind written as text elsewhere drifts from its declaration (the
    export once decided "stopped" by searching the footer's words)."""
    spelt = [s.value for s in ReplyStop if " " in s.value]  # unmistakable as text
    found = []
    for path in sorted(APP.rglob("*.py")):
        if path in DEFINED_IN:
            continue
        text = path.read_text(encoding="utf-8")
        found += [f"{path.relative_to(APP)}: {v!r}" for v in spelt if f'"{v}"' in text]
        found += [
            f"{path.relative_to(APP)}: {m.group()}"
            for m in re.finditer(r'"stop": *"[a-z ]+"', text)
        ]
    assert found == []
