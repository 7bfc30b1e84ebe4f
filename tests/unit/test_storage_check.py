"""``--self-test``'s look at storage, on real files in a data folder of its own."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from gambit.storage import paths
from gambit.storage.chat_store.conversations import default_store_path
from gambit.storage.check import check_storage


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GAMBIT_HOME", str(tmp_path))
    return tmp_path


def test_a_fresh_home_has_no_problems() -> None:
    report = check_storage()
    assert report.problems == []
    assert any("writable" in finding for _, finding in report.lines)


def test_a_damaged_settings_file_is_a_problem_and_is_left_in_place() -> None:
    settings = paths.config_dir() / "settings.json"
    settings.parent.mkdir(parents=True)
    settings.write_text("[" * 100_000, encoding="utf-8")
    report = check_storage()
    assert len(report.problems) == 1 and report.problems[0].startswith("settings:")
    assert settings.read_text(encoding="utf-8") == "[" * 100_000  # only looked at


def test_a_damaged_history_is_a_problem() -> None:
    db = default_store_path()
    db.parent.mkdir(parents=True)
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE t (x)")
        conn.executemany("INSERT INTO t VALUES (?)", [("x" * 500,)] * 200)
    data = bytearray(db.read_bytes())
    data[4096 : 4096 + 2048] = b"\xff" * 2048  # garble the second page
    db.write_bytes(bytes(data))
    report = check_storage()
    assert [p.split(":")[0] for p in report.problems] == ["history"]


def test_a_nearly_full_disk_is_a_problem() -> None:
    report = check_storage(min_free_bytes=2**62)  # more than any disk holds
    assert {p.split(":")[0] for p in report.problems} == {"data folder", "config folder"}
    assert "MiB free" in report.problems[0]
