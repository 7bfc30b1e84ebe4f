"""Help → Keyboard shortcuts: every shortcut of the window, read from its actions.

The rows are collected when the dialog opens, from the actions the window
holds (menus, toolbar, message actions, the statistics panel's toggle), so
the list cannot fall behind a shortcut added or changed elsewhere; the
message box's own keys, which are not actions, come from ``InputEdit.KEYS``.
"""

from __future__ import annotations

import re

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import (
    QAbstractItemView,
    QDialog,
    QDialogButtonBox,
    QHeaderView,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from gambit.ui.window.window_widgets import InputEdit


def action_name(action: QAction) -> str:
    """An action's text as a user reads it: no mnemonic ampersands, no ellipsis."""
    text = action.text().replace("&&", "\0").replace("&", "").replace("\0", "&")
    return text.removesuffix("…").strip()


def _typed(keys: str) -> bool:
    """Whether a binding is one a user types: with a modifier, or a function
    key. (The platform's standard bindings also name keyboards' dedicated
    Copy, Find, Open and New keys, which read as noise in a list.)"""
    return "+" in keys or re.fullmatch(r"F\d+", keys) is not None


def shortcut_rows(window: QWidget) -> list[tuple[str, str]]:
    """(what it does, its keys) for every action of ``window`` that has a
    shortcut, each action once, by name; then the message box's own keys."""
    rows: dict[str, str] = {}
    for action in window.findChildren(QAction):
        keys = [
            text
            for k in action.shortcuts()
            if (text := k.toString(QKeySequence.SequenceFormat.NativeText)) and _typed(text)
        ]
        if keys:
            rows[action_name(action)] = ", ".join(keys)
    ordered = sorted(rows.items(), key=lambda row: row[0].casefold())
    for what, key in InputEdit.KEYS:
        ordered.append((what, QKeySequence(key).toString(QKeySequence.SequenceFormat.NativeText)))
    return ordered


class ShortcutsDialog(QDialog):
    """A read-only table of ``rows`` (what, keys); deleted when closed."""

    def __init__(self, rows: list[tuple[str, str]], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("shortcutsDialog")
        self.setWindowTitle("Keyboard shortcuts")
        self.table = QTableWidget(len(rows), 2, self)
        self.table.setObjectName("shortcutsTable")
        self.table.setHorizontalHeaderLabels(["Action", "Keys"])
        self.table.verticalHeader().hide()
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setAlternatingRowColors(True)
        for i, (what, keys) in enumerate(rows):
            self.table.setItem(i, 0, QTableWidgetItem(what))
            self.table.setItem(i, 1, QTableWidgetItem(keys))
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        header.setSectionResizeMode(1, QHeaderView.ResizeMode.ResizeToContents)
        self.table.setFocusPolicy(Qt.FocusPolicy.NoFocus)  # (a list to read, not to edit)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(self.table)
        layout.addWidget(buttons)
        self.resize(460, 520)
        self.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)

    def rows(self) -> list[tuple[str, str]]:
        """What the table shows, row by row."""

        def text(row: int, column: int) -> str:
            item = self.table.item(row, column)
            return item.text() if item is not None else ""

        return [(text(i, 0), text(i, 1)) for i in range(self.table.rowCount())]
