"""What ``gambit --self-test`` says about the files Gambit keeps: readable,
writable, room left. It only reads: repairing is the app's job at start-up
(storage.chat_store.recovery, SettingsStore, ModelLibrary), which also tells the user."""

from __future__ import annotations

import contextlib
import json
import shutil
import sqlite3
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from gambit.storage import paths
from gambit.storage.chat_store.conversations import default_store_path
from gambit.storage.settings import SettingsStore

# Below this, a reply or a derived draft may not fit: say so before it happens.
MIN_FREE_BYTES = 200 * 1024 * 1024


@dataclass
class StorageReport:
    lines: list[tuple[str, str]] = field(default_factory=list)  # (what, finding)
    problems: list[str] = field(default_factory=list)

    def ok(self, what: str, finding: str) -> None:
        self.lines.append((what, finding))

    def bad(self, what: str, finding: str) -> None:
        self.lines.append((what, "PROBLEM: " + finding))
        self.problems.append(f"{what}: {finding}")


def _json_file(report: StorageReport, what: str, path: Path, recovery: str) -> None:
    if not path.exists():
        report.ok(what, f"{path} (not created yet)")
        return
    try:
        json.loads(path.read_bytes())
    except (OSError, ValueError, RecursionError) as exc:
        report.bad(what, f"{path} cannot be read ({type(exc).__name__}); {recovery}")
        return
    report.ok(what, f"{path} ok")


def _database(report: StorageReport, path: Path) -> None:
    if not path.exists():
        report.ok("history", f"{path} (not created yet)")
        return
    try:
        with contextlib.closing(
            sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True, timeout=2.0)
        ) as db:
            rows = db.execute("PRAGMA quick_check").fetchall()
    except sqlite3.OperationalError as exc:
        if "locked" in str(exc):
            report.bad("history", f"{path} is in use by another Gambit window or process")
        else:
            report.bad("history", f"{path} cannot be opened ({exc})")
        return
    except sqlite3.DatabaseError as exc:
        report.bad("history", f"{path} is damaged ({exc}); the app will set it aside at start")
        return
    if rows != [("ok",)]:
        report.bad("history", f"{path} is damaged ({rows[0][0]}); the app will set it aside")
        return
    report.ok("history", f"{path} ok")


def _folder(report: StorageReport, what: str, folder: Path, min_free: int) -> None:
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".selftest-") as f:
            f.write(b"x" * 4096)
            f.flush()
        free = shutil.disk_usage(folder).free
    except OSError as exc:
        report.bad(what, f"{folder} is not writable ({exc.strerror or exc})")
        return
    if free < min_free:
        report.bad(what, f"{folder}: only {free / 2**20:.0f} MiB free on its disk")
        return
    report.ok(what, f"{folder} writable, {free / 2**30:.1f} GiB free")


def check_storage(min_free_bytes: int = MIN_FREE_BYTES) -> StorageReport:
    report = StorageReport()
    _folder(report, "data folder", paths.data_dir(), min_free_bytes)
    _folder(report, "config folder", paths.config_dir(), min_free_bytes)
    _json_file(
        report, "settings", SettingsStore().path,
        "the app will set it aside and use the defaults",
    )  # fmt: skip
    _json_file(
        report, "model library", paths.library_index(),
        "the app will set it aside and rescan the models folder",
    )  # fmt: skip
    _database(report, default_store_path())
    return report
