"""A damaged or locked chat history at start: the window opens and says what happened."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path

import pytest
from PySide6.QtWidgets import QLabel, QMessageBox
from pytestqt.qtbot import QtBot

from gambit.models.default_model import DEFAULT_MODEL_FILE
from gambit.storage.chat_store import conversations as conv_module
from gambit.storage.chat_store.conversations import ConversationStore
from gambit.storage.chat_store.recovery import open_history
from gambit.storage.settings import SettingsStore
from gambit.ui.window.main_window import MainWindow


def window_for(qtbot: QtBot, tmp_path: Path, db_path: Path) -> MainWindow:
    history = open_history(db_path)
    window = MainWindow(
        SettingsStore(tmp_path / "settings.json"), history.store, history_notice=history.notice
    )
    qtbot.addWidget(window)
    window.show()
    return window


def test_damaged_history_is_replaced_and_the_window_says_so(qtbot: QtBot, tmp_path: Path) -> None:
    db_path = tmp_path / "conversations.sqlite3"
    db_path.write_bytes(b"\x00garbage" * 1000)
    window = window_for(qtbot, tmp_path, db_path)
    box = window.findChild(QMessageBox, "warningDialog")
    assert box is not None and "damaged" in box.text() and "moved aside" in box.text()
    assert window.findChild(QLabel, "historyNotSavedLabel") is None  # the new file is saved
    assert window.conversation.id is not None  # a new, empty chat to type into
    window.close()


def test_locked_history_opens_in_memory_with_a_warning(
    qtbot: QtBot, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(conv_module, "LOCK_TIMEOUT_S", 0.2)
    db_path = tmp_path / "conversations.sqlite3"
    with ConversationStore(db_path) as store:
        store.create("saved before")
    with closing(sqlite3.connect(db_path, isolation_level=None)) as other:
        other.execute("BEGIN IMMEDIATE")
        window = window_for(qtbot, tmp_path, db_path)
        other.execute("ROLLBACK")
    box = window.findChild(QMessageBox, "warningDialog")
    assert box is not None and "in use by another Gambit window or process" in box.text()
    assert window.findChild(QLabel, "historyNotSavedLabel") is not None
    assert "saved before" in [window.list.item(i).text() for i in range(window.list.count())]
    window.close()


START_DRIVER = """
import sys
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication, QMessageBox
import gambit.ui.app as entry

real_exec = QApplication.exec

def exec_briefly(*_args):
    def report_and_close():
        for w in QApplication.topLevelWidgets():
            box = w.findChild(QMessageBox, "warningDialog")
            if box is not None:
                print("notice:", box.text().replace("\\n", " "))
        QApplication.closeAllWindows()
    QTimer.singleShot(1500, report_and_close)
    return real_exec()

QApplication.exec = exec_briefly
sys.exit(entry.main([]))
"""


def test_the_app_starts_on_a_truncated_history(smol_q4_1: Path, tmp_path: Path) -> None:
    models = tmp_path / "data" / "models"
    models.mkdir(parents=True)
    (models / DEFAULT_MODEL_FILE).symlink_to(smol_q4_1)  # no download
    db_path = tmp_path / "data" / "conversations.sqlite3"
    with ConversationStore(db_path) as store:
        for i in range(20):
            conv = store.create(f"chat {i}")
            store.add_message(conv, "user", "question " * 200)
    with db_path.open("r+b") as f:
        f.truncate(db_path.stat().st_size // 2)
    env = {**os.environ, "GAMBIT_HOME": str(tmp_path), "QT_QPA_PLATFORM": "offscreen"}
    proc = subprocess.run(
        [sys.executable, "-c", START_DRIVER],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "notice: The chat history was damaged" in proc.stdout
    assert "could be read back from it and were kept" in proc.stdout
    assert list(db_path.parent.glob("conversations.sqlite3.corrupt-*"))
    with ConversationStore(db_path) as store:
        assert store.list()  # what was salvaged is in the new file
