"""Outside engine/drafters/, drafters are told apart by what they can do (the
traits the Drafter protocol declares, its options, the TreeDrafter and
ChoosingDrafter protocols), never by their class: a new drafter is its module
and a registry entry."""

from __future__ import annotations

import re
from pathlib import Path

APP = Path(__file__).resolve().parents[2] / "app" / "gambit"
DRAFTERS = APP / "engine" / "drafters"


def concrete_drafters() -> set[str]:
    names = set()
    for path in DRAFTERS.glob("*.py"):
        for match in re.finditer(r"^class (\w+Drafter)\b(\((.*)\))?:", path.read_text(), re.M):
            if "Protocol" not in (match.group(3) or ""):
                names.add(match.group(1))
    return names


def test_no_code_outside_the_drafters_asks_a_drafter_its_class() -> None:
    classes = concrete_drafters()
    assert {"CombinedDrafter", "DraftModelDrafter", "PromptLookupDrafter"} <= classes
    asking = re.compile(r"isinstance\([^()]*\b(" + "|".join(sorted(classes)) + r")\b")
    found = [
        f"{path.relative_to(APP)}:{n}: {line.strip()}"
        for path in sorted(APP.rglob("*.py"))
        if DRAFTERS not in path.parents
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if asking.search(line)
    ]
    assert found == []


def test_the_session_decoder_and_policy_never_name_a_drafter_class() -> None:
    """They ask traits and options; only the registry builds drafters."""
    names = re.compile(r"\b(" + "|".join(sorted(concrete_drafters())) + r")\b")
    engine = APP / "engine"
    asking = [
        engine / "session.py",
        engine / "decoder.py",
        *sorted((engine / "gamma").glob("*.py")),
    ]
    found = [
        f"{path.relative_to(APP)}:{n}: {line.strip()}"
        for path in asking
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if names.search(line) and not line.lstrip().startswith("#")
    ]
    assert found == []


def test_a_lookup_drafter_says_what_it_can_do() -> None:
    from gambit.engine.drafters.base import Option
    from gambit.engine.drafters.lookup import PromptLookupDrafter

    lookup = PromptLookupDrafter()
    assert lookup.copies_text and not lookup.through_text and lookup.draft_model is None
    assert lookup.steps_per_token == 1.0
    source = [10, 11, 12, 13, 14, 15]
    # (12 13 14 agree with the source: bucket 2)
    assert lookup.option([*source, 1, 12, 13, 14]) == Option("prompt lookup", 2)
