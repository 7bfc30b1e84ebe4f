"""Attaching documents on the real window, offscreen, with the real engine: a
real file dropped on the window or picked with the Attach button goes with
the message (the model reads it, the file keeps it, the chat shows it
collapsed); a binary file is refused, saying why; a document longer than the
context gets the prompt-size message with the way to a larger context."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest
from PySide6.QtCore import QMimeData, QPointF, Qt, QUrl
from PySide6.QtGui import QDragEnterEvent, QDropEvent, QFontMetrics
from PySide6.QtWidgets import QApplication, QFileDialog, QMessageBox, QToolButton, QWidget
from pytestqt.qtbot import QtBot

from gambit.storage.chat_store.conversations import ConversationStore
from gambit.storage.documents import Document, compose
from gambit.storage.settings import Settings, SettingsStore
from gambit.ui.window.chat_view import DOCUMENT_SCHEME
from gambit.ui.window.main_window import MainWindow

LOAD_TIMEOUT_MS = 120_000
REPLY_TIMEOUT_MS = 120_000
NOTES = (
    "Meeting notes, 3 March\n\n"
    "- The garden fence will be repaired by Friday.\n"
    "- Marta orders forty new chairs for the hall.\n"
)


@pytest.fixture
def window(qtbot: QtBot, tmp_path: Path, q4_1_first8: Path) -> Iterator[MainWindow]:
    settings = Settings(target_model=str(q4_1_first8), drafter="lookup", temperature=0.0,
                        max_tokens=6, context_size=1024, threads=2)  # fmt: skip
    SettingsStore(tmp_path / "settings.json").save(settings)
    w = MainWindow(SettingsStore(tmp_path / "settings.json"), ConversationStore(tmp_path / "c.db"))
    qtbot.addWidget(w)
    w.show()
    w.load_engine()
    qtbot.waitUntil(lambda: w.conversation.engine_info is not None, timeout=LOAD_TIMEOUT_MS)
    yield w
    w.close()


def drop(target: QWidget, *paths: Path) -> bool:
    """Drag ``paths`` over ``target`` and drop them, as a file manager does;
    whether the drop was taken."""
    data = QMimeData()
    data.setUrls([QUrl.fromLocalFile(str(p)) for p in paths])
    actions, button = Qt.DropAction.CopyAction, Qt.MouseButton.LeftButton
    enter = QDragEnterEvent(QPointF(20, 20), actions, data, button, Qt.KeyboardModifier(0))
    QApplication.sendEvent(target, enter)
    if not enter.isAccepted():
        return False
    dropped = QDropEvent(QPointF(20, 20), actions, data, button, Qt.KeyboardModifier(0))
    QApplication.sendEvent(target, dropped)
    return dropped.isAccepted()


def chips(window: MainWindow) -> list[str]:
    """The chips' texts; each has an icon and no character its font cannot draw
    (an emoji drew a box with the fonts the app ships with)."""
    found = window.attachment_bar.findChildren(QToolButton, "attachmentChip")
    for chip in found:
        assert not chip.icon().isNull()
        metrics = QFontMetrics(chip.font())
        assert all(metrics.inFontUcs4(ord(c)) for c in chip.text() if not c.isspace()), chip.text()
    return [c.text() for c in found]


def stored_contents(db: Path) -> list[tuple[str, str]]:
    with closing(sqlite3.connect(f"{db.as_uri()}?mode=ro", uri=True)) as conn:
        return conn.execute("SELECT role, content FROM messages ORDER BY id").fetchall()


def warning(qtbot: QtBot, window: MainWindow) -> QMessageBox:
    qtbot.waitUntil(lambda: window.findChild(QMessageBox, "warningDialog") is not None)
    box = window.findChild(QMessageBox, "warningDialog")
    assert isinstance(box, QMessageBox)
    return box


def test_a_dropped_file_goes_with_the_message_and_shows_collapsed(
    qtbot: QtBot, window: MainWindow, tmp_path: Path
) -> None:
    notes = tmp_path / "notes.md"
    notes.write_text(NOTES, encoding="utf-8")
    assert drop(window.input.viewport(), notes)  # on the input box: not pasted as a path
    assert window.input.toPlainText() == ""
    assert chips(window) == ["notes.md · 117 B  ✕"]
    window.input.setPlainText("Who orders the chairs?")
    qtbot.mouseClick(window.send_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not window.conversation.streaming, timeout=REPLY_TIMEOUT_MS)

    document = Document("notes.md", NOTES)
    question = compose("Who orders the chairs?", [document])
    assert stored_contents(tmp_path / "c.db")[0] == ("user", question)
    assert chips(window) == [] and not window.attachment_bar.isVisible()
    engine = window.worker._engine
    assert engine is not None and "Marta orders forty" in engine.target.detokenize(engine.context)
    shown = window.chat.toPlainText()
    assert "notes.md · 117 B" in shown and "Marta" not in shown  # collapsed
    assert "📄" not in shown  # (the style's file icon, an image, stands before the name)
    assert "gambit-icon:file" in window.chat.toHtml()
    window.chat.anchorClicked.emit(QUrl(f"{DOCUMENT_SCHEME}:0.0"))  # its Show link
    assert "Marta orders forty new chairs" in window.chat.toPlainText()
    assert window.store.get(window.conversation.id or -1).title == "Who orders the chairs?"


def test_a_picked_file_is_attached_and_a_binary_one_is_refused(
    qtbot: QtBot, window: MainWindow, tmp_path: Path
) -> None:
    data = tmp_path / "data.csv"
    data.write_text("name,chairs\nMarta,40\n", encoding="utf-8")
    qtbot.mouseClick(window.attach_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: window.findChild(QFileDialog, "attachDialog") is not None)
    dialog = window.findChild(QFileDialog, "attachDialog")
    assert isinstance(dialog, QFileDialog)
    dialog.selectFile(str(data))
    dialog.accept()
    assert chips(window) == ["data.csv · 21 B  ✕"]

    image = tmp_path / "photo.txt"  # named as text: its content decides
    image.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x01\x00")
    assert drop(window, image)
    box = warning(qtbot, window)
    assert box.windowTitle() == "Not attached"
    assert "photo.txt was not attached: it holds NUL bytes" in box.text()
    assert chips(window) == ["data.csv · 21 B  ✕"]  # the text file stays, alone
    box.close()


def test_a_document_longer_than_the_context_says_what_it_needs(
    qtbot: QtBot, window: MainWindow, tmp_path: Path
) -> None:
    long = tmp_path / "report.txt"
    long.write_text("The hall needs forty chairs and a new fence. " * 200, encoding="utf-8")
    assert drop(window, long)
    window.input.setPlainText("Summarise this report.")
    qtbot.mouseClick(window.send_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not window.conversation.streaming, timeout=REPLY_TIMEOUT_MS)
    qtbot.waitUntil(lambda: window.findChild(QMessageBox, "errorDialog") is not None)
    box = window.findChild(QMessageBox, "errorDialog")
    assert isinstance(box, QMessageBox)
    assert "the prompt needs" in box.text() and "are available" in box.text()
    assert "Settings → Models → Context size" in box.text()
