"""No error leaves the window "generating", and no typed or streamed text is lost.

Real widgets offscreen, the real engine and the small real model.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QMessageBox
from pytestqt.qtbot import QtBot

from gambit.storage.chat_store.conversations import ConversationStore
from gambit.storage.chat_store.recovery import open_history
from gambit.storage.settings import Settings, SettingsStore
from gambit.ui.window.main_window import MainWindow

LOAD_TIMEOUT_MS = 120_000
REPLY_TIMEOUT_MS = 120_000


@pytest.fixture
def settings(smol_q4_1: Path) -> Settings:
    return Settings(
        target_model=str(smol_q4_1),
        drafter="none",
        temperature=0.0,
        max_tokens=8,
        context_size=1024,
        threads=2,
    )


def open_window(qtbot: QtBot, settings_path: Path, db_path: Path) -> MainWindow:
    window = MainWindow(SettingsStore(settings_path), ConversationStore(db_path))
    qtbot.addWidget(window)
    window.show()
    window.load_engine()
    qtbot.waitUntil(lambda: window.conversation.engine_info is not None, timeout=LOAD_TIMEOUT_MS)
    return window


def error_box(qtbot: QtBot, window: MainWindow) -> QMessageBox:
    qtbot.waitUntil(lambda: window.findChild(QMessageBox, "errorDialog") is not None)
    box = window.findChild(QMessageBox, "errorDialog")
    assert box is not None
    return box


def click_send(qtbot: QtBot, window: MainWindow, text: str) -> None:
    window.input.setPlainText(text)
    qtbot.mouseClick(window.send_button, Qt.MouseButton.LeftButton)


def assert_idle(window: MainWindow) -> None:
    assert not window.conversation.streaming
    assert window.send_button.isEnabled() and not window.stop_button.isEnabled()
    assert window.list.isEnabled() and window.new_button.isEnabled()


def test_a_setting_that_fails_validation_at_send(
    qtbot: QtBot, tmp_path: Path, settings: Settings
) -> None:
    settings_path = tmp_path / "settings.json"
    SettingsStore(settings_path).save(settings)
    data = json.loads(settings_path.read_text())
    settings_path.write_text(json.dumps({**data, "top_p": 2}))  # a hand edit
    window = open_window(qtbot, settings_path, tmp_path / "conversations.sqlite3")
    click_send(qtbot, window, "Hello there")
    box = error_box(qtbot, window)
    assert "Top-p must be more than 0 and at most 1." in box.text()
    assert_idle(window)
    assert window.input.toPlainText() == "Hello there"  # not lost
    assert window.store.messages(window.conversation.id or -1) == []  # nothing half-stored
    box.close()
    window.apply_settings(window.settings.with_(top_p=0.9))
    click_send(qtbot, window, window.input.toPlainText())
    qtbot.waitUntil(lambda: not window.conversation.streaming, timeout=REPLY_TIMEOUT_MS)
    stored = window.store.messages(window.conversation.id or -1)
    assert [m.role for m in stored] == ["user", "assistant"]
    assert stored[1].complete and window.input.toPlainText() == ""
    window.close()


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Iterator[Path | None]:
    """A 256 KiB tmpfs under tmp_path where this test may mount one (root on
    Linux), else None: the test then makes the database itself full."""
    mount = tmp_path / "tiny"
    mount.mkdir()
    if not sys.platform.startswith("linux") or os.geteuid() != 0:
        yield None
        return
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mount)],
        capture_output=True,
        check=False,
    )
    if done.returncode != 0:  # a container without the right to mount
        yield None
        return
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def make_full(store: ConversationStore, disk: Path | None) -> Callable[[], None]:
    """Leave no room for the store to grow; returns the function that makes room again.

    On the tiny file system a filler file takes the free space, as on a real
    full disk. Without one, ``PRAGMA max_page_count`` stops the database at its
    current size: SQLite then fails writes that need a new page with the same
    SQLITE_FULL error ("database or disk is full") that a full disk gives.
    """
    if disk is None:
        (pages,) = store._conn.execute("PRAGMA page_count").fetchone()
        store._conn.execute(f"PRAGMA max_page_count = {pages}")
        return lambda: store._conn.execute("PRAGMA max_page_count = 1000000").close()
    filler = disk / "filler"
    try:
        with filler.open("wb") as f:
            while True:
                f.write(b"\0" * 4096)
                f.flush()
    except OSError:
        pass  # ENOSPC: the disk is full
    return filler.unlink


def test_send_on_a_full_disk_keeps_the_message(
    qtbot: QtBot, tmp_path: Path, settings: Settings, tiny_disk: Path | None
) -> None:
    settings_path = tmp_path / "settings.json"
    SettingsStore(settings_path).save(settings)
    db_path = (tiny_disk or tmp_path) / "conversations.sqlite3"
    window = open_window(qtbot, settings_path, db_path)
    make_room = make_full(window.store, tiny_disk)
    long_message = "Please summarise this. " + "All work and no play. " * 1500  # ~33 KB
    click_send(qtbot, window, long_message)
    box = error_box(qtbot, window)
    assert "not sent" in box.windowTitle() and "database or disk is full" in box.text()
    assert_idle(window)
    assert window.input.toPlainText() == long_message  # still there, as typed
    assert window.chat.messages == []
    box.close()

    make_room()
    click_send(qtbot, window, window.input.toPlainText())
    qtbot.waitUntil(lambda: not window.conversation.streaming, timeout=REPLY_TIMEOUT_MS)
    assert [m.role for m in window.store.messages(window.conversation.id or -1)] == [
        "user",
        "assistant",
    ]
    window.close()


def test_a_failed_save_at_the_end_of_a_reply_leaves_the_window_idle(
    qtbot: QtBot, tmp_path: Path, settings: Settings
) -> None:
    settings_path = tmp_path / "settings.json"
    db_path = tmp_path / "conversations.sqlite3"
    SettingsStore(settings_path).save(settings.with_(max_tokens=2000))
    window = open_window(qtbot, settings_path, db_path)
    window.store._conn.execute("PRAGMA busy_timeout = 100")  # not 5 s per attempt in a test
    deltas: list[object] = []
    window.worker.delta.connect(deltas.append)
    click_send(qtbot, window, "Write a long story about a lighthouse keeper.")
    qtbot.waitUntil(lambda: len(deltas) >= 3, timeout=REPLY_TIMEOUT_MS)
    with closing(sqlite3.connect(db_path, isolation_level=None)) as other:
        other.execute("BEGIN IMMEDIATE")  # another process keeps the write lock
        qtbot.waitUntil(
            lambda: "not being saved" in window.statusBar().currentMessage(),
            timeout=REPLY_TIMEOUT_MS,
        )  # the save once a second failed; the reply goes on
        assert window.conversation.streaming
        qtbot.mouseClick(window.stop_button, Qt.MouseButton.LeftButton)
        qtbot.waitUntil(lambda: not window.conversation.streaming, timeout=REPLY_TIMEOUT_MS)
        box = error_box(qtbot, window)
        other.execute("ROLLBACK")
    assert "could not be saved" in box.windowTitle()
    assert "in use by another Gambit window or process" in box.text()
    assert_idle(window)
    assert window.chat.messages[-1].text  # the reply is still on screen
    window.close()


KILL_DRIVER = """
import sys
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication
from gambit.storage.chat_store.conversations import default_store_path
from gambit.storage.chat_store.recovery import open_history
from gambit.storage.settings import SettingsStore
from gambit.ui.window.main_window import MainWindow

app = QApplication([])
history = open_history(default_store_path())
window = MainWindow(SettingsStore(), history.store, history_notice=history.notice)
window.show()
window.load_engine()

def send_when_loaded():
    if window.conversation.engine_info is not None:
        poll.stop()
        window.input.setPlainText(sys.argv[1])
        window.send()
        print("sent", window.conversation.streaming, flush=True)

poll = QTimer()
poll.timeout.connect(send_when_loaded)
poll.start(50)
app.exec()
"""


def saved_reply(db_path: Path) -> str:
    """The assistant's text as the file holds it now ("" if none yet)."""
    if not db_path.is_file():
        return ""
    try:
        with closing(sqlite3.connect(f"{db_path.as_uri()}?mode=ro", uri=True)) as conn:
            row = conn.execute("SELECT content FROM messages WHERE role = 'assistant'").fetchone()
    except sqlite3.Error:  # the schema is not there yet
        return ""
    return str(row[0]) if row else ""


def test_kill_mid_reply_keeps_what_was_streamed(
    tmp_path: Path, settings: Settings, smol_q4_1: Path
) -> None:
    SettingsStore(tmp_path / "config" / "settings.json").save(
        settings.with_(max_tokens=2000, threads=1)
    )
    db_path = tmp_path / "data" / "conversations.sqlite3"
    env = {**os.environ, "GAMBIT_HOME": str(tmp_path), "QT_QPA_PLATFORM": "offscreen"}
    prompt = "Write a very long story about a dragon who learns to read."
    proc = subprocess.Popen(
        [sys.executable, "-c", KILL_DRIVER, prompt],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    seen: list[str] = []
    try:
        deadline = time.monotonic() + REPLY_TIMEOUT_MS / 1000
        # Two different saves while it streams: it is written as it grows.
        while len(seen) < 2 and time.monotonic() < deadline and proc.poll() is None:
            text = saved_reply(db_path)
            if text and (not seen or text != seen[-1]):
                seen.append(text)
            time.sleep(0.1)
        alive = proc.poll() is None
    finally:
        proc.kill()  # SIGKILL: no closeEvent, no clean-up of any kind
        output, _ = proc.communicate(timeout=30)
    assert alive and len(seen) == 2, output
    assert "sent True" in output
    assert seen[1].startswith(seen[0]) and len(seen[1]) > len(seen[0])

    reopened = open_history(db_path)
    assert reopened.notice is None  # a kill does not damage the file
    with reopened.store as store:
        [conv] = store.list()
        user, reply = store.messages(conv.id)
    assert user.content == prompt
    assert reply.role == "assistant" and not reply.complete
    assert reply.content.startswith(seen[1])  # at least what was seen saved, maybe more
    assert reply.stats is not None and reply.stats["stop"] == "interrupted"
