"""The per-message actions on the real window, offscreen, with the real engine:
each from its context-menu entry or its key, and the SQLite file checked
afterwards. The target is SmolLM2's first 8 blocks (tests/conftest.py): the
subject is what happens to the messages, not their text, and its replies
are short; at temperature 0 it is batch-invariant here (Q4_1), so a reply
continued after a cut equals the reply never cut.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QAction, QGuiApplication
from PySide6.QtWidgets import QDialog, QLabel, QMenu, QMessageBox, QPushButton
from pytestqt.qtbot import QtBot

from gambit.engine.gamma.metrics import format_rate
from gambit.engine.text.continuation import KeptTokens
from gambit.storage.chat_store.conversations import ConversationStore, message_title
from gambit.storage.chat_store.rows import StoredMessage
from gambit.storage.prompts.continuing import KEPT_TOKENS, kept_record, kept_tokens
from gambit.storage.settings import Settings, SettingsStore
from gambit.ui.stats.stats_panel import PLACEHOLDER
from gambit.ui.window.main_window import MainWindow
from gambit.ui.window.message_actions import EditDialog

LOAD_TIMEOUT_MS = 120_000
REPLY_TIMEOUT_MS = 120_000
CTRL_SHIFT = Qt.KeyboardModifier.ControlModifier | Qt.KeyboardModifier.ShiftModifier


@pytest.fixture
def settings(q4_1_first8: Path) -> Settings:
    return Settings(
        target_model=str(q4_1_first8),
        drafter="lookup",
        temperature=0.0,
        max_tokens=6,
        context_size=1024,
        threads=2,
    )


def open_window(qtbot: QtBot, tmp_path: Path, settings: Settings) -> MainWindow:
    settings_path = tmp_path / "settings.json"
    SettingsStore(settings_path).save(settings)
    window = MainWindow(SettingsStore(settings_path), ConversationStore(tmp_path / "chats.db"))
    qtbot.addWidget(window)
    window.show()
    qtbot.waitExposed(window)
    window.activateWindow()
    window.load_engine()
    qtbot.waitUntil(lambda: window.conversation.engine_info is not None, timeout=LOAD_TIMEOUT_MS)
    return window


@pytest.fixture
def window(qtbot: QtBot, tmp_path: Path, settings: Settings) -> Iterator[MainWindow]:
    w = open_window(qtbot, tmp_path, settings)
    yield w
    w.close()


def wait_idle(qtbot: QtBot, window: MainWindow) -> None:
    qtbot.waitUntil(lambda: not window.conversation.streaming, timeout=REPLY_TIMEOUT_MS)


def send(qtbot: QtBot, window: MainWindow, text: str) -> None:
    window.input.setPlainText(text)
    qtbot.mouseClick(window.send_button, Qt.MouseButton.LeftButton)
    wait_idle(qtbot, window)


def rows(db: Path) -> list[tuple[Any, ...]]:
    """(conversation, id, role, content, complete) of every message, as the file holds them."""
    with closing(sqlite3.connect(f"{db.as_uri()}?mode=ro", uri=True)) as conn:
        return conn.execute(
            "SELECT conversation_id, id, role, content, complete FROM messages"
            " ORDER BY conversation_id, position"
        ).fetchall()


def stored(window: MainWindow) -> list[StoredMessage]:
    return window.store.messages(window.conversation.id or -1)


def menu_on(window: MainWindow, index: int) -> QMenu:
    """Message ``index``'s context menu, as a right-click there builds it."""
    return window.chat.message_menu_at(window.chat.message_point(index))


def entries(menu: QMenu) -> list[str]:
    """The message's own entries (after the text's: Copy, Select All)."""
    return [a.objectName() for a in menu.actions() if a.objectName().endswith("Action")]


def choose(menu: QMenu, name: str) -> None:
    [action] = [a for a in menu.actions() if a.objectName() == name]
    action.trigger()


def key(qtbot: QtBot, window: MainWindow, name: str) -> None:
    """Press the action's own shortcut, the input box focused (as when typing)."""
    action = window.findChild(QAction, name)
    assert isinstance(action, QAction)
    combo = action.shortcut()[0]
    qtbot.keyClick(window.input, combo.key(), combo.keyboardModifiers())


def confirm(qtbot: QtBot, window: MainWindow) -> str:
    """Accept the confirmation that is up; returns its question."""
    qtbot.waitUntil(lambda: window.findChild(QMessageBox, "confirmDialog") is not None)
    box = window.findChild(QMessageBox, "confirmDialog")
    assert isinstance(box, QMessageBox)
    text = box.text()
    button = box.findChild(QPushButton, "confirmButton")
    assert isinstance(button, QPushButton)
    button.click()
    qtbot.waitUntil(lambda: window.findChild(QMessageBox, "confirmDialog") is None)
    return text


def test_copy_and_edit_and_resend(qtbot: QtBot, window: MainWindow, tmp_path: Path) -> None:
    send(qtbot, window, "Name a colour.")
    send(qtbot, window, "Name a fruit.")
    reply = stored(window)[1]
    assert [m.role for m in stored(window)] == ["user", "assistant"] * 2
    # Each message's menu offers what fits it.
    assert entries(menu_on(window, 0)) == [
        "copyMessageAction", "editMessageAction", "branchAction", "deleteMessageAction",
    ]  # fmt: skip
    assert entries(menu_on(window, 1)) == [
        "copyMessageAction", "branchAction", "deleteMessageAction", "regenerateAction",
    ]  # fmt: skip

    choose(menu_on(window, 1), "copyMessageAction")
    assert QGuiApplication.clipboard().text() == reply.content
    window.chat.current = None  # the keys: from the last message, one up
    key(qtbot, window, "previousMessageAction")
    key(qtbot, window, "previousMessageAction")
    key(qtbot, window, "copyMessageAction")
    assert QGuiApplication.clipboard().text() == "Name a fruit."

    window.chat.select_message(0)
    key(qtbot, window, "editMessageAction")
    qtbot.waitUntil(lambda: window.findChild(QDialog, "editMessageDialog") is not None)
    dialog = window.findChild(QDialog, "editMessageDialog")
    assert isinstance(dialog, EditDialog)
    assert dialog.editor.toPlainText() == "Name a colour."
    note = dialog.findChild(QLabel, "editMessageNote")
    assert isinstance(note, QLabel) and "and the 3 messages after it" in note.text()
    dialog.editor.setPlainText("Name a planet.")
    dialog.send.click()
    wait_idle(qtbot, window)

    after = rows(tmp_path / "chats.db")
    assert [(r[2], r[3]) for r in after][:1] == [("user", "Name a planet.")]
    assert [r[2] for r in after] == ["user", "assistant"] and after[1][3] and after[1][4] == 1
    assert window.chat.messages[0].text == "Name a planet."
    # The title was made from the first message, so it follows the edit (list too).
    assert window.store.get(window.conversation.id or -1).title == "Name a planet."
    item = window.list.currentItem()
    assert item is not None and item.text() == "Name a planet."


def test_branch_delete_and_regenerate_any_reply(
    qtbot: QtBot, window: MainWindow, tmp_path: Path
) -> None:
    send(qtbot, window, "Name a colour.")
    send(qtbot, window, "Name a fruit.")
    source = window.conversation.id
    q1, a1, q2, _ = stored(window)

    choose(menu_on(window, 1), "branchAction")  # from the first reply
    branch = window.conversation.id
    assert branch != source and window.store.get(branch or -1).title.endswith("(branch)")
    assert window.list.currentItem() is not None
    assert window.list.conversation_id(window.list.currentItem()) == branch
    # Marked at the front, where eliding a long title cannot cut it.
    # With the message it was branched at, on a line of its own.
    assert window.list.currentItem().text() == (
        f"Branch · Name a colour.\n↳ at “{message_title(a1.content)}”"
    )
    db = rows(tmp_path / "chats.db")
    assert [(r[2], r[3]) for r in db if r[0] == branch] == [("user", q1.content),
                                                            ("assistant", a1.content)]  # fmt: skip
    assert len([r for r in db if r[0] == source]) == 4  # the source is unchanged

    key(qtbot, window, "deleteMessageAction")  # the branch's last message: its reply
    assert "this reply" in confirm(qtbot, window)
    assert [(r[2], r[3]) for r in rows(tmp_path / "chats.db") if r[0] == branch] == [
        ("user", q1.content)
    ]
    assert [m.role for m in window.chat.messages] == ["user"]

    window.conversation.open(source or -1)
    choose(menu_on(window, 1), "regenerateAction")  # a reply with two messages after it
    assert "The 2 messages after it will be deleted" in confirm(qtbot, window)
    wait_idle(qtbot, window)
    again = [(r[2], r[3], r[4]) for r in rows(tmp_path / "chats.db") if r[0] == source]
    assert [r[:2] for r in again][:1] == [("user", q1.content)]
    assert [r[0] for r in again] == ["user", "assistant"] and again[1][1] and again[1][2] == 1
    assert q2.content not in [r[1] for r in again]  # the messages after it went


def test_an_action_that_cannot_read_the_conversation_says_which(
    qtbot: QtBot, window: MainWindow, monkeypatch: pytest.MonkeyPatch
) -> None:
    send(qtbot, window, "Name a colour.")
    errors: list[tuple[str, str]] = []
    monkeypatch.setattr(window, "show_error", lambda title, message, warning=False: errors.append(
        (title, message)))  # fmt: skip

    def unreadable(conversation_id: int) -> list[StoredMessage]:
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(window.store, "messages", unreadable)
    for name, done in (
        ("editMessageAction", "edited"),
        ("branchAction", "branched"),
        ("deleteMessageAction", "deleted"),
        ("regenerateAction", "regenerated"),
    ):
        choose(menu_on(window, 1 if name != "editMessageAction" else 0), name)
        assert errors[-1][0] == f"The message could not be {done}", errors
    assert all("disk I/O error" in message for _, message in errors)


def test_the_panel_follows_the_reply_you_look_at(qtbot: QtBot, window: MainWindow) -> None:
    def shown(name: str) -> str:
        label = window.stats.findChild(QLabel, name)
        assert isinstance(label, QLabel)
        return label.text()

    def settled(stats: dict[str, Any] | None) -> None:
        """The panel shows ``stats``'s rate (after its repaint), or nothing."""
        want = format_rate(stats["tokens_per_s"]) if stats else PLACEHOLDER
        qtbot.waitUntil(lambda: shown("tokensPerSecondValue") == want, timeout=5000)

    send(qtbot, window, "Name a colour.")
    send(qtbot, window, "Name a fruit.")
    first = window.conversation.id or -1
    colour, fruit = stored(window)[1], stored(window)[3]
    assert colour.stats and fruit.stats and colour.stats["series"]
    settled(fruit.stats)  # live: the reply just written
    assert not window.stats.findChild(QLabel, "scopeValue").isVisible()  # type: ignore[union-attr]

    window.chat.select_message(1)  # an earlier reply: its stored figures, said to be
    settled(colour.stats)
    assert shown("scopeValue") == "Figures stored with the selected reply."
    assert shown("gammaValue") == str(colour.stats["gamma"])
    window.chat.select_message(2)  # a question has none of its own: the panel stays
    settled(colour.stats)
    window.chat.select_message(3)  # the reply that streamed: as it was stored
    settled(fruit.stats)

    other = window.store.create("Elsewhere")
    window.store.add_message(other, "user", "Hello?")
    window.conversation.open(other)  # no reply: no figure
    settled(None)
    figures = {"tokens": 40, "tokens_per_s": 12.5, "acceptance_by_position": [0.5, "x"]}
    window.store.add_message(other, "assistant", "Hi.", stats=figures)
    window.conversation.show(other)  # a record another program wrote: what holds is shown
    settled(figures)
    assert shown("acceptanceValue") == PLACEHOLDER

    window.conversation.open(first)  # back: its last reply's figures
    settled(fruit.stats)
    key(qtbot, window, "deleteMessageAction")  # the last message: the reply shown
    assert "this reply" in confirm(qtbot, window)
    settled(colour.stats)  # the reply now last, never the deleted one's


STORY = "Write a long story about a lighthouse keeper."


def fresh_reply(qtbot: QtBot, window: MainWindow, max_tokens: int) -> str:
    """The reply to STORY in a new conversation, ``max_tokens`` long at most."""
    window.apply_settings(window.settings.with_(max_tokens=max_tokens))
    window.conversation.new()
    send(qtbot, window, STORY)
    return stored(window)[-1].content


def test_continue_after_the_length_limit_and_after_stop(
    qtbot: QtBot, window: MainWindow, tmp_path: Path
) -> None:
    send(qtbot, window, STORY)  # cut at 6 tokens
    q, cut = stored(window)
    assert cut.stats is not None and cut.stats["stop"] == "max tokens" and cut.complete
    assert len((kept_tokens(cut.stats) or pytest.fail("no tokens kept")).ids) == 6
    assert window.continue_button.isEnabled()
    assert entries(menu_on(window, 1))[-1] == "continueAction"
    key(qtbot, window, "continueAction")
    wait_idle(qtbot, window)
    [_, continued] = stored(window)
    assert continued.id == cut.id and continued.content.startswith(cut.content)
    assert continued.stats is not None and continued.stats["tokens"] == 12
    assert continued.stats["continued"] == 1 and "continued" in window.chat.messages[-1].footer
    assert len((kept_tokens(continued.stats) or pytest.fail()).ids) == 12  # cut again
    scope = window.stats.findChild(QLabel, "scopeValue")  # the panel says whose figures
    assert isinstance(scope, QLabel)
    assert scope.text() == "Figures of the reply's last part (it was continued)."
    conv_id = window.conversation.id or -1
    window.conversation.new()
    window.conversation.open(conv_id)  # reopened: as stored
    assert scope.text() == (
        "Figures stored with the selected reply: its last part (it was continued)."
    )
    assert [r[1:] for r in rows(tmp_path / "chats.db")] == [
        (q.id, "user", STORY, 1), (cut.id, "assistant", continued.content, 1)
    ]  # fmt: skip

    # Stopped part-way (any number of tokens), then continued by 6.
    window.apply_settings(window.settings.with_(max_tokens=400))
    window.conversation.new()
    deltas: list[object] = []
    window.worker.delta.connect(deltas.append)
    window.input.setPlainText(STORY)
    qtbot.mouseClick(window.send_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: len(deltas) >= 3, timeout=REPLY_TIMEOUT_MS)
    qtbot.mouseClick(window.stop_button, Qt.MouseButton.LeftButton)
    wait_idle(qtbot, window)
    stopped = stored(window)[-1]
    assert not stopped.complete and stopped.stats and stopped.stats["stop"] == "cancelled"
    n_stopped = len((kept_tokens(stopped.stats) or pytest.fail()).ids)
    window.apply_settings(window.settings.with_(max_tokens=6))
    qtbot.mouseClick(window.continue_button, Qt.MouseButton.LeftButton)
    wait_idle(qtbot, window)
    resumed = stored(window)[-1]
    assert resumed.id == stopped.id and resumed.content.startswith(stopped.content)

    # At temperature 0 each equals the reply that was never cut.
    assert fresh_reply(qtbot, window, 12) == continued.content
    assert fresh_reply(qtbot, window, n_stopped + 6) == resumed.content


def test_continue_goes_on_from_the_tokens_kept_with_the_reply(
    qtbot: QtBot, window: MainWindow
) -> None:
    """Not from its text tokenized again: a model may spell a text otherwise
    than tokenizing it does. Here the kept tokens spell the reply's text one
    character at a time, and the continuation starts from exactly those."""
    send(qtbot, window, STORY)  # cut at 6 tokens
    _, cut = stored(window)
    engine = window.worker._engine
    assert engine is not None and cut.stats is not None
    spelt = tuple(t for c in cut.content for t in engine.tokenize_text(c))
    assert spelt != (kept_tokens(cut.stats) or pytest.fail()).ids
    kept = kept_record(KeptTokens(engine.tokenizer_fingerprint, spelt))
    window.store.update_message(cut.id, cut.content, True, {**cut.stats, KEPT_TOKENS: kept})
    key(qtbot, window, "continueAction")
    wait_idle(qtbot, window)
    [_, continued] = stored(window)
    assert continued.content.startswith(cut.content) and len(continued.content) > len(cut.content)
    ids = (kept_tokens(continued.stats) or pytest.fail()).ids
    assert ids[: len(spelt)] == spelt and len(ids) == len(spelt) + 6


# The window in a process of its own, killed (SIGKILL: no closeEvent, no
# clean-up of any kind) right after the first autosave that wrote part of the
# reply with its tokens. The autosave comes every 50 ms here instead of every
# second, so that it comes long before a 900-token reply could end.
KILL_DRIVER = """
import os, signal, sys
from pathlib import Path
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication
from gambit.qt import compat
from gambit.storage.prompts.continuing import kept_tokens
from gambit.storage.chat_store.conversations import ConversationStore, message_title
from gambit.storage.settings import SettingsStore
from gambit.ui.window import reply_flow
from gambit.ui.window.main_window import MainWindow

reply_flow.AUTOSAVE_MS = 50
app = QApplication([])
compat.install()
window = MainWindow(SettingsStore(Path(sys.argv[1])), ConversationStore(Path(sys.argv[2])))
window.show()

def send_when_loaded():
    if window.conversation.engine_info is not None:
        poll.stop()
        window.input.setPlainText(sys.argv[3])
        window.send()

def kill_once_saved():  # (connected after the autosave's own slot: runs after its write)
    reply = window.store.messages(window.conversation.id)[-1]
    if reply.role == "assistant" and reply.content and kept_tokens(reply.stats):
        os.kill(os.getpid(), signal.SIGKILL)

def ended():
    print("the reply ended before an autosave held tokens")
    app.exit(3)

poll = QTimer()
poll.timeout.connect(send_when_loaded)
window.replies._autosave.timeout.connect(kill_once_saved)
window.replies.ended.connect(ended)
window.load_engine()
poll.start(50)
app.exec()
"""


def autosaved(db: Path) -> tuple[str, bool, dict[str, Any]]:
    """The reply as the file holds it: its text, whether complete, its stats."""
    with closing(sqlite3.connect(f"{db.as_uri()}?mode=ro", uri=True)) as conn:
        [(content, complete, stats)] = conn.execute(
            "SELECT content, complete, stats FROM messages WHERE role = 'assistant'"
        ).fetchall()
    return content, bool(complete), json.loads(stats)


def test_continue_a_reply_autosaved_before_the_window_was_killed(
    qtbot: QtBot, tmp_path: Path, settings: Settings
) -> None:
    settings_path, db = tmp_path / "settings.json", tmp_path / "chats.db"
    SettingsStore(settings_path).save(settings.with_(max_tokens=900))
    env = {**os.environ, "GAMBIT_HOME": str(tmp_path / "home"), "QT_QPA_PLATFORM": "offscreen"}
    killed = subprocess.run(
        [sys.executable, "-c", KILL_DRIVER, str(settings_path), str(db), STORY],
        env=env, capture_output=True, text=True, timeout=LOAD_TIMEOUT_MS / 1000,
    )  # fmt: skip
    assert killed.returncode == -signal.SIGKILL, killed.stdout + killed.stderr
    text, complete, stats = autosaved(db)
    assert text and not complete and stats["stop"] == "interrupted"
    n_saved = len((kept_tokens(stats) or pytest.fail("no tokens kept")).ids)

    SettingsStore(settings_path).save(settings.with_(max_tokens=6))
    window = MainWindow(SettingsStore(settings_path), ConversationStore(db))
    qtbot.addWidget(window)
    window.show()
    window.load_engine()
    qtbot.waitUntil(lambda: window.conversation.engine_info is not None, timeout=LOAD_TIMEOUT_MS)
    try:
        assert window.chat.messages[-1].text == text and window.continue_button.isEnabled()
        qtbot.mouseClick(window.continue_button, Qt.MouseButton.LeftButton)
        wait_idle(qtbot, window)
        [_, resumed] = stored(window)
        assert resumed.content.startswith(text) and len(resumed.content) > len(text)
        assert fresh_reply(qtbot, window, n_saved + 6) == resumed.content
    finally:
        window.close()
