"""The Catalog tab: suggested target and draft pairs to download."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QHeaderView,
    QMenu,
    QTableWidget,
    QTableWidgetItem,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from gambit.errors import GambitError
from gambit.models.catalog import CatalogPair, Which, load_catalog
from gambit.ui import theme
from gambit.ui.models_dialog.text import catalog_size
from gambit.ui.models_dialog.widgets import message_label, show_message

CATALOG_COLUMNS = ("Pair", "Target", "Draft", "Download size", "Status", "")
COL_STATUS, COL_DOWNLOAD = 4, 5


class CatalogPage(QWidget):
    """The catalog's pairs, each with a Download button (both files, or one
    side from its menu: ``download_requested`` with the pair's name and which)."""

    download_requested = Signal(str, str)

    def __init__(self) -> None:
        super().__init__()
        self.pairs: list[CatalogPair] = []
        self.download_buttons: dict[str, QToolButton] = {}
        intro = theme.muted_label(
            "Suggested target and draft pairs on Hugging Face; each pair's fit is checked "
            "once it is downloaded, and ✓ marks pairs the developers ran end to end. "
            "Downloads go to Gambit's "
            "models folder and resume where they stopped. Without network, download the "
            "files on another machine and use Import file… on the Library tab."
        )
        intro.setObjectName("catalogIntro")
        self.table = self._table()
        self.details = theme.muted_label()
        self.details.setObjectName("catalogDetails")
        self.details.setTextFormat(Qt.TextFormat.PlainText)
        self.details.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.error_label = message_label("catalogErrorLabel")
        column = QVBoxLayout(self)
        column.setContentsMargins(10, 10, 10, 10)
        column.setSpacing(8)
        column.addWidget(intro)
        column.addWidget(self.table, 1)
        column.addWidget(self.details)
        column.addWidget(self.error_label)

    def _table(self) -> QTableWidget:
        table = QTableWidget(0, len(CATALOG_COLUMNS))
        table.setObjectName("catalogTable")
        table.setHorizontalHeaderLabels(list(CATALOG_COLUMNS))
        table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        table.setAlternatingRowColors(True)
        table.setShowGrid(False)
        table.verticalHeader().hide()
        table.verticalHeader().setDefaultSectionSize(34)
        header = table.horizontalHeader()
        header.setHighlightSections(False)
        header.setDefaultAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter)
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(1, QHeaderView.ResizeMode.Stretch)
        header.setSectionResizeMode(2, QHeaderView.ResizeMode.Stretch)
        table.currentCellChanged.connect(self._on_row)
        return table

    def pair(self, name: str) -> CatalogPair | None:
        return next((p for p in self.pairs if p.name == name), None)

    def load(self) -> None:
        """Read the catalog and list it (an unreadable one is said, not raised)."""
        try:
            self.pairs = load_catalog()
        except GambitError as exc:
            self.pairs = []
            show_message(self.error_label, str(exc), "bad")
        table = self.table
        table.setRowCount(len(self.pairs))
        self.download_buttons.clear()
        for row, pair in enumerate(self.pairs):
            name = QTableWidgetItem(pair.name)
            name.setToolTip(pair.description)
            if pair.verified:
                name.setText(f"{pair.name}  ✓")
                name.setToolTip(pair.description + "\nVerified end to end by the developers.")
            table.setItem(row, 0, name)
            for col, item in ((1, pair.target), (2, pair.draft)):
                cell = QTableWidgetItem(f"{item.filename}  ({item.params})")
                cell.setToolTip(f"{item.repo}\n{catalog_size(item.size_mb)}")
                table.setItem(row, col, cell)
            size = QTableWidgetItem(catalog_size(pair.target.size_mb + pair.draft.size_mb))
            size.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
            table.setItem(row, 3, size)
            table.setItem(row, COL_STATUS, QTableWidgetItem(""))
            table.setCellWidget(row, COL_DOWNLOAD, self._download_button(pair))
        if self.pairs:
            table.selectRow(0)

    def _download_button(self, pair: CatalogPair) -> QWidget:
        both_size = catalog_size(pair.target.size_mb + pair.draft.size_mb)
        button = QToolButton()
        button.setObjectName("downloadButton")
        button.setText("Download")
        button.setToolTip(f"Download both files ({both_size})")
        button.setPopupMode(QToolButton.ToolButtonPopupMode.MenuButtonPopup)
        menu = QMenu(button)
        both = menu.addAction("Both files")
        target = menu.addAction(f"Target only ({catalog_size(pair.target.size_mb)})")
        draft = menu.addAction(f"Draft only ({catalog_size(pair.draft.size_mb)})")
        both.triggered.connect(lambda: self._request(pair.name, "both"))
        target.triggered.connect(lambda: self._request(pair.name, "target"))
        draft.triggered.connect(lambda: self._request(pair.name, "draft"))
        button.setMenu(menu)
        button.clicked.connect(lambda: self._request(pair.name, "both"))
        self.download_buttons[pair.name] = button
        holder = QWidget()
        row = QHBoxLayout(holder)
        row.setContentsMargins(4, 2, 4, 2)
        row.addWidget(button)
        return holder

    def _request(self, name: str, which: Which) -> None:
        self.download_requested.emit(name, which)

    def mark_present(self, file_names: set[str]) -> None:
        """Say which pairs' files are in the library already."""
        for row, pair in enumerate(self.pairs):
            got_t, got_d = pair.target.filename in file_names, pair.draft.filename in file_names
            text = (
                "in the library" if got_t and got_d
                else "target in the library" if got_t
                else "draft in the library" if got_d
                else ""
            )  # fmt: skip
            item = self.table.item(row, COL_STATUS)
            if item is not None:
                item.setText(text)

    def _on_row(self, row: int, _col: int, _prev_row: int, _prev_col: int) -> None:
        if not 0 <= row < len(self.pairs):
            self.details.clear()
            return
        pair = self.pairs[row]
        lines = [pair.description]
        lines.append(f"Target: {pair.target.repo} / {pair.target.filename}")
        lines.append(f"Draft: {pair.draft.repo} / {pair.draft.filename}")
        lines.append(
            "Verified end to end by the developers."
            if pair.verified
            else "Not yet verified end to end: pairing is checked once downloaded."
        )
        if pair.note:
            lines.append(f"Note: {pair.note}")
        self.details.setText("\n".join(lines))
