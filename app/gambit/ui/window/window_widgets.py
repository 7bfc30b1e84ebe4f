"""The small widgets the main window is made of, and its message boxes."""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any, TypeVar

from PySide6.QtCore import QObject, QPoint, QSize, Qt, QTimer, Signal, Slot
from PySide6.QtGui import QKeyEvent
from PySide6.QtWidgets import (
    QDialog,
    QHBoxLayout,
    QInputDialog,
    QListWidget,
    QListWidgetItem,
    QMenu,
    QMessageBox,
    QPlainTextEdit,
    QStyle,
    QStyledItemDelegate,
    QStyleOptionViewItem,
    QToolButton,
    QWidget,
)

from gambit.qt.worker import EngineInfo
from gambit.storage.chat_store.conversations import BRANCH_SUFFIX
from gambit.storage.chat_store.rows import ConversationSummary
from gambit.storage.documents import Document, format_size

_W = TypeVar("_W", bound=QObject)


def named(obj: _W, name: str) -> _W:
    """Give a widget the objectName that tests and style sheets find it by."""
    obj.setObjectName(name)
    return obj


class InputEdit(QPlainTextEdit):
    """Enter sends, Shift+Enter starts a new line."""

    submitted = Signal()
    # Its own keys (not actions), as Help → Keyboard shortcuts lists them.
    KEYS: tuple[tuple[str, str], ...] = (
        ("Send the message", "Return"),
        ("Start a new line in the message", "Shift+Return"),
    )

    def keyPressEvent(self, event: QKeyEvent) -> None:  # noqa: N802 - Qt override
        if event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter) and not (
            event.modifiers() & Qt.KeyboardModifier.ShiftModifier
        ):
            self.submitted.emit()
            return
        super().keyPressEvent(event)


class _ElidingDelegate(QStyledItemDelegate):
    """Items as wide as the list, not as their text: a list view lays items out at
    their natural width, so a long title would scroll sideways instead of eliding."""

    def sizeHint(self, option: QStyleOptionViewItem, index: Any) -> QSize:  # noqa: N802
        hint = super().sizeHint(option, index)
        return QSize(1, hint.height())


def speculation_text(info: EngineInfo | None, on: bool, policy: str) -> str:
    """The status bar's word on speculation: "Speculation: draft model, adaptive"."""
    if info is None or info.drafter_label is None:
        return "Speculation: no drafter"
    return f"Speculation: {info.drafter_label}, {policy}" if on else "Speculation: off"


def list_title(title: str, branched_from: str = "") -> str:
    """A conversation's title as the list shows it: a branch marked at the front,
    which eliding a long title never cuts ("Branch · Explain in three…"), and
    on a second line the message it was branched at ("↳ at “The sky is…”")."""
    if title.endswith(BRANCH_SUFFIX) and len(title) > len(BRANCH_SUFFIX):
        title = f"Branch · {title.removesuffix(BRANCH_SUFFIX)}"
    return f"{title}\n↳ at “{branched_from}”" if branched_from else title


_TITLE_ROLE = Qt.ItemDataRole.UserRole + 1  # (the shown text may be elided or marked)


class ConversationList(QListWidget):
    """The sidebar's list of conversations; each item carries its conversation's
    id and title, and its context menu renames (asking the new title) or
    deletes one."""

    renamed = Signal(int, str)  # conversation id, the title typed
    delete_requested = Signal(int)

    def __init__(self) -> None:
        super().__init__()
        self.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.customContextMenuRequested.connect(self._on_menu)
        # Long titles end in "…" (the tooltip has them whole), never a sideways scroll.
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.setWordWrap(False)
        self.setItemDelegate(_ElidingDelegate(self))

    def fill(
        self, conversations: Iterable[ConversationSummary], select: int | None, follow: bool = False
    ) -> None:
        """Show ``conversations``, selecting the one with id ``select`` (None: none),
        without emitting selection signals: refilling is not the user choosing.
        ``follow``: where ``select`` is not among them, the first is chosen, as
        if clicked (a search that leaves the open conversation out opens a match)."""
        self.blockSignals(True)
        self.clear()
        for conv in conversations:
            item = QListWidgetItem(list_title(conv.title, conv.branched_from))
            item.setData(Qt.ItemDataRole.UserRole, conv.id)
            item.setData(_TITLE_ROLE, conv.title)
            tip = conv.title
            if conv.branched_from:
                tip += f"\nBranched at: {conv.branched_from}"
            item.setToolTip(f"{tip}\n{conv.preview}" if conv.preview else tip)
            self.addItem(item)
            if conv.id == select:
                self.setCurrentItem(item)
        self.blockSignals(False)
        if follow and self.currentItem() is None and self.count():
            self.setCurrentRow(0)

    @staticmethod
    def conversation_id(item: QListWidgetItem) -> int:
        return int(item.data(Qt.ItemDataRole.UserRole))

    @Slot(QPoint)
    def _on_menu(self, pos: QPoint) -> None:
        item = self.itemAt(pos)
        if item is None:  # (while a reply runs the list is disabled: no menu at all)
            return
        conv_id = self.conversation_id(item)
        menu = QMenu(self)
        rename = menu.addAction("Rename…")
        delete = menu.addAction("Delete")
        chosen = menu.exec(self.mapToGlobal(pos))
        if chosen is rename:
            old = str(item.data(_TITLE_ROLE))
            title, ok = QInputDialog.getText(self, "Rename conversation", "Title:", text=old)
            if ok and title.strip():
                self.renamed.emit(conv_id, title)
        elif chosen is delete:
            self.delete_requested.emit(conv_id)


class AttachmentBar(QWidget):
    """The documents attached to the next message, one chip each: its name and
    size, and a click removes it. Hidden while there are none."""

    changed = Signal()

    def __init__(self) -> None:
        super().__init__()
        self.setObjectName("attachmentBar")
        self.documents: list[Document] = []
        self._row = QHBoxLayout(self)
        self._row.setContentsMargins(0, 0, 0, 0)
        self._row.addStretch(1)
        self.hide()

    def add(self, document: Document) -> None:
        self.set([*self.documents, document])

    def set(self, documents: Iterable[Document]) -> None:
        self.documents = list(documents)
        while self._row.count() > 1:  # (the stretch stays last)
            item = self._row.takeAt(0)
            old = item.widget() if item is not None else None
            if old is not None:
                old.deleteLater()
        for n, document in enumerate(self.documents):
            chip = QToolButton()
            chip.setObjectName("attachmentChip")
            # (the style's file icon, not an emoji: fonts without one draw a box)
            chip.setIcon(self.style().standardIcon(QStyle.StandardPixmap.SP_FileIcon))
            chip.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
            chip.setText(f"{document.name} · {format_size(document.size)}  ✕")
            chip.setToolTip(f"Remove {document.name} from the message")
            chip.clicked.connect(lambda _=False, n=n: self.remove(n))
            self._row.insertWidget(n, chip)
        self.setVisible(bool(self.documents))
        self.changed.emit()

    def remove(self, n: int) -> None:
        self.set(d for i, d in enumerate(self.documents) if i != n)

    def take(self) -> list[Document]:
        """The documents, and the bar emptied (the message took them)."""
        documents = self.documents
        self.set(())
        return documents


class LatencyProbe:
    """Measures how late the event loop serves a 20 ms timer: the longest
    stretch the UI thread was blocked (the window's responsiveness)."""

    INTERVAL_MS = 20

    def __init__(self, parent: QWidget) -> None:
        self.max_late_ms = 0.0
        self._last = time.perf_counter()
        self._timer = QTimer(parent)
        self._timer.setInterval(self.INTERVAL_MS)
        self._timer.timeout.connect(self._on_tick)
        self._timer.start()

    def reset(self) -> None:
        self.max_late_ms = 0.0
        self._last = time.perf_counter()

    def _on_tick(self) -> None:
        now = time.perf_counter()
        late = (now - self._last) * 1000 - self.INTERVAL_MS
        self.max_late_ms = max(self.max_late_ms, late)
        self._last = now


def open_message(parent: QWidget, title: str, message: str, warning: bool = False) -> None:
    """A window-modal error (or warning) box that does not block the event loop."""
    icon = QMessageBox.Icon.Warning if warning else QMessageBox.Icon.Critical
    box = QMessageBox(icon, title, message, parent=parent)
    box.setObjectName("warningDialog" if warning else "errorDialog")
    box.setWindowModality(Qt.WindowModality.WindowModal)
    box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
    box.open()  # not exec(): the window (and its event loop) carries on


def exec_once(dialog: QDialog) -> bool:
    """Run ``dialog`` modally, then delete it; True if it was accepted (its
    values can still be read until the event loop runs again).

    PySide's ``exec()`` hands the dialog to Python while its parent keeps it as
    a child, and a dialog's own lambdas keep it alive: left to itself it stayed
    until exit with two owners, where PySide deleted one of its buttons, whose
    lambda released the dialog, which deleted that button again (SIGSEGV)."""
    accepted = dialog.exec() == QDialog.DialogCode.Accepted
    dialog.deleteLater()
    return accepted
