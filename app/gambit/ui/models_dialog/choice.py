"""The target and draft chosen in the dialog, and what choosing them says.

No widgets here: each step returns the sentence to show and its tone, so the
rules (a model cannot draft for itself, an incompatible draft is dropped for
prompt lookup) read in one place.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gambit.engine.drafters.registry import DRAFTERS, DrafterKind
from gambit.errors import GambitError
from gambit.formats.gguf_info import ModelInfo
from gambit.models.default_model import DEFAULT_MODEL_FILE, DEFAULT_MODEL_NAME, bundled_model_path
from gambit.models.library import LibraryEntry
from gambit.models.pairing import pair_report
from gambit.storage import paths
from gambit.storage.settings import Settings
from gambit.ui.models_dialog.text import html, same_file
from gambit.ui.theme import Tone

InfoFor = Callable[[str | os.PathLike[str]], ModelInfo]
FALLBACK: DrafterKind = "lookup"  # what drafts once a chosen draft is dropped


def mode_words(info: ModelInfo) -> str:
    """How a target's conversations will be written, said before it loads
    (after "x is the target"): nothing for a model that chats."""
    if info.has_chat_template:
        return ""
    return (
        ". It has no chat template (a base model), so its conversations open in "
        "completion mode: it continues the text you write"
    )


@dataclass(frozen=True)
class Said:
    """A sentence for the pair message box, and how it is tinted."""

    text: str
    tone: Tone


@dataclass
class Choice:
    """``target`` "" is the embedded default model; ``draft`` counts only with
    a drafter whose file is chosen (a draft model)."""

    target: str
    drafter: DrafterKind
    draft: str
    models_dir: Path

    @classmethod
    def of(cls, settings: Settings, models_dir: Path) -> Choice:
        return cls(settings.target_model, settings.drafter, settings.draft_model, models_dir)

    def applied_to(self, settings: Settings) -> Settings:
        return settings.with_(
            target_model=self.target, draft_model=self.draft, drafter=self.drafter
        )

    def target_path(self) -> Path | None:
        """The chosen target file; for the embedded default model, its file if present."""
        if self.target:
            return Path(self.target).expanduser()
        bundled = bundled_model_path()
        if bundled is not None:
            return bundled
        for folder in (self.models_dir, paths.models_dir()):
            candidate = folder / DEFAULT_MODEL_FILE
            if candidate.is_file():
                return candidate
        return None

    def draft_path(self) -> Path | None:
        if DRAFTERS[self.drafter].file == "chosen" and self.draft:
            return Path(self.draft).expanduser()
        return None

    def _drop_draft(self) -> None:
        self.drafter, self.draft = FALLBACK, ""

    def describe(self) -> str:
        """The choice line under the tabs (rich text, without "(changed)")."""
        if self.target:
            target_text = html(Path(self.target).name)
        elif self.target_path() is not None:
            target_text = f"embedded {DEFAULT_MODEL_NAME}"
        else:
            target_text = f"embedded {DEFAULT_MODEL_NAME} (fetched on first start)"
        kind = DRAFTERS[self.drafter]
        drafter = kind.label.lower()  # as the settings dialog names it
        if kind.file == "chosen":
            drafter += f" {html(Path(self.draft).name) if self.draft else '(none)'}"
        return f"Target: <b>{target_text}</b>&nbsp;&nbsp;·&nbsp;&nbsp;Drafter: <b>{drafter}</b>"

    def use_target(self, entry: LibraryEntry, info_for: InfoFor) -> Said:
        """Choose ``entry`` as the target; a chosen draft that cannot draft for
        it is dropped (prompt lookup takes over), saying why."""
        self.target = str(entry.path)
        draft = self.draft_path()
        why = "" if draft is None else _why_not(entry, draft, info_for)
        chosen = f"{entry.path.name} is the target{mode_words(entry.info)}."
        if not why:
            return Said(chosen, "good")
        self._drop_draft()
        assert draft is not None
        return Said(
            f"{chosen} The draft {draft.name} cannot draft for it ({why}), so drafting "
            "falls back to prompt lookup.",
            "warn",
        )

    def use_draft(self, entry: LibraryEntry, info_for: InfoFor) -> tuple[bool, Said]:
        """Choose ``entry`` as the draft of the chosen target if it can draft
        for it (True), else say why."""
        target_path = self.target_path()
        if target_path is None:
            return False, Said(
                f"Choose a target first: the embedded {DEFAULT_MODEL_NAME} is not in the "
                "models folder yet (it is fetched on first start).",
                "bad",
            )
        if same_file(target_path, entry.path):
            return False, Said(
                f"{entry.path.name} is the target: a model cannot draft for itself. "
                "Choose a much smaller model, or derive one.",
                "bad",
            )
        try:
            report = pair_report(info_for(target_path), entry.info)
        except (GambitError, OSError) as exc:
            return False, Said(str(exc), "bad")
        if not report.compatible:
            reasons = "\n".join(f"•  {r}" for r in report.reasons)
            return False, Said(
                f"{entry.path.name} cannot draft for {target_path.name}:\n{reasons}", "bad"
            )
        # (a drafter that already drafts with a chosen file keeps its kind:
        # draft model + lookup stays both)
        if DRAFTERS[self.drafter].file != "chosen":
            self.drafter = "draft"
        self.draft = str(entry.path)
        how = "through text (another tokenizer)" if report.through_text else "same tokenizer"
        text = f"{entry.path.name} drafts for {target_path.name}: {how}."
        if report.notes:
            text += "\nNote: " + "; ".join(report.notes) + "."
        return True, Said(text, "warn" if report.notes else "good")

    def forget(self, path: str | os.PathLike[str]) -> str:
        """After ``path`` left the library (and the disk): drop it from the
        choice and say so ("" when it was neither target nor draft)."""
        name = Path(path).name
        gone = not Path(path).exists()
        notes: list[str] = []
        if self.target and same_file(self.target, path) and gone:
            self.target = ""
            notes.append(f"The target was {name}: it is now the embedded {DEFAULT_MODEL_NAME}.")
        draft = self.draft_path()
        if draft is not None and same_file(draft, path) and gone:
            self._drop_draft()
            notes.append(f"The draft was {name}: drafting falls back to prompt lookup.")
        return " ".join(notes)


def _why_not(target: LibraryEntry, draft: Path, info_for: InfoFor) -> str:
    """Why ``draft`` cannot draft for ``target`` ("" when it can)."""
    if same_file(draft, target.path):
        return "a model cannot draft for itself"
    try:
        report = pair_report(target.info, info_for(draft))
    except (GambitError, OSError) as exc:
        return str(exc)
    return "" if report.compatible else "; ".join(report.reasons)
