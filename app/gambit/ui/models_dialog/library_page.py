"""The Library tab's left side: the table of models, the files a rescan could
not use, and the buttons that add, remove and rescan."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Final

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QFileDialog,
    QFrame,
    QHBoxLayout,
    QHeaderView,
    QMessageBox,
    QScrollArea,
    QSplitter,
    QTableWidget,
    QVBoxLayout,
    QWidget,
)

from gambit.models.library import LibraryEntry, ScanProblem
from gambit.ui import theme
from gambit.ui.models_dialog.text import display_name, format_bytes, format_params, same_file
from gambit.ui.models_dialog.widgets import PATH_ROLE, button, cell, message_label, show_message
from gambit.ui.settings.settings_dialog import GGUF_FILTER
from gambit.words import counted

EMPTY_TEXT = (
    "No models yet. Import a .gguf file or add a folder that holds some; "
    "the Catalog tab lists suggested pairs to download."
)
LOOKING_TEXT = "Looking for models in the models folder…"

COLUMNS: Final = (
    "Name",
    "Arch",
    "Params",
    "Quant",
    "Size",
    "Vocabulary",
    "Context",
    "Chat",
    "Use",
)
COLUMN_TIPS: Final = (
    "The file name; its general.name is in the details",
    "Architecture",
    "Parameters",
    "Quantization: the weight format",
    "File size",
    "Vocabulary size and tokenizer type",
    "The context length the model was trained for",
    "Whether the file carries a chat template (chat needs one)",
    "The target and draft chosen here",
)
(
    COL_NAME,
    COL_ARCH,
    COL_PARAMS,
    COL_QUANT,
    COL_SIZE,
    COL_VOCAB,
    COL_CONTEXT,
    COL_TEMPLATE,
    COL_ROLE,
) = range(len(COLUMNS))
_OWNED: Final = ("copied", "derived", "downloaded")  # files Gambit may delete


class LibraryTable(QTableWidget):
    """The library's models, one row each, sortable; the last column says which
    is the chosen target and which the draft."""

    def __init__(self) -> None:
        super().__init__(0, len(COLUMNS))
        self.setObjectName("modelTable")
        self.setHorizontalHeaderLabels(list(COLUMNS))
        for col, tip in enumerate(COLUMN_TIPS):
            header_item = self.horizontalHeaderItem(col)
            if header_item is not None:
                header_item.setToolTip(tip)
        self.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.setAlternatingRowColors(True)
        self.setShowGrid(False)
        self.setWordWrap(False)
        self.setTextElideMode(Qt.TextElideMode.ElideMiddle)
        self.verticalHeader().hide()
        self.verticalHeader().setDefaultSectionSize(28)
        header = self.horizontalHeader()
        header.setHighlightSections(False)
        header.setDefaultAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter)
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(COL_NAME, QHeaderView.ResizeMode.Stretch)
        header.setMinimumSectionSize(60)
        self.setSortingEnabled(True)
        self.sortByColumn(COL_NAME, Qt.SortOrder.AscendingOrder)

    def fill(self, entries: list[LibraryEntry]) -> None:
        self.setSortingEnabled(False)
        self.setRowCount(len(entries))
        for row, entry in enumerate(entries):
            info = entry.info
            name = cell(display_name(entry.path))
            name.setData(PATH_ROLE, str(entry.path))
            name.setToolTip(f"{info.name}\n{entry.path}")
            cells = {
                COL_NAME: name,
                COL_ARCH: cell(info.architecture),
                COL_PARAMS: cell(format_params(info.n_params), info.n_params, right=True),
                COL_QUANT: cell(info.quantization),
                COL_SIZE: cell(format_bytes(info.file_size), info.file_size, right=True),
                COL_VOCAB: cell(
                    f"{info.vocab_size:,} {info.vocab_type_name}", info.vocab_size, right=True
                ),
                COL_CONTEXT: cell(f"{info.context_length:,}", info.context_length, right=True),
                COL_TEMPLATE: cell("yes" if info.has_chat_template else "no"),
                COL_ROLE: cell(""),
            }
            for col, item in cells.items():
                self.setItem(row, col, item)
        self.setSortingEnabled(True)

    def mark_roles(self, target: Path | None, draft: Path | None) -> None:
        """Say in the last column which row is the target and which the draft."""
        palette = self.palette()
        for row in range(self.rowCount()):
            name = self.item(row, COL_NAME)
            role = self.item(row, COL_ROLE)
            value = name.data(PATH_ROLE) if name is not None else None
            if role is None or not isinstance(value, str):
                continue
            text, colour = "", None
            if target is not None and same_file(value, target):
                text, colour = "Target", theme.pick(theme.ACCENT, palette)
            elif draft is not None and same_file(value, draft):
                text, colour = "Draft", theme.pick(theme.VIOLET, palette)
            role.setText(text)
            font = role.font()
            font.setBold(bool(text))
            role.setFont(font)
            if colour is not None:
                role.setForeground(colour)

    def selected_path(self) -> Path | None:
        row = self.currentRow()
        item = self.item(row, COL_NAME) if row >= 0 else None
        value = item.data(PATH_ROLE) if item is not None else None
        return Path(value) if isinstance(value, str) else None

    def select(self, path: str | os.PathLike[str]) -> bool:
        """Select the row of ``path``; False if it is not in the table."""
        for row in range(self.rowCount()):
            item = self.item(row, COL_NAME)
            value = item.data(PATH_ROLE) if item is not None else None
            if item is not None and isinstance(value, str) and same_file(value, path):
                self.selectRow(row)
                self.scrollToItem(item)
                return True
        return False


class LibraryPage(QWidget):
    """The table (or, while empty, a note), the unusable files, and the
    buttons; the dialog connects the buttons."""

    def __init__(self, models_dir: Path) -> None:
        super().__init__()
        self.table = LibraryTable()
        self.empty_label = theme.muted_label(EMPTY_TEXT)
        self.empty_label.setObjectName("emptyLabel")
        self.empty_label.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.empty_label.setMinimumHeight(120)
        self.empty_label.hide()
        self.problems_label = message_label("problemsLabel")

        self.add_folder_button = button("Add folder…", "addFolderButton")
        self.add_folder_button.setToolTip("Scan a folder for .gguf files, now and on every rescan")
        self.import_button = button("Import file…", "importButton")
        self.copy_check = QCheckBox("Copy into Gambit's models folder")
        self.copy_check.setObjectName("copyCheck")
        self.copy_check.setToolTip(
            "Checked: the file is copied, so the original can be moved or deleted.\n"
            "Unchecked: the library refers to the file where it is."
        )
        self.remove_button = button("Remove", "removeButton")
        self.remove_button.setToolTip("Forget the selected model (asks before deleting a file)")
        self.rescan_button = button("Rescan", "rescanButton")
        self.rescan_button.setToolTip("Look for new, changed and missing files")
        row = QHBoxLayout()
        row.setSpacing(6)
        row.addWidget(self.add_folder_button)
        row.addWidget(self.import_button)
        row.addSpacing(4)
        row.addWidget(self.copy_check)
        row.addStretch(1)
        row.addWidget(self.remove_button)
        row.addWidget(self.rescan_button)
        folder_note = theme.muted_label(f"Gambit's models folder: {models_dir}")
        folder_note.setObjectName("modelsFolderLabel")
        folder_note.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)

        column = QVBoxLayout(self)
        column.setContentsMargins(0, 0, 6, 0)
        column.setSpacing(8)
        column.addWidget(self.table, 1)
        column.addWidget(self.empty_label, 1)
        column.addWidget(self.problems_label)
        column.addLayout(row)
        column.addWidget(folder_note)

    def show_state(self, messages: list[str], has_models: bool, scanning: bool) -> None:
        """The table, or while it is empty a note (saying a scan runs); the
        messages (unusable files, a damaged index) under it."""
        show_message(self.problems_label, "\n".join(messages), "warn")
        self.empty_label.setText(LOOKING_TEXT if scanning else EMPTY_TEXT)
        self.empty_label.setVisible(not has_models)
        self.table.setVisible(has_models)


def problem_lines(problems: Sequence[ScanProblem]) -> list[str]:
    """The files a scan could not use, each with its error."""
    if not problems:
        return []
    n = len(problems)
    return [f"{counted(n, 'file')} could not be used:"] + [f"•  {p.message}" for p in problems]


def library_tab(left: QWidget, details: QWidget) -> QWidget:
    """The Library tab: the table on the left, the selected model (scrolling) on the right."""
    right = QScrollArea()
    right.setObjectName("detailsScroll")
    right.setWidgetResizable(True)
    right.setFrameShape(QFrame.Shape.NoFrame)
    right.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
    right.setWidget(details)
    right.setMinimumWidth(400)

    splitter = QSplitter(Qt.Orientation.Horizontal)
    splitter.setObjectName("modelsSplitter")
    splitter.setChildrenCollapsible(False)
    splitter.addWidget(left)
    splitter.addWidget(right)
    splitter.setStretchFactor(0, 3)
    splitter.setStretchFactor(1, 2)
    splitter.setSizes([790, 470])

    page = QWidget()
    outer = QVBoxLayout(page)
    outer.setContentsMargins(10, 10, 10, 10)
    outer.addWidget(splitter)
    return page


def ask_folder(parent: QWidget, chosen: Callable[[str], None]) -> None:
    """Ask for a folder of models; ``chosen`` gets it (nothing if cancelled)."""
    dialog = QFileDialog(parent, "Add a folder of models", str(Path.home()))
    dialog.setObjectName("folderDialog")
    dialog.setFileMode(QFileDialog.FileMode.Directory)
    dialog.setOption(QFileDialog.Option.ShowDirsOnly, True)
    dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
    dialog.fileSelected.connect(chosen)
    dialog.open()


def ask_file(parent: QWidget, chosen: Callable[[str], None]) -> None:
    """Ask for a model file to import; ``chosen`` gets it."""
    dialog = QFileDialog(parent, "Import a model file", str(Path.home()), GGUF_FILTER)
    dialog.setObjectName("importDialog")
    dialog.setFileMode(QFileDialog.FileMode.ExistingFile)
    dialog.setAcceptMode(QFileDialog.AcceptMode.AcceptOpen)
    dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
    dialog.fileSelected.connect(lambda path: chosen(path))
    dialog.open()


def ask_remove(parent: QWidget, entry: LibraryEntry, remove: Callable[[Path, bool], None]) -> None:
    """Remove ``entry`` (``remove(path, delete_file)``); for a file Gambit put in
    its models folder, ask first whether to delete the file too."""
    if entry.origin not in _OWNED:
        remove(entry.path, False)
        return
    box = QMessageBox(
        QMessageBox.Icon.Question,
        "Remove model",
        f"Remove {entry.path.name} from the library?\n\nGambit put this file in its "
        f"models folder ({format_bytes(entry.info.file_size)}); it can delete it too.",
        QMessageBox.StandardButton.Cancel,
        parent,
    )
    box.setObjectName("removeBox")
    delete = box.addButton("Remove and delete the file", QMessageBox.ButtonRole.DestructiveRole)
    keep = box.addButton("Remove, keep the file", QMessageBox.ButtonRole.AcceptRole)
    box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)

    def chosen() -> None:
        clicked = box.clickedButton()
        if clicked is delete:
            remove(entry.path, True)
        elif clicked is keep:
            remove(entry.path, False)

    box.finished.connect(chosen)
    box.open()
