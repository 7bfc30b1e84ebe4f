"""The presets file: read back as written, and a damaged or hand-edited one
never stops the app or leaks a wrong value into a reply."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gambit.storage.presets import (
    DEFAULT_PRESET,
    Preset,
    PresetStore,
    find_preset,
    name_problem,
    preset_problems,
)
from gambit.storage.settings import Settings


def test_presets_round_trip_and_apply_over_the_settings(tmp_path: Path) -> None:
    store = PresetStore(tmp_path / "presets.json")
    assert store.load() == []  # no file yet
    writer = Preset.of("Writer", Settings(temperature=1.1, system_prompt="Write vividly."))
    terse = Preset("Terse", {"system_prompt": "One line.", "max_tokens": 40})
    store.save([writer, terse])
    assert store.load() == [writer, terse] and store.load_errors == []
    applied = terse.applied_to(Settings(temperature=0.3, max_tokens=512))
    assert (applied.temperature, applied.max_tokens, applied.system_prompt) == (
        0.3,
        40,
        "One line.",
    )
    assert find_preset([writer, terse], "Terse") is terse
    assert find_preset([writer, terse], DEFAULT_PRESET) is None  # the settings' own


@pytest.mark.parametrize(
    ("content", "said"),
    [
        (b"{not json", "is damaged (not valid JSON"),
        (b'{"presets": 3}', 'is damaged (no "presets" list)'),
        (b"[[[[[[[[[[" * 20_000, "is damaged"),
    ],
)
def test_a_damaged_file_is_set_aside(tmp_path: Path, content: bytes, said: str) -> None:
    path = tmp_path / "presets.json"
    path.write_bytes(content)
    store = PresetStore(path)
    assert store.load() == []
    assert said in store.load_errors[0] and "kept as" in store.load_errors[0]
    assert not path.exists()  # moved aside, for the next save to start afresh


def test_values_of_the_wrong_type_are_left_to_the_settings(tmp_path: Path) -> None:
    path = tmp_path / "presets.json"
    path.write_text(json.dumps({"version": 1, "presets": [
        {"name": "Hot", "values": {"temperature": "very", "top_k": 12.0, "speculation": 1,
                                   "unknown": 5}},
        {"name": "hot", "values": {}},  # the same name again
        {"name": DEFAULT_PRESET, "values": {}},
        {"values": {}},
        "not an object",
    ]}), encoding="utf-8")  # fmt: skip
    store = PresetStore(path)
    [hot] = store.load()
    assert hot == Preset("Hot", {"top_k": 12})
    assert len(store.load_errors) == 6
    assert any("Temperature should be a number" in e for e in store.load_errors)


def test_names_and_values_are_checked_as_settings_are() -> None:
    assert name_problem("  ", []) == "A preset needs a name."
    assert "already a preset" in (name_problem("writer", ["Writer"]) or "")
    assert "settings' own" in (name_problem("default", []) or "")
    assert name_problem("Writer 2", ["Writer"]) is None
    hot = Preset("Hot", {"temperature": -1.0, "max_tokens": 0})
    problems = preset_problems(hot, Settings())
    assert len(problems) == 2 and all(p.startswith(("Temperature", "Max tokens")) for p in problems)
    # (a problem of a setting a preset does not hold is not the preset's)
    assert preset_problems(Preset("Ok", {}), Settings(threads=-5)) == []
