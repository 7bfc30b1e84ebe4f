"""The small widgets the dialog's parts share: labels, buttons, message boxes, cells."""

from __future__ import annotations

from typing import Final

from PySide6.QtCore import Qt
from PySide6.QtGui import QPalette
from PySide6.QtWidgets import QLabel, QPushButton, QSizePolicy, QTableWidgetItem

from gambit.ui import theme
from gambit.ui.theme import Tone

PATH_ROLE: Final = Qt.ItemDataRole.UserRole  # a model's path, on table and list items
SORT_ROLE: Final = Qt.ItemDataRole.UserRole + 1
PROGRESS_STEPS: Final = 1000  # the resolution of the progress and memory bars


def value_label() -> QLabel:
    label = QLabel()
    label.setWordWrap(True)
    label.setTextFormat(Qt.TextFormat.PlainText)
    label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    label.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Preferred)
    return label


def button(text: str, name: str) -> QPushButton:
    widget = QPushButton(text)
    widget.setObjectName(name)
    widget.setAutoDefault(False)
    return widget


def message_label(name: str) -> QLabel:
    """An inline message box (errors, refusals, warnings): hidden until it has text."""
    label = QLabel()
    label.setObjectName(name)
    label.setWordWrap(True)
    label.setTextFormat(Qt.TextFormat.PlainText)
    label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    label.hide()
    return label


def show_message(label: QLabel, text: str, tone: Tone = "bad") -> None:
    """Show ``text`` in ``label`` as a box tinted by ``tone``; hide it when empty."""
    if not text:
        label.clear()
        label.hide()
        return
    palette = label.window().palette()  # the label's own is tinted by its style sheet
    window = palette.color(QPalette.ColorRole.Window)
    colour = theme.tone_colour(tone, palette) if tone != "neutral" else theme.muted(palette)
    label.setStyleSheet(
        f"QLabel#{label.objectName()} {{ color: {colour.name()};"
        f" background: {theme.blend(colour, window, 0.9).name()};"
        f" border: 1px solid {theme.blend(colour, window, 0.6).name()};"
        " border-radius: 4px; padding: 6px 8px; }"
    )
    label.setText(text)
    label.show()


class SortItem(QTableWidgetItem):
    """A table cell that sorts by a key of its own (sizes by bytes, not by text)."""

    def __lt__(self, other: QTableWidgetItem) -> bool:
        mine, theirs = self.data(SORT_ROLE), other.data(SORT_ROLE)
        if isinstance(mine, (int, float)) and isinstance(theirs, (int, float)):
            return mine < theirs
        return self.text().lower() < other.text().lower()


def cell(text: str, sort_key: float | None = None, right: bool = False) -> SortItem:
    item = SortItem(text)
    item.setFlags(Qt.ItemFlag.ItemIsEnabled | Qt.ItemFlag.ItemIsSelectable)
    if sort_key is not None:
        item.setData(SORT_ROLE, sort_key)
    if right:
        item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
    return item
