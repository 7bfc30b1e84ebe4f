"""The Library tab's right side: the selected model, the buttons that choose
it, its memory estimate, its compatible drafts, deriving one, and its header."""

from __future__ import annotations

from pathlib import Path
from typing import Final

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QFont, QFontDatabase
from PySide6.QtWidgets import (
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QSizePolicy,
    QVBoxLayout,
    QWidget,
)

from gambit.formats.gguf_info import ModelInfo
from gambit.models.library import LibraryEntry
from gambit.ui import theme
from gambit.ui.models_dialog.derive_panel import DerivePanel
from gambit.ui.models_dialog.memory_view import MemoryView
from gambit.ui.models_dialog.text import format_bytes, format_params
from gambit.ui.models_dialog.widgets import PATH_ROLE, button, message_label, value_label

ORIGINS: Final[dict[str, str]] = {
    "folder": "found in a library folder",
    "referenced": "imported, referenced where it is",
    "copied": "imported, copied into Gambit's models folder",
    "derived": "derived by Gambit",
    "downloaded": "downloaded from the catalog",
}
FIELDS: Final = (
    ("name", "Name"),
    ("origin", "Origin"),
    ("architecture", "Architecture"),
    ("params", "Parameters"),
    ("quantization", "Quantization"),
    ("size", "File size"),
    ("vocab", "Vocabulary"),
    ("special", "Special tokens"),
    ("context", "Context length"),
    ("layers", "Layers"),
    ("attention", "Attention"),
    ("template", "Chat template"),
    ("fingerprint", "Tokenizer fingerprint"),
)


def detail_values(entry: LibraryEntry) -> dict[str, str]:
    """What the Details box says of ``entry``, by ``FIELDS`` key."""
    info = entry.info
    origin = ORIGINS.get(entry.origin, entry.origin)
    if entry.draft_for:
        origin += "; draft for " + ", ".join(Path(t).name for t in entry.draft_for)
    head_dim = (
        f"{info.key_length}" if info.key_length == info.value_length
        else f"{info.key_length} / {info.value_length}"
    )  # fmt: skip
    return {
        "name": info.name,
        "origin": origin,
        "architecture": info.architecture,
        "params": f"{format_params(info.n_params)}  ({info.n_params:,})",
        "quantization": info.quantization,
        "size": (
            f"{format_bytes(info.file_size)}  (weights {format_bytes(info.tensor_bytes)},"
            f" header {format_bytes(info.header_bytes)})"
        ),
        "vocab": (
            f"{info.vocab_size:,} tokens, {info.vocab_type_name} ({info.vocab_type})"
            + (f", pre-tokenizer {info.tokenizer_pre}" if info.tokenizer_pre else "")
            + (f", {info.n_merges:,} merges" if info.n_merges else "")
        ),
        "special": (
            f"BOS id {info.bos_token_id} ({'added' if info.add_bos else 'not added'}), "
            f"EOS id {info.eos_token_id} ({'added' if info.add_eos else 'not added'})"
        ),
        "context": f"{info.context_length:,} tokens (trained)",
        "layers": (
            f"{info.block_count} blocks, {info.embedding_length:,} wide, "
            f"feed-forward {info.feed_forward_length:,}"
        ),
        "attention": (
            f"{info.head_count} heads, {info.head_count_kv} KV heads, {head_dim} per head"
        ),
        "template": (
            "yes" if info.has_chat_template else "no: a base model; chats open in completion mode"
        ),
        "fingerprint": info.tokenizer_digest or "—",
    }


class DetailsForm(QGroupBox):
    """The selected model's header metadata, one selectable line per field."""

    def __init__(self) -> None:
        super().__init__("Details")
        self.values: dict[str, QLabel] = {}
        form = theme.form_layout(labels_on_top_row=True, vertical_spacing=6)
        for key, label in FIELDS:
            value = value_label()
            value.setObjectName(f"detail_{key}")
            self.values[key] = value
            form.addRow(label + ":", value)
        mono = QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont)
        self.values["fingerprint"].setFont(mono)
        self.values["fingerprint"].setToolTip(
            "A digest of the tokenizer: models with the same fingerprint share one, "
            "so either can draft for the other."
        )
        self.setLayout(form)

    def show_entry(self, entry: LibraryEntry) -> None:
        for key, text in detail_values(entry).items():
            self.values[key].setText(text)


class DraftsGroup(QGroupBox):
    """The library's compatible drafts for the selection, smallest first;
    double-clicking one asks to select it (``activated`` with its path)."""

    activated = Signal(str)

    def __init__(self) -> None:
        super().__init__("Compatible drafts in the library")
        self.list = QListWidget()
        self.list.setObjectName("draftsList")
        self.list.setTextElideMode(Qt.TextElideMode.ElideMiddle)
        self.list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.list.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.list.setToolTip("Double-click a draft to select it in the table")
        self.list.itemDoubleClicked.connect(self._on_activated)
        drafts = QVBoxLayout()
        drafts.setSpacing(4)
        drafts.addWidget(self.list)
        # (a label, not a list row: a row is one line, elided mid-word)
        self.empty_label = theme.muted_label(
            "None yet: derive one below, or import a much smaller model (a sibling "
            "drafts token for token, another family through text)."
        )
        self.empty_label.setObjectName("draftsEmpty")
        self.empty_label.setWordWrap(True)
        self.empty_label.hide()
        drafts.addWidget(self.empty_label)
        self.caption = theme.muted_label(
            "Much smaller models, smallest first: the same tokenizer drafts token for "
            "token, another through text. The first is the suggestion."
        )
        self.caption.setWordWrap(True)
        drafts.addWidget(self.caption)
        self.setLayout(drafts)

    def show_failure(self, why: str) -> None:
        self._show_empty(False)
        self.list.clear()
        item = QListWidgetItem(f"Could not check: {why}")
        item.setFlags(Qt.ItemFlag.NoItemFlags)
        self.list.addItem(item)

    def show_drafts(self, drafts: list[ModelInfo], through_text: set[str]) -> None:
        """``drafts`` for the selection, the suggestion first; those whose paths
        are in ``through_text`` have another tokenizer (they draft through text)."""
        self.list.clear()
        self._show_empty(not drafts)
        for i, info in enumerate(drafts):
            text = f"{info.path.name}  ·  {format_bytes(info.file_size)}"
            if str(info.path) in through_text:
                text += "  ·  through text"
            if i == 0:
                text += "  ·  suggested"
            item = QListWidgetItem(text)
            item.setData(PATH_ROLE, str(info.path))
            item.setToolTip(f"{info.path}\n{info.quantization}, {format_params(info.n_params)}")
            if i == 0:
                font = item.font()
                font.setBold(True)
                item.setFont(font)
            self.list.addItem(item)
        self._fit()

    def _show_empty(self, empty: bool) -> None:
        """The wrapped "none yet" message in place of the list and its caption."""
        self.empty_label.setVisible(empty)
        self.list.setVisible(not empty)
        self.caption.setVisible(not empty)

    def _fit(self) -> None:
        """As tall as its rows (up to four), so one suggestion leaves no blank box."""
        rows = max(1, min(4, self.list.count()))
        metrics = self.window().fontMetrics()  # the dialog's, as the rows use
        row_height = max(self.list.sizeHintForRow(0), metrics.height() + 4)
        frame = 2 * self.list.frameWidth()
        self.list.setFixedHeight(rows * row_height + frame + 4)

    def _on_activated(self, item: QListWidgetItem) -> None:
        value = item.data(PATH_ROLE)
        if isinstance(value, str):
            self.activated.emit(value)


class DetailsPane(QWidget):
    """Title and path, Use as target / draft and the pair message, then the
    memory, drafts, derive and details boxes (shown once a model is selected)."""

    def __init__(self) -> None:
        super().__init__()
        self.setObjectName("detailsPane")
        column = QVBoxLayout(self)
        column.setContentsMargins(6, 0, 4, 0)
        column.setSpacing(10)
        self.title_label = QLabel("No model selected")
        self.title_label.setObjectName("detailsTitle")
        font = self.title_label.font()
        font.setPointSizeF(font.pointSizeF() * 1.3)
        font.setWeight(QFont.Weight.DemiBold)
        self.title_label.setFont(font)
        self.title_label.setWordWrap(True)
        self.title_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.path_edit = QLineEdit()
        self.path_edit.setObjectName("detailsPath")
        self.path_edit.setReadOnly(True)
        self.path_edit.setFrame(False)
        self.path_edit.setStyleSheet(
            "QLineEdit#detailsPath { border: none; background: transparent; padding: 0;"
            f" color: {theme.muted(self.palette()).name()}; }}"
        )
        column.addWidget(self.title_label)
        column.addWidget(self.path_edit)
        column.addLayout(self._use_row())
        self.pair_label = message_label("pairLabel")
        column.addWidget(self.pair_label)
        self.memory = MemoryView()
        self.drafts = DraftsGroup()
        self.derive = DerivePanel()
        self.form = DetailsForm()
        for group in self.groups:
            column.addWidget(group)
        column.addStretch(1)

    @property
    def groups(self) -> tuple[QGroupBox, ...]:
        return (self.memory, self.drafts, self.derive, self.form)

    def _use_row(self) -> QHBoxLayout:
        self.use_target_button = button("Use as target", "useTargetButton")
        self.use_target_button.setToolTip("The model that writes the reply")
        self.use_draft_button = button("Use as draft", "useDraftButton")
        self.use_draft_button.setToolTip(
            "The much smaller model that guesses ahead for the target: token for token "
            "with its tokenizer, through text with another"
        )
        use_row = QHBoxLayout()
        use_row.setSpacing(6)
        use_row.addWidget(self.use_target_button)
        use_row.addWidget(self.use_draft_button)
        use_row.addStretch(1)
        return use_row

    def show_entry(self, entry: LibraryEntry | None) -> None:
        """The header of ``entry`` (None: nothing selected, the boxes hidden);
        the memory and drafts boxes are the dialog's to fill."""
        for widget in (self.use_target_button, self.use_draft_button):
            widget.setEnabled(entry is not None)
        for group in self.groups:
            group.setVisible(entry is not None)
        if entry is None:
            self.title_label.setText("No model selected")
            self.path_edit.clear()
            self.path_edit.hide()
            return
        self.path_edit.show()
        self.title_label.setText(entry.path.name)
        self.path_edit.setText(str(entry.path))
        self.path_edit.setCursorPosition(0)
        self.path_edit.setToolTip(str(entry.path))
        self.form.show_entry(entry)
