"""Measure on my chats: the library's other models that could draft for the
target, offered as drafts to measure next to the loaded drafters."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QCheckBox, QGroupBox, QVBoxLayout

from gambit.errors import GambitError
from gambit.formats.gguf_info import inspect_model
from gambit.models.default_model import default_model_file
from gambit.models.library import ModelLibrary
from gambit.models.memory import format_size
from gambit.models.pairing import drafts_through_text
from gambit.storage.settings import Settings
from gambit.ui import theme


@dataclass(frozen=True)
class CandidateDraft:
    """A model of the library that could draft for the target, to measure."""

    path: Path
    label: str  # "SmolLM2-135M-Instruct Q4_1, 98 MB · through text"


def library_drafts(settings: Settings, library: ModelLibrary | None = None) -> list[CandidateDraft]:
    """The library's models much cheaper than the settings' target that can
    draft for it (other tokenizers through text), the chosen draft left out:
    Measure compares those it loads already."""
    target = settings.target_path() or default_model_file()
    if target is None:
        return []
    library = library or ModelLibrary()
    try:
        known = library.get(target)  # (its header read once, when it was added)
        target_info = known.info if known is not None else inspect_model(target)
        found = library.drafts_for(target_info)
    except (GambitError, OSError):
        return []  # (the Models dialog says what is wrong with a library or a file)
    chosen = settings.draft_path()
    out = []
    for info in found:
        if chosen is not None and info.path.resolve() == chosen.resolve():
            continue
        how = " · through text" if drafts_through_text(target_info, info) else ""
        size = format_size(info.file_size)
        out.append(CandidateDraft(info.path, f"{info.name} {info.quantization}, {size}{how}"))
    return out


def no_drafts() -> list[CandidateDraft]:
    return []


class CandidateDrafts(QGroupBox):
    """One box per candidate draft, each measured under the adaptive policy
    when ticked (loaded next to the target for its replays)."""

    changed = Signal()  # a box was ticked or unticked

    def __init__(self) -> None:
        super().__init__("Other drafts from the library")
        self.setObjectName("candidateDrafts")
        self._col = QVBoxLayout(self)
        self.boxes: dict[Path, QCheckBox] = {}
        self._none = theme.muted_label(
            "No other model of the library is much cheaper than the target: add one in "
            "Models to measure it as a draft."
        )
        self._col.addWidget(self._none)

    def refresh(self, candidates: list[CandidateDraft]) -> None:
        """Unticked boxes (each costs a load and its replays); a box the user
        ticked stays ticked while its model is offered."""
        ticked = {p for p, b in self.boxes.items() if b.isChecked()}
        for box in self.boxes.values():
            self._col.removeWidget(box)
            box.deleteLater()
        self.boxes = {}
        for i, cand in enumerate(candidates):
            box = QCheckBox(cand.label)
            box.setObjectName(f"candidateDraft{i}")
            box.setToolTip(str(cand.path))
            box.setChecked(cand.path in ticked)
            box.toggled.connect(lambda _on: self.changed.emit())
            self.boxes[cand.path] = box
            self._col.addWidget(box)
        self._none.setVisible(not candidates)

    def chosen(self) -> tuple[str, ...]:
        """The candidate drafts ticked, as files."""
        return tuple(str(p) for p, b in self.boxes.items() if b.isChecked())
