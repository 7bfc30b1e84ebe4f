"""A reply's figures are one set of numbers wherever they show: the reply's
footer, the statistics panel, the footer read back from the history, and the
``gambit-cli generate`` summary line for the same reply. Real weights, the real
worker thread, offscreen Qt."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QMessageBox
from pytestqt.qtbot import QtBot

from gambit.cli.main import summary_line
from gambit.engine.gamma.metrics import NO_FIGURE, format_rate, format_speedup
from gambit.qt.reply_stream import ReplyDelta, ReplyResult
from gambit.storage.chat_store.conversations import ConversationStore
from gambit.storage.reply_stats import STOP_WORDS, ReplyRecord
from gambit.storage.settings import Settings, SettingsStore
from gambit.ui.stats.stats_panel import TOOLTIPS, format_ms
from gambit.ui.window.main_window import MainWindow
from gguf_fixtures import write_small_model

LOAD_TIMEOUT_MS = 120_000
REPLY_TIMEOUT_MS = 120_000
PROMPT = "List the days of the week, one per line."


@pytest.fixture
def pair(smol_q8_0: Path, smol_q4_1: Path) -> Settings:
    """A Q8_0 target with its Q4_1 sibling drafting every round (fixed γ)."""
    return Settings(
        target_model=str(smol_q8_0),
        drafter="draft",
        draft_model=str(smol_q4_1),
        policy="fixed",
        fixed_gamma=3,
        temperature=0.0,
        max_tokens=24,
        context_size=1024,
        threads=2,
    )


@pytest.fixture
def open_window(qtbot: QtBot, tmp_path: Path) -> Iterator[type[MainWindow]]:
    windows: list[MainWindow] = []

    def make(settings: Settings | None = None, load: bool = True) -> MainWindow:
        store = SettingsStore(tmp_path / "settings.json")
        if settings is not None:
            store.save(settings)
        w = MainWindow(store, ConversationStore(tmp_path / "conversations.sqlite3"))
        qtbot.addWidget(w)
        windows.append(w)
        w.show()
        if load:
            w.load_engine()
            qtbot.waitUntil(lambda: w.conversation.engine_info is not None, timeout=LOAD_TIMEOUT_MS)
        return w

    yield make  # type: ignore[misc]
    for w in windows:
        w.close()


def ending(result: ReplyResult) -> str:
    """What the footer says last of why ``result`` ended ("" where it ended on its own)."""
    return f" · {STOP_WORDS[result.stop]}" if result.stop in STOP_WORDS else ""


def reply(qtbot: QtBot, w: MainWindow, text: str = PROMPT) -> ReplyResult:
    results: list[ReplyResult] = []
    w.worker.finished.connect(results.append)
    w.input.setPlainText(text)
    qtbot.mouseClick(w.send_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not w.conversation.streaming, timeout=REPLY_TIMEOUT_MS)
    assert len(results) == 1
    return results[0]


def shown(w: MainWindow, name: str) -> QLabel:
    label = w.stats.findChild(QLabel, name)
    assert label is not None, name
    return label


def test_footer_panel_history_and_cli_show_the_same_figures(
    qtbot: QtBot, open_window: type[MainWindow], pair: Settings
) -> None:
    w = open_window(pair)
    result = reply(qtbot, w)
    snap = result.snapshot
    assert snap.n_drafted > 0 and snap.speedup is not None  # it drafted: a claim to make
    speedup = shown(w, "speedupValue")
    # The last figures, not the live ones. A live snapshot can round to the same speedup and
    # rate while it still carries the baseline from before this reply's end (the reply's end
    # re-measures plain decoding), so the baseline is waited for as well.
    final = (
        format_speedup(snap.speedup),
        format_rate(snap.tokens_per_s),
        format_rate(snap.baseline_tokens_per_s),
    )
    shows = lambda: tuple(  # noqa: E731
        shown(w, name).text() for name in ("speedupValue", "tokensPerSecondValue", "baselineValue")
    )
    qtbot.waitUntil(lambda: shows() == final, timeout=5000)

    rate = shown(w, "tokensPerSecondValue").text()
    baseline = shown(w, "baselineValue").text()
    acceptance = shown(w, "acceptanceValue").text()
    accepted, drafted = re.fullmatch(r"(\d+) / (\d+)", shown(w, "acceptedValue").text()).groups()  # type: ignore[union-attr]
    assert rate.endswith(" tok/s") and baseline.endswith(" tok/s")

    footer = w.chat.messages[-1].footer
    busy = " · timed while the machine was busy" if snap.busy else ""  # (a loaded CI machine)
    assert footer == (
        f"{snap.n_tokens} tokens · {rate} · accepted {accepted}/{drafted} ({acceptance}) · "
        f"{speedup.text()} vs plain{busy}{ending(result)}"
    )

    # The same footer when the conversation is read back from the history.
    w.close()
    again = open_window(load=False)
    assert again.chat.messages[-1].footer == footer

    # And the CLI's line for the same reply (the same snapshot) says the same.
    line = summary_line(
        snap, drafter="draft model", detail=None, reason=snap.gamma_reason, stop=result.stop
    )
    assert f"| {snap.n_tokens} tokens | {rate} |" in line
    assert f"speedup {speedup.text()} measured (plain decoding here: {baseline})" in line
    assert f"accepted {accepted}/{drafted} ({acceptance})" in line
    assert "controller: fixed γ=3: expected" in line  # an expectation, labelled as one
    print(f"footer: {footer}\nCLI:    {line}")


def test_a_reply_without_drafting_claims_no_speedup(
    qtbot: QtBot, open_window: type[MainWindow], pair: Settings
) -> None:
    w = open_window(pair.with_(speculation=False))
    result = reply(qtbot, w)
    snap = result.snapshot
    assert snap.n_tokens > 0 and snap.n_drafted == 0 and snap.speedup is None
    rate = shown(w, "tokensPerSecondValue")
    # (the reply's last figures, not one the panel showed while it streamed)
    qtbot.waitUntil(lambda: rate.text() == format_rate(snap.tokens_per_s), timeout=5000)

    footer = w.chat.messages[-1].footer
    busy = " · timed while the machine was busy" if snap.busy else ""
    # (no "× vs plain")
    assert footer == f"{snap.n_tokens} tokens · {rate.text()}{busy}{ending(result)}"
    speedup = shown(w, "speedupValue")
    assert speedup.text() == NO_FIGURE
    assert speedup.property("tone") == "neutral"  # no colour-coded guess either
    assert shown(w, "acceptanceValue").text() == NO_FIGURE
    assert "switched off" in shown(w, "gammaReasonValue").text()
    line = summary_line(snap, drafter="draft model", detail=None, reason="", stop=result.stop)
    assert f"speedup {NO_FIGURE} (nothing drafted)" in line and "×" not in line


def test_a_failed_load_leaves_no_figures_behind(
    qtbot: QtBot, open_window: type[MainWindow], pair: Settings, tmp_path: Path
) -> None:
    w = open_window(pair)
    reply(qtbot, w)
    speedup = shown(w, "speedupValue")
    qtbot.waitUntil(lambda: speedup.text() != NO_FIGURE, timeout=5000)

    # A complete GGUF file that holds no whole model passes the file checks,
    # then llama.cpp cannot load it.
    broken = write_small_model(tmp_path / "no-whole-model.gguf")
    assert w.apply_settings(w.settings.with_(target_model=str(broken)))
    qtbot.waitUntil(
        lambda: w.findChild(QMessageBox, "errorDialog") is not None, timeout=LOAD_TIMEOUT_MS
    )
    assert w.conversation.engine_info is None
    for name in ("speedupValue", "tokensPerSecondValue", "baselineValue", "acceptanceValue",
                 "acceptanceRollingValue", "gammaReasonValue"):  # fmt: skip
        assert shown(w, name).text() == NO_FIGURE, name
    assert speedup.property("tone") == "neutral"


BUSY_LOOP = "import time\nwhile True:\n    time.time()\n"


def test_a_reply_timed_on_a_busy_machine_is_marked_everywhere(
    qtbot: QtBot, open_window: type[MainWindow], pair: Settings
) -> None:
    """Another program keeps a core busy while the reply is timed: its figures
    are shown, marked as taken then, in the footer (kept in the history), the
    panel and the CLI's line."""
    w = open_window(pair.with_(max_tokens=64))
    busy = subprocess.Popen([sys.executable, "-c", BUSY_LOOP])
    try:
        result = reply(qtbot, w)
    finally:
        busy.kill()
        busy.wait(timeout=30)
    snap = result.snapshot
    assert snap.busy is not None and snap.busy.startswith("other programs used ")
    assert w.chat.messages[-1].footer.endswith(
        " · timed while the machine was busy" + ending(result)
    )
    line = shown(w, "busyValue")
    qtbot.waitUntil(line.isVisible, timeout=5000)
    assert snap.busy in line.text()
    cli = summary_line(snap, drafter="draft model", detail=None, reason="", stop=result.stop)
    assert f"timed while the machine was busy ({snap.busy})" in cli
    footer = w.chat.messages[-1].footer
    w.close()
    assert open_window(load=False).chat.messages[-1].footer == footer


# -- the panel against the stored reply, reply after reply ------------------------------

# Each tile and the stored figure it must show (reply_record.record_of).
STORED_TILES: dict[str, Callable[[ReplyRecord], str]] = {
    "tokensPerSecondValue": lambda r: format_rate(r.tokens_per_s or 0.0),
    "baselineValue": lambda r: format_rate(r.baseline_tokens_per_s or 0.0),
    "speedupValue": lambda r: format_speedup(r.speedup),
    "ttftValue": lambda r: format_ms(r.ttft_ms or 0.0),
    "p99Value": lambda r: format_ms(r.p99_ms or 0.0),
    "acceptedValue": lambda r: f"{r.accepted_tokens:,} / {r.drafted_tokens:,}",
}


def stored_reply(path: Path) -> ReplyRecord:
    """The last reply's record as the conversation file holds it (read afresh)."""
    with ConversationStore(path) as store:
        (conversation,) = store.list()
        last = store.messages(conversation.id)[-1]
    assert last.role == "assistant"
    return last.record


def panel_shows(w: MainWindow) -> dict[str, str]:
    return {name: shown(w, name).text() for name in STORED_TILES}


def test_the_panel_shows_the_stored_reply_plain_speculative_and_refused(
    qtbot: QtBot, open_window: type[MainWindow], q8_0_first8: Path, q4_1_first8: Path,
    tmp_path: Path,
) -> None:  # fmt: skip
    """Issue 35: a plain reply's baseline is the rate plain replies get (its
    own), a reply that drafts is compared with one baseline while it streams
    (the last reply's, never a figure moving under it), every tile shows the
    reply the conversation file stored, and a refused message leaves no figure
    at all. Short real models: the subject is the figures, not the text."""
    settings = Settings(
        target_model=str(q8_0_first8), drafter="draft", draft_model=str(q4_1_first8),
        policy="fixed", fixed_gamma=3, temperature=0.0, max_tokens=64, context_size=512,
        threads=2, speculation=False,
    )  # fmt: skip
    w = open_window(settings)
    conversations = tmp_path / "conversations.sqlite3"

    def settle(expected: dict[str, str]) -> None:
        # (the panel repaints on a timer: its last repaint shows the reply's end)
        qtbot.waitUntil(lambda: panel_shows(w) == expected, timeout=5000)

    # Plain decoding (speculation off, a drafter loaded): the baseline is the
    # reply's own rate, so the two figures are one.
    result = reply(qtbot, w)
    plain = stored_reply(conversations)
    assert result.snapshot.n_drafted == 0 and plain.tokens
    assert plain.baseline_tokens_per_s == plain.tokens_per_s and plain.tokens_per_s
    settle({name: show(plain) for name, show in STORED_TILES.items()})
    assert shown(w, "speedupValue").text() == NO_FIGURE

    # Speculation on: while the reply streams, every snapshot that drafted is
    # compared with the baseline the plain reply ended with; at its end, with
    # plain decoding re-timed on its context, as stored.
    w.speculation_action.setChecked(True)
    deltas: list[ReplyDelta] = []
    w.worker.delta.connect(deltas.append)
    result = reply(qtbot, w, "Name three colours.")
    spec = stored_reply(conversations)
    assert spec.drafted_tokens > 0 and spec.speedup is not None
    drafting = [d.snapshot for d in deltas if d.snapshot is not None and d.snapshot.n_drafted]
    assert drafting  # (snapshots while it streamed, after it drafted)
    assert {s.baseline_tokens_per_s for s in drafting} == {plain.baseline_tokens_per_s}
    assert spec.tokens_per_s and spec.baseline_tokens_per_s
    assert spec.speedup == pytest.approx(spec.tokens_per_s / spec.baseline_tokens_per_s)
    settle({name: show(spec) for name, show in STORED_TILES.items()})

    # A message too long for the context is refused: no reply, so no figure,
    # neither stored nor shown (the baseline included).
    w.input.setPlainText("word " * 2000)
    qtbot.mouseClick(w.send_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: w.findChild(QMessageBox, "errorDialog") is not None, timeout=30_000)
    qtbot.waitUntil(lambda: not w.conversation.streaming, timeout=30_000)
    refused = stored_reply(conversations)
    assert refused.stop == "error" and "too long" in (refused.error or "")
    assert (refused.tokens_per_s, refused.baseline_tokens_per_s, refused.speedup) == (None,) * 3
    tiles = {name: shown(w, name).text() for name in TOOLTIPS}  # every figure of a reply
    assert tiles == dict.fromkeys(TOOLTIPS, NO_FIGURE)
    assert not shown(w, "busyValue").isVisibleTo(w.stats)
