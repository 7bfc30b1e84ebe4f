"""Measured costs kept between loads (gambit.engine.gamma.calibration.CostStore)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gambit.engine.estimates import CostModel
from gambit.engine.gamma.calibration import CostStore


def measured(k_max: int = 9) -> CostModel:
    c = CostModel(k_max)
    for k in (1, 2, 3, 5, k_max):
        c.set_target(k, 0.010 * (1 + 0.2 * (k - 1)))
    c.t_draft = 0.001
    c.catch_up_ratio = 0.04
    c.read_ratio = 0.06
    c.draft_extra_ratio = 0.02
    return c


def test_costs_come_back_as_they_were_kept(tmp_path: Path) -> None:
    store = CostStore(tmp_path)
    store.save("pair", measured())
    back = CostStore(tmp_path).load("pair", 9)
    assert back is not None
    for k in range(1, 10):
        assert back.verify_cost(k) == pytest.approx(measured().verify_cost(k))
    assert back.t_draft == pytest.approx(0.001)
    assert back.catch_up_ratio == pytest.approx(0.04)
    assert back.read_ratio == pytest.approx(0.06)
    assert back.draft_extra_ratio == pytest.approx(0.02)
    assert store.load("another pair", 9) is None


def test_kept_costs_must_cover_every_batch_size(tmp_path: Path) -> None:
    store = CostStore(tmp_path)
    store.save("pair", measured(k_max=9))
    assert store.load("pair", 17) is None  # γ_max raised since: calibrate again


@pytest.mark.parametrize(
    "damage",
    [
        "not json at all",
        json.dumps(["a list"]),
        json.dumps({"pair": {"costs": {"t1": "fast", "ratio": {"9": 2.0}}}}),
        json.dumps({"pair": {"costs": {"t1": -1.0, "ratio": {"9": 2.0}}}}),
        json.dumps({"pair": {"costs": {"t1": 0.01, "ratio": {"9": float("nan")}}}}),
        json.dumps({"pair": {"costs": {"t1": 0.01, "ratio": {}}}}),
        json.dumps({"pair": "nothing"}),
    ],
)
def test_a_damaged_file_costs_a_calibration_not_a_start(tmp_path: Path, damage: str) -> None:
    (tmp_path / CostStore.FILE).write_text(damage, encoding="utf-8")
    store = CostStore(tmp_path)
    assert store.load("pair", 9) is None
    store.save("pair", measured())  # and is replaced by the next measurement
    assert store.load("pair", 9) is not None


def test_the_store_keeps_the_latest_pairs_only(tmp_path: Path) -> None:
    store = CostStore(tmp_path)
    for i in range(CostStore.KEPT + 5):
        store.save(f"pair {i}", measured())
    data = json.loads((tmp_path / CostStore.FILE).read_text(encoding="utf-8"))
    assert len(data) == CostStore.KEPT
    assert "pair 0" not in data and f"pair {CostStore.KEPT + 4}" in data


def test_without_a_folder_nothing_is_kept(tmp_path: Path) -> None:
    store = CostStore(None)
    store.save("pair", measured())
    assert store.load("pair", 9) is None
    assert list(tmp_path.iterdir()) == []


def test_a_full_disk_costs_the_next_load_a_calibration(tmp_path: Path) -> None:
    blocked = tmp_path / "file-not-folder"
    blocked.write_text("", encoding="utf-8")
    store = CostStore(blocked)  # its folder cannot be created
    store.save("pair", measured())  # logs, does not raise
    assert store.load("pair", 9) is None


def test_what_was_learned_is_kept_beside_the_costs(tmp_path: Path) -> None:
    store = CostStore(tmp_path)
    learned = {"options": {"model/0/draft model": {"acceptance": {"alpha": [0.7], "seen": [3]}}}}
    store.save("pair", measured())
    store.save_learned("learned pair", learned)
    back = CostStore(tmp_path)
    assert back.load_learned("learned pair") == learned
    assert back.load("pair", 9) is not None
    assert back.load_learned("pair") is None  # (a costs entry holds no learning)
    assert back.load("learned pair", 9) is None


def test_a_damaged_memory_costs_the_memory_not_a_start(tmp_path: Path) -> None:
    (tmp_path / CostStore.FILE).write_text('{"learned pair": {"learned": [1, 2]}}', "utf-8")
    assert CostStore(tmp_path).load_learned("learned pair") is None
    (tmp_path / CostStore.FILE).write_bytes(b"\xff\xfe{")
    assert CostStore(tmp_path).load_learned("learned pair") is None


def test_a_full_disk_costs_the_memory_not_the_session(tmp_path: Path) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("", encoding="utf-8")
    store = CostStore(blocked)  # (its folder is a file: every write fails)
    store.save_learned("learned pair", {"options": {}})
    assert store.load_learned("learned pair") is None
