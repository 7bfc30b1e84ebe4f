"""Outside engine/drafters/, drafters are told apart by what they can do (the
registry's trait functions, the TreeDrafter and ChoosingDrafter protocols),
never by their class: a new drafter is its module and a registry entry."""

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
