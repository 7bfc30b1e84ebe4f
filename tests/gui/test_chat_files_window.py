"""File → Import chats…, Export chat ▸, Export all chats ▸ on the real window
(offscreen, real SQLite history, no model): through the menus' actions and
their file dialogs, as a user goes."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QFileDialog, QLineEdit, QMenu, QMessageBox
from pytestqt.qtbot import QtBot

from gambit.storage.chat_files.chat_export import read_conversations, to_json
from gambit.storage.chat_store.conversations import ConversationStore
from gambit.storage.settings import SettingsStore
from gambit.ui.window.main_window import MainWindow


@pytest.fixture
def window(qtbot: QtBot, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[MainWindow]:
    monkeypatch.setenv("GAMBIT_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("HOME", str(tmp_path))  # where the dialogs start
    with ConversationStore(tmp_path / "conversations.sqlite3") as store:
        older = store.create("Older chat")
        store.add_message(older, "user", "Old question")
        store.add_message(
            older, "assistant", "Old answer", stats={"stop": "end of text", "tokens": 2}
        )
        recent = store.create("Recent chat: café")
        store.add_message(recent, "user", "What is a monad?")
        store.add_message(recent, "assistant", "A monoid in the category of endofunctors.")
    w = MainWindow(
        SettingsStore(tmp_path / "settings.json"),
        ConversationStore(tmp_path / "conversations.sqlite3"),
    )
    qtbot.addWidget(w)
    w.show()
    qtbot.waitExposed(w)
    yield w
    w.close()


def _action(window: MainWindow, name: str) -> QAction:
    action = window.findChild(QAction, name)
    assert isinstance(action, QAction), name
    return action


def _dialog(qtbot: QtBot, window: MainWindow, name: str) -> QFileDialog:
    found: list[QFileDialog] = []

    def shown() -> None:
        dialog = window.findChild(QFileDialog, name)
        assert isinstance(dialog, QFileDialog) and dialog.isVisible()
        found.append(dialog)

    qtbot.waitUntil(shown, timeout=3000)
    return found[-1]


def _choose(dialog: QFileDialog, path: Path) -> None:
    """Go to ``path``'s folder and type its name, as a user does (selectFile does
    not change a name field that has the focus), then press Save or Open."""
    dialog.setDirectory(str(path.parent))
    name = dialog.findChild(QLineEdit, "fileNameEdit")  # (Qt's own dialog, not the platform's)
    assert isinstance(name, QLineEdit)
    name.setText(path.name)
    dialog.accept()


def _dump(db: Path) -> list[str]:
    with closing(sqlite3.connect(db)) as conn:
        return list(conn.iterdump())


def _message_box(qtbot: QtBot, window: MainWindow, name: str) -> QMessageBox:
    found: list[QMessageBox] = []

    def shown() -> None:
        box = window.findChild(QMessageBox, name)
        assert isinstance(box, QMessageBox) and box.isVisible()
        found.append(box)

    qtbot.waitUntil(shown, timeout=3000)
    return found[-1]


def test_file_menu_holds_import_and_the_exports(window: MainWindow) -> None:
    file_menu = window.menuBar().findChild(QMenu, "fileMenu")
    assert isinstance(file_menu, QMenu)
    names = [a.objectName() for a in file_menu.actions() if not a.isSeparator()]
    assert names == ["newChatAction", "newFromPresetMenuAction", "attachAction",
                     "importChatsAction", "exportChatMenuAction", "exportAllMenuAction",
                     "quitAction"]  # fmt: skip
    for scope in ("Chat", "All"):
        sub = window.findChild(QMenu, f"export{scope}Menu")
        assert isinstance(sub, QMenu)
        inside = [a.objectName() for a in sub.actions()]
        assert inside == [f"export{scope}MarkdownAction", f"export{scope}JsonAction"]
    assert "Ctrl+O" in _action(window, "importChatsAction").toolTip()


def test_export_the_open_chat_as_json_and_all_as_markdown(
    qtbot: QtBot, window: MainWindow, tmp_path: Path
) -> None:
    assert window.store.get(window.conversation.id or -1).title == "Recent chat: café"
    _action(window, "exportChatJsonAction").trigger()
    dialog = _dialog(qtbot, window, "exportChatsDialog")
    assert dialog.acceptMode() == QFileDialog.AcceptMode.AcceptSave
    assert dialog.nameFilters() == ["JSON (*.json)"]
    assert dialog.selectedFiles()[0].endswith("gambit-recent-chat-café.json")
    target = tmp_path / "out" / "one.json"
    target.parent.mkdir()
    _choose(dialog, target)
    qtbot.waitUntil(target.is_file, timeout=3000)
    document = json.loads(target.read_text(encoding="utf-8"))
    assert [c["title"] for c in document["conversations"]] == ["Recent chat: café"]
    assert window.statusBar().currentMessage() == f"Exported “Recent chat: café” to {target}."

    _action(window, "exportAllMarkdownAction").trigger()
    dialog = _dialog(qtbot, window, "exportChatsDialog")
    assert dialog.nameFilters() == ["Markdown (*.md)"]
    _choose(dialog, tmp_path / "out" / "everything")  # typed without a suffix
    written = tmp_path / "out" / "everything.md"
    qtbot.waitUntil(written.is_file, timeout=3000)
    text = written.read_text(encoding="utf-8")
    assert "# Recent chat: café" in text and "# Older chat" in text and "*2 tokens*" in text
    assert window.statusBar().currentMessage() == f"Exported 2 conversations to {written}."


def test_import_adds_the_chats_to_the_sidebar_and_opens_the_first(
    qtbot: QtBot, window: MainWindow, tmp_path: Path
) -> None:
    with ConversationStore(tmp_path / "elsewhere.sqlite3") as elsewhere:
        conv = elsewhere.create("From the laptop")
        elsewhere.add_message(conv, "user", "Summarise this")
        elsewhere.add_message(conv, "assistant", "Done.", complete=False)
        exported = tmp_path / "laptop.json"
        exported.write_text(to_json(read_conversations(elsewhere)), encoding="utf-8")
    window.search.setText("monad")  # a search that hides the import: it is cleared
    before = window.list.count()

    _action(window, "importChatsAction").trigger()
    dialog = _dialog(qtbot, window, "importChatsDialog")
    assert dialog.fileMode() == QFileDialog.FileMode.ExistingFile
    _choose(dialog, exported)
    qtbot.waitUntil(lambda: window.list.count() == 3, timeout=3000)
    assert before == 1 and window.search.text() == ""

    (new,) = [c for c in window.store.list() if c.title == "From the laptop"]
    current = window.list.currentItem()
    assert current is not None and window.list.conversation_id(current) == new.id
    assert window.conversation.id == new.id
    assert [(m.role, m.text) for m in window.chat.messages] == [
        ("user", "Summarise this"),
        ("assistant", "Done."),
    ]
    assert window.statusBar().currentMessage() == (
        f"Imported 1 conversation with 2 messages from {exported} (a Gambit export)."
    )


def test_a_bad_file_is_refused_with_its_reason_and_changes_nothing(
    qtbot: QtBot, window: MainWindow, tmp_path: Path
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_bytes(b'{"messages": [{"role": "user", "content": "\xff"}]}')
    before = _dump(window.store.path)
    listed = [window.list.item(i).text() for i in range(window.list.count())]
    shown_id = window.conversation.id

    assert window.menus.chat_files.import_from(bad) is None
    box = _message_box(qtbot, window, "errorDialog")
    assert box.windowTitle() == "The file was not imported"
    assert box.text() == (
        f"Cannot import {bad}: it is not UTF-8 text (byte 0xff at offset 43). Nothing was imported."
    )
    box.close()
    assert _dump(window.store.path) == before
    assert [window.list.item(i).text() for i in range(window.list.count())] == listed
    assert window.conversation.id == shown_id


def test_what_an_import_leaves_out_is_said_in_a_box(
    qtbot: QtBot, window: MainWindow, tmp_path: Path
) -> None:
    path = tmp_path / "vision.json"
    message = {"role": "user", "content": [
        {"type": "text", "text": "Describe it"}, {"type": "image_url", "image_url": {}},
    ]}  # fmt: skip
    path.write_text(json.dumps({"messages": [message]}), encoding="utf-8")
    result = window.menus.chat_files.import_from(path)
    assert result is not None and window.conversation.id == result.ids[0]
    box = _message_box(qtbot, window, "warningDialog")
    assert box.windowTitle() == "Chats imported"
    assert box.text().endswith("Left out (Gambit keeps text only): 1 image_url part.")
    box.close()
