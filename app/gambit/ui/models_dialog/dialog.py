"""The Models dialog: the user's GGUF files, which pair to use, and where to get more.

The *Library* tab lists :class:`~gambit.models.library.ModelLibrary` as a table
(the files a rescan could not use are listed under it, each with its error),
and shows the selected model's header metadata, a memory estimate at the
chosen context, the buttons that choose it as the target or the draft (a draft
is checked against the target with ``pair_report`` and refused inline, with
every reason, when it cannot draft for it), the library's compatible drafts
for it (smallest first) and the way to derive one with llama.cpp's quantizer.
The *Catalog* tab lists suggested pairs to download from Hugging Face.

Slow work (importing, scanning, deriving, measuring acceptance, downloading)
runs on a ``QThread`` with a progress bar and a Cancel button, against its own
``ModelLibrary`` over the same index, so the UI thread never waits on it. Every
``GambitError`` is shown inline; nothing a user does raises out of the dialog.

The dialog edits a copy of the settings: :meth:`ModelsDialog.chosen_settings`
returns them with the target and draft chosen here.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

from PySide6.QtCore import Qt, QThread, Signal, Slot
from PySide6.QtGui import QFont, QFontDatabase, QPalette
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QFrame,
    QGroupBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QMenu,
    QMessageBox,
    QProgressBar,
    QPushButton,
    QScrollArea,
    QSizePolicy,
    QSplitter,
    QTableWidget,
    QTableWidgetItem,
    QTabWidget,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from gambit.engine.runtime import RuntimeOptions, default_threads
from gambit.engine.session import DrafterKind
from gambit.errors import GambitError
from gambit.formats.gguf_info import ModelInfo, inspect_model
from gambit.fsutil import Progress
from gambit.models.catalog import CatalogPair, Which, load_catalog
from gambit.models.catalog import download as download_pair
from gambit.models.default_model import DEFAULT_MODEL_FILE, DEFAULT_MODEL_NAME, bundled_model_path
from gambit.models.derive import DeriveCancelledError, derive_draft, derived_name
from gambit.models.derive import measure_acceptance as measure_draft
from gambit.models.derive_advice import CostCurve, DeriveAdvice, advise, cached_curve
from gambit.models.library import LibraryEntry, ModelLibrary
from gambit.models.memory import (
    KVType,
    MemoryEstimate,
    available_memory,
    check_fits,
    estimate_memory,
)
from gambit.models.pairing import pair_report
from gambit.storage import paths
from gambit.storage.settings import Settings
from gambit.ui import theme
from gambit.ui.settings_dialog import GGUF_FILTER
from gambit.ui.theme import Tone

log = logging.getLogger(__name__)

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
CATALOG_COLUMNS: Final = ("Pair", "Target", "Draft", "Download size", "Status", "")
PROGRESS_INTERVAL_S: Final = 0.05  # at most this often from the worker to the window
PROGRESS_STEPS: Final = 1000
MEASURE_CONTEXT: Final = 512  # tokens: the calibration prompts and replies are short
MIB: Final = 1 << 20
GIB: Final = 1 << 30
_PATH_ROLE: Final = Qt.ItemDataRole.UserRole
_SORT_ROLE: Final = Qt.ItemDataRole.UserRole + 1

ORIGINS: Final[dict[str, str]] = {
    "folder": "found in a library folder",
    "referenced": "imported, referenced where it is",
    "copied": "imported, copied into Gambit's models folder",
    "derived": "derived by Gambit",
    "downloaded": "downloaded from the catalog",
}
_OWNED: Final = ("copied", "derived", "downloaded")


# ------------------------------------------------------------------------ formatting


def format_params(n: int) -> str:
    """A parameter count as people say it: "134.5 M", "7.62 B"."""
    if n >= 1_000_000_000:
        return f"{n / 1e9:.2f} B"
    if n >= 1_000_000:
        return f"{n / 1e6:.1f} M"
    return f"{n / 1e3:.1f} K"


def format_bytes(n: float) -> str:
    """A size in binary units, as the memory estimates are given: "138.1 MiB"."""
    if n >= GIB:
        return f"{n / GIB:.2f} GiB"
    if n >= MIB:
        return f"{n / MIB:.1f} MiB"
    return f"{n / 1024:.0f} KiB"


def _mb(size_mb: int) -> str:
    """A catalog size (decimal megabytes, as Hugging Face shows it)."""
    return f"{size_mb / 1000:.2f} GB" if size_mb >= 1000 else f"{size_mb} MB"


def _same_file(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> bool:
    return os.path.realpath(os.path.expanduser(a)) == os.path.realpath(os.path.expanduser(b))


# ------------------------------------------------------------------------ widgets


def _value_label() -> QLabel:
    label = QLabel()
    label.setWordWrap(True)
    label.setTextFormat(Qt.TextFormat.PlainText)
    label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    label.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Preferred)
    return label


def _button(text: str, name: str) -> QPushButton:
    button = QPushButton(text)
    button.setObjectName(name)
    button.setAutoDefault(False)
    return button


def _message_label(name: str) -> QLabel:
    """An inline message box (errors, refusals, warnings): hidden until it has text."""
    label = QLabel()
    label.setObjectName(name)
    label.setWordWrap(True)
    label.setTextFormat(Qt.TextFormat.PlainText)
    label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    label.hide()
    return label


def _show_message(label: QLabel, text: str, tone: Tone = "bad") -> None:
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


class _SortItem(QTableWidgetItem):
    """A table cell that sorts by a key of its own (sizes by bytes, not by text)."""

    def __lt__(self, other: QTableWidgetItem) -> bool:
        mine, theirs = self.data(_SORT_ROLE), other.data(_SORT_ROLE)
        if isinstance(mine, (int, float)) and isinstance(theirs, (int, float)):
            return mine < theirs
        return self.text().lower() < other.text().lower()


def _cell(text: str, sort_key: float | None = None, right: bool = False) -> _SortItem:
    item = _SortItem(text)
    item.setFlags(Qt.ItemFlag.ItemIsEnabled | Qt.ItemFlag.ItemIsSelectable)
    if sort_key is not None:
        item.setData(_SORT_ROLE, sort_key)
    if right:
        item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
    return item


# ------------------------------------------------------------------------ background work

TaskKind = Literal["import", "folder", "rescan", "derive", "measure", "download"]
Job = Callable[[Progress, threading.Event], object]


class TaskCancelledError(Exception):
    """Raised from the progress callback once the user pressed Cancel."""


@dataclass(frozen=True)
class TaskOutcome:
    kind: TaskKind
    status: Literal["done", "failed", "cancelled"]
    value: object = None
    message: str = ""


class _TaskThread(QThread):
    """Runs one job off the UI thread. The job gets a progress callback (which
    raises ``TaskCancelledError`` once cancelled) and the cancel event itself.
    The outcome is kept in ``outcome``; ``finished`` says it is there."""

    progressed = Signal(str, object, object)  # stage, done, total (ints past 2**31)

    def __init__(self, kind: TaskKind, label: str, job: Job, parent: QWidget) -> None:
        super().__init__(parent)
        self.kind: TaskKind = kind
        self.label = label
        self.cancel_event = threading.Event()
        self.outcome: TaskOutcome | None = None
        self.on_done: Callable[[object], None] | None = None
        self._job = job
        self._last_emit = 0.0

    def _progress(self, stage: str, done: int, total: int) -> None:
        if self.cancel_event.is_set():
            raise TaskCancelledError(stage)
        now = time.monotonic()
        if (total and done >= total) or now - self._last_emit >= PROGRESS_INTERVAL_S:
            self._last_emit = now
            self.progressed.emit(stage, int(done), int(total))

    def run(self) -> None:
        try:
            value = self._job(self._progress, self.cancel_event)
        except (TaskCancelledError, DeriveCancelledError):
            self.outcome = TaskOutcome(self.kind, "cancelled")
        except Exception as exc:  # shown in the dialog; nothing may escape a thread
            if self.cancel_event.is_set():
                self.outcome = TaskOutcome(self.kind, "cancelled")
            elif isinstance(exc, GambitError):
                self.outcome = TaskOutcome(self.kind, "failed", message=str(exc))
            else:
                log.exception("%s failed", self.label)
                self.outcome = TaskOutcome(
                    self.kind, "failed", message=f"{self.label} failed unexpectedly: {exc}"
                )
        else:
            self.outcome = TaskOutcome(self.kind, "done", value)


# ------------------------------------------------------------------------ the dialog


class ModelsDialog(QDialog):
    """Browse the model library and choose a target and a draft.

    ``chosen_settings()`` returns ``settings`` with ``target_model``,
    ``draft_model`` and ``drafter`` as chosen here (unchanged if nothing was).
    """

    task_finished = Signal(object)  # TaskOutcome, once the window has shown it

    def __init__(
        self, library: ModelLibrary, settings: Settings, parent: QWidget | None = None
    ) -> None:
        super().__init__(parent)
        self.library = library
        self._settings = settings
        self._target = settings.target_model
        self._drafter: DrafterKind = settings.drafter
        self._draft = settings.draft_model
        self._task: _TaskThread | None = None
        self._entries: list[LibraryEntry] = []
        self._drafts_cache: dict[str, list[ModelInfo]] = {}
        self._derived: tuple[Path, Path] | None = None  # (target, draft) to measure
        self._catalog: list[CatalogPair] = []
        self.download_buttons: dict[str, QToolButton] = {}

        self.setObjectName("modelsDialog")
        self.setWindowTitle("Models")
        self.setSizeGripEnabled(True)
        self.resize(1300, 800)
        self._build()
        self._load_catalog()
        self.reload()
        if self._unlisted():  # e.g. the default model, fetched before any scan
            self.rescan()
            self.empty_label.setText(LOOKING_TEXT)

    # ================================================================== public API

    def chosen_settings(self) -> Settings:
        """The settings given, with the target and draft picked in the dialog."""
        return self._settings.with_(
            target_model=self._target, draft_model=self._draft, drafter=self._drafter
        )

    @property
    def busy(self) -> bool:
        """True while a background task (import, scan, derive, measure, download) runs."""
        return self._task is not None

    def reload(self) -> None:
        """Re-read the library index and show it, keeping the selection."""
        keep = self.selected_path()
        try:
            self._entries = self.library.entries()
            problems = self.library.problems()
        except (GambitError, OSError) as exc:
            self._entries, problems = [], []
            self._show_error(f"The model library could not be read: {exc}")
        self._drafts_cache.clear()
        self._fill_table()
        lines = list(self.library.notices)  # the index was damaged and set aside
        if problems:
            n = len(problems)
            lines += [f"{n} file{'s' if n != 1 else ''} could not be used:"]
            lines += [f"•  {p.message}" for p in problems]
        _show_message(self.problems_label, "\n".join(lines), "warn")
        self.empty_label.setText(LOOKING_TEXT if self.busy else EMPTY_TEXT)
        self.empty_label.setVisible(not self._entries)
        self.table.setVisible(bool(self._entries))
        kept = keep is not None and self.select_model(keep)
        if not kept and self._entries and self.table.currentRow() < 0:
            self.table.selectRow(0)
        self._show_details()
        self._fill_catalog_status()
        self._update_choice()

    def _unlisted(self) -> list[Path]:
        try:
            return self.library.unlisted()
        except (GambitError, OSError) as exc:
            log.warning("could not list the models folder: %s", exc)
            return []

    def selected_entry(self) -> LibraryEntry | None:
        path = self.selected_path()
        if path is None:
            return None
        return next((e for e in self._entries if e.path == path), None)

    def selected_path(self) -> Path | None:
        row = self.table.currentRow()
        item = self.table.item(row, COL_NAME) if row >= 0 else None
        value = item.data(_PATH_ROLE) if item is not None else None
        return Path(value) if isinstance(value, str) else None

    def select_model(self, path: str | os.PathLike[str]) -> bool:
        """Select the library entry of ``path``; False if it is not in the table."""
        for row in range(self.table.rowCount()):
            item = self.table.item(row, COL_NAME)
            value = item.data(_PATH_ROLE) if item is not None else None
            if item is not None and isinstance(value, str) and _same_file(value, path):
                self.table.selectRow(row)
                self.table.scrollToItem(item)
                return True
        return False

    def add_folder(self, folder: str | os.PathLike[str]) -> None:
        """Scan ``folder`` for models from now on (in the background)."""
        path = Path(folder)

        def job(_progress: Progress, _cancel: threading.Event) -> object:
            return self._worker_library().add_folder(path)

        def done(value: object) -> None:
            found = value if isinstance(value, list) else []
            self._say(f"Added the folder {path}: {len(found)} usable models in the library.")

        self._start("folder", f"Scanning {path}", job, done)

    def import_file(self, path: str | os.PathLike[str], copy: bool | None = None) -> None:
        """Import one model file, copied into the models folder or referenced
        where it is (``copy`` None: as the check box says)."""
        src = Path(path)
        do_copy = self.copy_check.isChecked() if copy is None else copy

        def job(progress: Progress, _cancel: threading.Event) -> object:
            return self._worker_library().import_file(src, copy=do_copy, progress=progress)

        def done(value: object) -> None:
            if isinstance(value, ModelInfo):
                how = "copied into the models folder" if do_copy else "referenced where it is"
                self._say(f"Imported {value.path.name} ({how}).")
                self.select_model(value.path)

        verb = "Copying" if do_copy else "Importing"
        self._start("import", f"{verb} {src.name}", job, done)

    def rescan(self) -> None:
        """Re-read the library's folders and files (in the background)."""

        def job(_progress: Progress, _cancel: threading.Event) -> object:
            return self._worker_library().rescan()

        def done(value: object) -> None:
            found = value if isinstance(value, list) else []
            bad = len(self.library.problems())
            extra = f"; {bad} file{'s' if bad != 1 else ''} could not be used" if bad else ""
            self._say(f"Rescanned: {len(found)} usable models{extra}.")

        self._start("rescan", "Rescanning the library", job, done)

    def remove_model(self, path: str | os.PathLike[str], delete_file: bool = False) -> None:
        """Forget a model; with ``delete_file``, also delete a file Gambit put in
        its models folder (never a file the user keeps elsewhere)."""
        if self.busy:
            self._show_error("Wait for the running task to finish before removing a model.")
            return
        self._clear_error()
        try:
            deleted = self.library.remove(path, delete_file=delete_file)
        except (GambitError, OSError) as exc:
            self._show_error(str(exc))
            return
        name = Path(path).name
        if deleted is not None:
            self._say(f"Removed {name} from the library and deleted the file.")
        else:
            self._say(f"Removed {name} from the library; the file stays where it is.")
        notes: list[str] = []
        if self._target and _same_file(self._target, path) and not Path(path).exists():
            self._target = ""
            notes.append(f"The target was {name}: it is now the embedded {DEFAULT_MODEL_NAME}.")
        draft = self._draft_path()
        if draft is not None and _same_file(draft, path) and not Path(path).exists():
            self._drafter, self._draft = "lookup", ""
            notes.append(f"The draft was {name}: drafting falls back to prompt lookup.")
        _show_message(self.pair_label, " ".join(notes), "warn")
        self.reload()

    def use_as_target(self) -> None:
        """Choose the selected model as the target; a chosen draft that cannot
        draft for it is dropped (prompt lookup takes over), saying why."""
        entry = self.selected_entry()
        if entry is None:
            return
        self._target = str(entry.path)
        message = f"{entry.path.name} is the target."
        tone: Tone = "good"
        draft = self._draft_path()
        if draft is not None:
            why = ""
            if _same_file(draft, entry.path):
                why = "a model cannot draft for itself"
            else:
                try:
                    report = pair_report(entry.info, self._info_for(draft))
                    if not report.compatible:
                        why = "; ".join(report.reasons)
                except (GambitError, OSError) as exc:
                    why = str(exc)
            if why:
                self._drafter, self._draft = "lookup", ""
                message = (
                    f"{entry.path.name} is the target. The draft {draft.name} cannot draft for "
                    f"it ({why}), so drafting falls back to prompt lookup."
                )
                tone = "warn"
        _show_message(self.pair_label, message, tone)
        self._after_choice()

    def use_as_draft(self) -> bool:
        """Choose the selected model as the draft of the chosen target, if it can
        draft for it; else say why inline. True when it was chosen."""
        entry = self.selected_entry()
        if entry is None:
            return False
        target_path = self._target_path()
        if target_path is None:
            _show_message(
                self.pair_label,
                f"Choose a target first: the embedded {DEFAULT_MODEL_NAME} is not in the "
                "models folder yet (it is fetched on first start).",
                "bad",
            )
            return False
        if _same_file(target_path, entry.path):
            _show_message(
                self.pair_label,
                f"{entry.path.name} is the target: a model cannot draft for itself. "
                "Choose a smaller model with the same tokenizer, or derive one.",
                "bad",
            )
            return False
        try:
            target = self._info_for(target_path)
            report = pair_report(target, entry.info)
        except (GambitError, OSError) as exc:
            _show_message(self.pair_label, str(exc), "bad")
            return False
        if not report.compatible:
            reasons = "\n".join(f"•  {r}" for r in report.reasons)
            _show_message(
                self.pair_label,
                f"{entry.path.name} cannot draft for {target_path.name}:\n{reasons}",
                "bad",
            )
            return False
        self._drafter, self._draft = "draft", str(entry.path)
        text = f"{entry.path.name} drafts for {target_path.name}: same tokenizer."
        if report.notes:
            text += "\nNote: " + "; ".join(report.notes) + "."
        _show_message(self.pair_label, text, "warn" if report.notes else "good")
        self._after_choice()
        return True

    def derive(self, ftype: str) -> None:
        """Re-quantize the selected model to ``ftype`` as a draft for it (in the
        background), register it, and select it when done."""
        entry = self.selected_entry()
        if entry is None:
            return
        src = entry.path
        dest_name = derived_name(src, ftype)
        if (self.library.models_dir / dest_name).exists():
            self._show_error(
                f"{dest_name} is already in Gambit's models folder: select it in the table "
                "(it may already be this model's draft), or remove it first to derive it again."
            )
            return

        def job(progress: Progress, cancel: threading.Event) -> object:
            return derive_draft(
                src, ftype, progress=progress, cancel=cancel, library=self._worker_library()
            )

        def done(value: object) -> None:
            if not isinstance(value, Path):
                return
            self.select_model(value)
            self._derived = (src, value)
            size = format_bytes(value.stat().st_size) if value.exists() else ""
            self._say(
                f"Derived {value.name} ({size}) from {src.name} and registered it as its "
                "draft. Measure how often the target accepts its guesses:"
            )
            self.measure_button.show()
            self.acceptance_label.clear()
            self.acceptance_label.hide()

        self._hide_derive_panel()
        self._start("derive", f"Deriving {dest_name} ({ftype})", job, done)

    def measure_acceptance(self) -> None:
        """Measure the last derived draft's acceptance against its target (a few
        seconds of real decoding, in the background)."""
        if self._derived is None:
            return
        target, draft = self._derived

        # The user's runtime settings (threads, GPU layers, exact kernels), at a
        # small context: the calibration prompts are short.
        options = RuntimeOptions(
            n_ctx=MEASURE_CONTEXT,
            n_threads=self._settings.threads,
            n_gpu_layers=self._settings.gpu_layers_target,
            strict_batch_invariance=self._settings.exact_kernels,
        )

        def job(_progress: Progress, _cancel: threading.Event) -> object:
            return measure_draft(target, draft, options=options)

        def done(value: object) -> None:
            if not isinstance(value, float):
                return
            self.measure_button.hide()
            tone: Tone = "good" if value >= 0.5 else "warn"
            colour = theme.tone_colour(tone, self.palette()).name()
            self.acceptance_label.setText(
                f"Acceptance: <b style='color:{colour}'>{value:.0%}</b> of drafted tokens"
                f" — {draft.name} drafting for {target.name} (greedy, γ = 4, 4 prompts)"
            )
            self.acceptance_label.show()
            self._say("Calibration finished.")

        self._start("measure", f"Measuring {draft.name} against {target.name}", job, done)

    def download(self, name: str, which: Which = "both") -> None:
        """Download a catalog pair (or one side of it) into the models folder."""
        pair = next((p for p in self._catalog if p.name == name), None)
        if pair is None:
            self._show_error(f"No catalog entry named {name!r}.")
            return

        def job(progress: Progress, _cancel: threading.Event) -> object:
            return download_pair(
                pair, progress=progress, which=which, library=self._worker_library()
            )

        def done(value: object) -> None:
            got = [p for p in value if isinstance(p, Path)] if isinstance(value, list) else []
            if got:
                self.select_model(got[0])
            names = " and ".join(p.name for p in got)
            extra = " and registered the draft for the target" if which == "both" else ""
            self._say(f"Downloaded {names}{extra}. Choose them on the Library tab.")

        side = {"both": "", "target": " (target)", "draft": " (draft)"}[which]
        self._start("download", f"Downloading {pair.name}{side}", job, done)

    def cancel_task(self) -> None:
        """Ask the running task to stop (it stops at its next progress check)."""
        if self._task is not None:
            self._task.cancel_event.set()
            self.cancel_button.setEnabled(False)
            self.task_label.setText(f"{self._task.label}: cancelling…")

    # ================================================================== layout

    def _build(self) -> None:
        self.tabs = QTabWidget()
        self.tabs.setObjectName("modelsTabs")
        self.tabs.addTab(self._library_page(), "Library")
        self.tabs.addTab(self._catalog_page(), "Catalog")

        # The activity strip: what runs now, or what the last task did.
        self.task_panel = QFrame()
        self.task_panel.setObjectName("taskPanel")
        self.task_label = QLabel()
        self.task_label.setObjectName("taskLabel")
        self.task_label.setWordWrap(True)
        self.task_label.setTextFormat(Qt.TextFormat.PlainText)
        self.progress = QProgressBar()
        self.progress.setObjectName("taskProgress")
        self.progress.setRange(0, PROGRESS_STEPS)
        self.progress.setTextVisible(False)
        self.progress.setFixedWidth(260)
        self.progress.setMaximumHeight(14)
        self.cancel_button = _button("Cancel", "cancelTaskButton")
        self.cancel_button.clicked.connect(self.cancel_task)
        self.measure_button = _button("Measure acceptance", "measureButton")
        self.measure_button.setToolTip(
            "Runs the target and the new draft on four short prompts and counts the "
            "drafted tokens the target accepts (a few seconds)."
        )
        self.measure_button.clicked.connect(self.measure_acceptance)
        self.measure_button.hide()
        palette = self.palette()
        accent = theme.pick(theme.ACCENT, palette)
        window = palette.color(QPalette.ColorRole.Window)
        self.task_panel.setStyleSheet(
            f"QFrame#taskPanel {{ background: {theme.blend(accent, window, 0.93).name()};"
            f" border: 1px solid {theme.blend(accent, window, 0.7).name()};"
            " border-radius: 4px; }"
        )
        strip = QHBoxLayout(self.task_panel)
        strip.setContentsMargins(10, 6, 6, 6)
        strip.setSpacing(8)
        strip.addWidget(self.task_label, 1)
        strip.addWidget(self.measure_button)
        strip.addWidget(self.progress)
        strip.addWidget(self.cancel_button)
        self.progress.hide()
        self.cancel_button.hide()
        self.task_panel.hide()

        self.acceptance_label = QLabel()
        self.acceptance_label.setObjectName("acceptanceLabel")
        self.acceptance_label.setTextFormat(Qt.TextFormat.RichText)
        self.acceptance_label.setWordWrap(True)
        self.acceptance_label.hide()

        self.error_label = _message_label("errorLabel")

        self.choice_label = theme.muted_label()
        self.choice_label.setObjectName("choiceLabel")
        self.choice_label.setTextFormat(Qt.TextFormat.RichText)
        self.buttons = QDialogButtonBox(
            QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel
        )
        self.buttons.setObjectName("modelsButtons")
        ok = self.buttons.button(QDialogButtonBox.StandardButton.Ok)
        ok.setText("Use these models")
        ok.setAutoDefault(False)
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)
        bottom = QHBoxLayout()
        bottom.setSpacing(12)
        bottom.addWidget(self.choice_label, 1)
        bottom.addWidget(self.buttons)

        layout = QVBoxLayout(self)
        layout.setContentsMargins(14, 14, 14, 14)
        layout.setSpacing(10)
        layout.addWidget(self.tabs, 1)
        layout.addWidget(self.task_panel)
        layout.addWidget(self.acceptance_label)
        layout.addWidget(self.error_label)
        layout.addLayout(bottom)

    def _library_page(self) -> QWidget:
        # ---- left: the table, its problems, the buttons
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setObjectName("modelTable")
        self.table.setHorizontalHeaderLabels(list(COLUMNS))
        for col, tip in enumerate(COLUMN_TIPS):
            header_item = self.table.horizontalHeaderItem(col)
            if header_item is not None:
                header_item.setToolTip(tip)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setAlternatingRowColors(True)
        self.table.setShowGrid(False)
        self.table.setWordWrap(False)
        self.table.setTextElideMode(Qt.TextElideMode.ElideMiddle)
        self.table.verticalHeader().hide()
        self.table.verticalHeader().setDefaultSectionSize(28)
        header = self.table.horizontalHeader()
        header.setHighlightSections(False)
        header.setDefaultAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter)
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(COL_NAME, QHeaderView.ResizeMode.Stretch)
        header.setMinimumSectionSize(60)
        self.table.setSortingEnabled(True)
        self.table.sortByColumn(COL_NAME, Qt.SortOrder.AscendingOrder)
        self.table.currentCellChanged.connect(self._on_current_changed)

        self.empty_label = theme.muted_label(EMPTY_TEXT)
        self.empty_label.setObjectName("emptyLabel")
        self.empty_label.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.empty_label.setMinimumHeight(120)
        self.empty_label.hide()

        self.problems_label = _message_label("problemsLabel")

        self.add_folder_button = _button("Add folder…", "addFolderButton")
        self.add_folder_button.setToolTip("Scan a folder for .gguf files, now and on every rescan")
        self.add_folder_button.clicked.connect(self._browse_folder)
        self.import_button = _button("Import file…", "importButton")
        self.import_button.clicked.connect(self._browse_file)
        self.copy_check = QCheckBox("Copy into Gambit's models folder")
        self.copy_check.setObjectName("copyCheck")
        self.copy_check.setToolTip(
            "Checked: the file is copied, so the original can be moved or deleted.\n"
            "Unchecked: the library refers to the file where it is."
        )
        self.remove_button = _button("Remove", "removeButton")
        self.remove_button.setToolTip("Forget the selected model (asks before deleting a file)")
        self.remove_button.clicked.connect(self._confirm_remove)
        self.rescan_button = _button("Rescan", "rescanButton")
        self.rescan_button.setToolTip("Look for new, changed and missing files")
        self.rescan_button.clicked.connect(self.rescan)
        row = QHBoxLayout()
        row.setSpacing(6)
        row.addWidget(self.add_folder_button)
        row.addWidget(self.import_button)
        row.addSpacing(4)
        row.addWidget(self.copy_check)
        row.addStretch(1)
        row.addWidget(self.remove_button)
        row.addWidget(self.rescan_button)
        folder_note = theme.muted_label(f"Gambit's models folder: {self.library.models_dir}")
        folder_note.setObjectName("modelsFolderLabel")
        folder_note.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)

        left = QWidget()
        column = QVBoxLayout(left)
        column.setContentsMargins(0, 0, 6, 0)
        column.setSpacing(8)
        column.addWidget(self.table, 1)
        column.addWidget(self.empty_label, 1)
        column.addWidget(self.problems_label)
        column.addLayout(row)
        column.addWidget(folder_note)

        # ---- right: the selected model
        right = QScrollArea()
        right.setObjectName("detailsScroll")
        right.setWidgetResizable(True)
        right.setFrameShape(QFrame.Shape.NoFrame)
        right.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        right.setWidget(self._details_pane())
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

    def _details_pane(self) -> QWidget:
        pane = QWidget()
        pane.setObjectName("detailsPane")
        column = QVBoxLayout(pane)
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

        # -- choose
        self.use_target_button = _button("Use as target", "useTargetButton")
        self.use_target_button.setToolTip("The model that writes the reply")
        self.use_target_button.clicked.connect(self.use_as_target)
        self.use_draft_button = _button("Use as draft", "useDraftButton")
        self.use_draft_button.setToolTip(
            "The small model that guesses ahead for the target; it must share its tokenizer"
        )
        self.use_draft_button.clicked.connect(self.use_as_draft)
        use_row = QHBoxLayout()
        use_row.setSpacing(6)
        use_row.addWidget(self.use_target_button)
        use_row.addWidget(self.use_draft_button)
        use_row.addStretch(1)
        self.pair_label = _message_label("pairLabel")
        column.addLayout(use_row)
        column.addWidget(self.pair_label)

        # -- memory
        self.memory_label = QLabel()
        self.memory_label.setObjectName("memoryLabel")
        self.memory_label.setTextFormat(Qt.TextFormat.RichText)
        self.memory_label.setWordWrap(True)
        self.memory_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.memory_bar = QProgressBar()
        self.memory_bar.setObjectName("memoryBar")
        self.memory_bar.setTextVisible(False)
        self.memory_bar.setRange(0, PROGRESS_STEPS)
        self.memory_bar.setFixedHeight(6)
        memory = QVBoxLayout()
        memory.setSpacing(6)
        memory.addWidget(self.memory_label)
        memory.addWidget(self.memory_bar)
        self.memory_group = QGroupBox("Memory")
        self.memory_group.setLayout(memory)
        column.addWidget(self.memory_group)

        # -- compatible drafts
        self.drafts_list = QListWidget()
        self.drafts_list.setObjectName("draftsList")
        self.drafts_list.setTextElideMode(Qt.TextElideMode.ElideMiddle)
        self.drafts_list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.drafts_list.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.drafts_list.setToolTip("Double-click a draft to select it in the table")
        self.drafts_list.itemDoubleClicked.connect(self._on_draft_activated)
        drafts = QVBoxLayout()
        drafts.setSpacing(4)
        drafts.addWidget(self.drafts_list)
        drafts.addWidget(
            theme.muted_label(
                "Same tokenizer and smaller, smallest first: the first is the suggestion."
            )
        )
        self.drafts_group = QGroupBox("Compatible drafts in the library")
        self.drafts_group.setLayout(drafts)
        column.addWidget(self.drafts_group)

        # -- derive
        self.derive_button = _button("Derive a draft…", "deriveButton")
        self.derive_button.setToolTip(
            "Re-quantize this model to fewer bits with llama.cpp's quantizer"
        )
        self.derive_button.clicked.connect(self._toggle_derive_panel)
        self.derive_combo = QComboBox()
        self.derive_combo.setObjectName("deriveQuantCombo")
        self.derive_combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)
        self.derive_start_button = _button("Derive", "deriveStartButton")
        self.derive_start_button.clicked.connect(self._on_derive_start)
        self.derive_panel = QWidget()
        self.derive_panel.setObjectName("derivePanel")
        panel_row = QHBoxLayout(self.derive_panel)
        panel_row.setContentsMargins(0, 0, 0, 0)
        panel_row.setSpacing(6)
        panel_row.addWidget(QLabel("Quantization:"))
        panel_row.addWidget(self.derive_combo)
        panel_row.addWidget(self.derive_start_button)
        panel_row.addStretch(1)
        self.derive_combo.currentIndexChanged.connect(self._show_derive_estimate)
        # What the chosen quantization may gain, and why others are not offered.
        self.derive_estimate_label = theme.muted_label()
        self.derive_estimate_label.setObjectName("deriveEstimateLabel")
        self.derive_missing_label = theme.muted_label()
        self.derive_missing_label.setObjectName("deriveMissingLabel")
        self._derive_advice: DeriveAdvice | None = None
        self.derive_panel.hide()
        derive_row = QHBoxLayout()
        derive_row.addWidget(self.derive_button)
        derive_row.addStretch(1)
        derive = QVBoxLayout()
        derive.setSpacing(6)
        derive.addWidget(
            theme.muted_label(
                "A copy of this model with fewer bits per weight: the very same tokenizer, "
                "so it always pairs. Only quantizations that read clearly fewer bytes per "
                "token than this model are offered, with what they may gain. Written to "
                "Gambit's models folder and registered as this model's draft."
            )
        )
        derive.addLayout(derive_row)
        derive.addWidget(self.derive_panel)
        derive.addWidget(self.derive_estimate_label)
        derive.addWidget(self.derive_missing_label)
        self.derive_group = QGroupBox("Derive a draft")
        self.derive_group.setLayout(derive)
        column.addWidget(self.derive_group)

        # -- details
        self._details: dict[str, QLabel] = {}
        form = theme.form_layout(labels_on_top_row=True, vertical_spacing=6)
        for key, label in (
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
        ):
            value = _value_label()
            value.setObjectName(f"detail_{key}")
            self._details[key] = value
            form.addRow(label + ":", value)
        mono = QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont)
        self._details["fingerprint"].setFont(mono)
        self._details["fingerprint"].setToolTip(
            "A digest of the tokenizer: models with the same fingerprint share one, "
            "so either can draft for the other."
        )
        self.details_group = QGroupBox("Details")
        self.details_group.setLayout(form)
        column.addWidget(self.details_group)
        column.addStretch(1)
        return pane

    def _catalog_page(self) -> QWidget:
        intro = theme.muted_label(
            "Suggested target and draft pairs on Hugging Face; each pair's fit is checked "
            "once it is downloaded, and ✓ marks pairs the developers ran end to end. "
            "Downloads go to Gambit's "
            "models folder and resume where they stopped. Without network, download the "
            "files on another machine and use Import file… on the Library tab."
        )
        intro.setObjectName("catalogIntro")
        self.catalog_table = QTableWidget(0, len(CATALOG_COLUMNS))
        self.catalog_table.setObjectName("catalogTable")
        self.catalog_table.setHorizontalHeaderLabels(list(CATALOG_COLUMNS))
        self.catalog_table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.catalog_table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.catalog_table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.catalog_table.setAlternatingRowColors(True)
        self.catalog_table.setShowGrid(False)
        self.catalog_table.verticalHeader().hide()
        self.catalog_table.verticalHeader().setDefaultSectionSize(34)
        header = self.catalog_table.horizontalHeader()
        header.setHighlightSections(False)
        header.setDefaultAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter)
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(1, QHeaderView.ResizeMode.Stretch)
        header.setSectionResizeMode(2, QHeaderView.ResizeMode.Stretch)
        self.catalog_table.currentCellChanged.connect(self._on_catalog_row)
        self.catalog_details = theme.muted_label()
        self.catalog_details.setObjectName("catalogDetails")
        self.catalog_details.setTextFormat(Qt.TextFormat.PlainText)
        self.catalog_details.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.catalog_error = _message_label("catalogErrorLabel")

        page = QWidget()
        column = QVBoxLayout(page)
        column.setContentsMargins(10, 10, 10, 10)
        column.setSpacing(8)
        column.addWidget(intro)
        column.addWidget(self.catalog_table, 1)
        column.addWidget(self.catalog_details)
        column.addWidget(self.catalog_error)
        return page

    # ================================================================== filling

    def _fill_table(self) -> None:
        table = self.table
        table.setSortingEnabled(False)
        table.setRowCount(len(self._entries))
        for row, entry in enumerate(self._entries):
            info = entry.info
            name = _cell(_display_name(entry.path))
            name.setData(_PATH_ROLE, str(entry.path))
            name.setToolTip(f"{info.name}\n{entry.path}")
            cells = {
                COL_NAME: name,
                COL_ARCH: _cell(info.architecture),
                COL_PARAMS: _cell(format_params(info.n_params), info.n_params, right=True),
                COL_QUANT: _cell(info.quantization),
                COL_SIZE: _cell(format_bytes(info.file_size), info.file_size, right=True),
                COL_VOCAB: _cell(
                    f"{info.vocab_size:,} {info.vocab_type_name}", info.vocab_size, right=True
                ),
                COL_CONTEXT: _cell(f"{info.context_length:,}", info.context_length, right=True),
                COL_TEMPLATE: _cell("yes" if info.has_chat_template else "no"),
                COL_ROLE: _cell(""),
            }
            for col, item in cells.items():
                table.setItem(row, col, item)
        table.setSortingEnabled(True)
        self._refresh_roles()

    def _refresh_roles(self) -> None:
        target, draft = self._target_path(), self._draft_path()
        palette = self.table.palette()
        for row in range(self.table.rowCount()):
            name = self.table.item(row, COL_NAME)
            role = self.table.item(row, COL_ROLE)
            value = name.data(_PATH_ROLE) if name is not None else None
            if role is None or not isinstance(value, str):
                continue
            text, colour = "", None
            if target is not None and _same_file(value, target):
                text, colour = "Target", theme.pick(theme.ACCENT, palette)
            elif draft is not None and _same_file(value, draft):
                text, colour = "Draft", theme.pick(theme.VIOLET, palette)
            role.setText(text)
            font = role.font()
            font.setBold(bool(text))
            role.setFont(font)
            if colour is not None:
                role.setForeground(colour)

    def _on_current_changed(self, row: int, _col: int, prev_row: int, _prev_col: int) -> None:
        if row != prev_row:
            _show_message(self.pair_label, "")
            self._hide_derive_panel()
            self._show_details()

    def _show_details(self) -> None:
        entry = self.selected_entry()
        idle = not self.busy
        for widget in (self.use_target_button, self.use_draft_button):
            widget.setEnabled(entry is not None)
        self.derive_button.setEnabled(entry is not None and idle)
        self.remove_button.setEnabled(entry is not None and idle)
        for group in (self.memory_group, self.drafts_group, self.derive_group, self.details_group):
            group.setVisible(entry is not None)
        if entry is None:
            self.title_label.setText("No model selected")
            self.path_edit.clear()
            self.path_edit.hide()
            return
        info = entry.info
        self.path_edit.show()
        self.title_label.setText(entry.path.name)
        self.path_edit.setText(str(entry.path))
        self.path_edit.setCursorPosition(0)
        self.path_edit.setToolTip(str(entry.path))

        origin = ORIGINS.get(entry.origin, entry.origin)
        if entry.draft_for:
            origin += "; draft for " + ", ".join(Path(t).name for t in entry.draft_for)
        head_dim = (
            f"{info.key_length}" if info.key_length == info.value_length
            else f"{info.key_length} / {info.value_length}"
        )  # fmt: skip
        values = {
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
            "template": "yes" if info.has_chat_template else "no (chat needs one; plain text only)",
            "fingerprint": info.tokenizer_digest or "—",
        }
        for key, text in values.items():
            self._details[key].setText(text)
        self._show_memory(entry)
        self._show_drafts(entry)

    def _show_memory(self, entry: LibraryEntry) -> None:
        """Estimate the selected model as the target with the chosen draft, if that
        shares its tokenizer (or, when the selection is the chosen draft, the
        chosen target with it)."""
        n_ctx = self._settings.context_size
        kv: KVType = "q8_0" if self._settings.exact_kernels else "f16"
        target, draft = entry.info, None
        draft_path = self._draft_path()
        target_path = self._target_path()
        try:
            if draft_path is not None and _same_file(draft_path, entry.path):
                draft = entry.info
                target = self._info_for(target_path) if target_path is not None else entry.info
                if target is draft:
                    draft = None
            elif draft_path is not None:
                # With the chosen draft if it could draft for this model (the same
                # tokenizer fingerprint: a cheap check, no token lists read).
                chosen = self._info_for(draft_path)
                if chosen.tokenizer_digest == entry.info.tokenizer_digest:
                    draft = chosen
            t_est = estimate_memory(target, n_ctx, kv)
            d_est = estimate_memory(draft, n_ctx, kv) if draft is not None else None
            available = available_memory()
            warning = check_fits(
                target,
                draft,
                n_ctx,
                kv_type=kv,
                gpu_layers=self._settings.gpu_layers_target,
                available=available,
            )
        except (GambitError, OSError, ValueError) as exc:
            self.memory_label.setText(f"No estimate: {_html(str(exc))}")
            self.memory_bar.hide()
            return
        palette = self.memory_label.palette()
        muted = theme.muted(palette).name()

        def line(role: str, info: ModelInfo, est: MemoryEstimate) -> str:
            parts = " · ".join(
                f"{what} {est_bytes / MIB:,.1f}"
                for what, est_bytes in (
                    ("weights", est.weights_bytes),
                    ("KV cache", est.kv_bytes),
                    ("compute", est.compute_bytes),
                    ("other", est.overhead_bytes),
                )
            )
            return (
                f"<tr><td><b>{role}</b>&nbsp; {_html(info.path.name)}</td>"
                f"<td align='right'>&nbsp;&nbsp;{format_bytes(est.total_bytes)}</td></tr>"
                f"<tr><td colspan='2' style='color:{muted}'>{parts} MiB</td></tr>"
            )

        total = t_est.total_bytes + (d_est.total_bytes if d_est is not None else 0)
        rows = line("Target", target, t_est)
        if draft is not None and d_est is not None:
            rows += line("Draft", draft, d_est)
        rows += f"<tr><td><b>Total</b></td><td align='right'><b>{format_bytes(total)}</b></td></tr>"
        kv_name = "Q8_0" if kv == "q8_0" else "F16"
        html = (
            f"<table width='100%' cellspacing='0' cellpadding='1'>{rows}</table>"
            f"<p style='color:{muted}'>At {n_ctx:,} tokens of context ({kv_name} KV cache), "
            f"against {format_bytes(available)} of memory available now.</p>"
        )
        if warning:
            amber = theme.pick(theme.WARN, palette).name()
            html += f"<p style='color:{amber}'><b>⚠ Will not fit.</b> {_html(warning)}</p>"
        self.memory_label.setText(html)
        share = total / available if available > 0 else 1.0
        self.memory_bar.setValue(min(PROGRESS_STEPS, max(1, round(share * PROGRESS_STEPS))))
        tone: Tone = "bad" if warning else ("warn" if share > 0.6 else "good")
        chunk = theme.tone_colour(tone, palette).name()
        groove = theme.faint(palette).name()
        self.memory_bar.setStyleSheet(
            f"QProgressBar#memoryBar {{ border: none; border-radius: 3px; background: {groove}; }}"
            f" QProgressBar#memoryBar::chunk {{ border-radius: 3px; background: {chunk}; }}"
        )
        self.memory_bar.setToolTip(f"{share:.1%} of the memory available now")
        self.memory_bar.show()

    def _show_drafts(self, entry: LibraryEntry) -> None:
        self.drafts_list.clear()
        key = str(entry.path)
        drafts = self._drafts_cache.get(key)
        if drafts is None:
            try:
                drafts = self.library.drafts_for(entry.info)
            except (GambitError, OSError) as exc:
                item = QListWidgetItem(f"Could not check: {exc}")
                item.setFlags(Qt.ItemFlag.NoItemFlags)
                self.drafts_list.addItem(item)
                return
            self._drafts_cache[key] = drafts
        if not drafts:
            item = QListWidgetItem("None yet: derive one below, or import a smaller sibling.")
            item.setFlags(Qt.ItemFlag.NoItemFlags)
            self.drafts_list.addItem(item)
            self._fit_drafts_list()
            return
        for i, info in enumerate(drafts):
            text = f"{info.path.name}  ·  {format_bytes(info.file_size)}"
            if i == 0:
                text += "  ·  suggested"
            item = QListWidgetItem(text)
            item.setData(_PATH_ROLE, str(info.path))
            item.setToolTip(f"{info.path}\n{info.quantization}, {format_params(info.n_params)}")
            if i == 0:
                font = item.font()
                font.setBold(True)
                item.setFont(font)
            self.drafts_list.addItem(item)
        self._fit_drafts_list()

    def _fit_drafts_list(self) -> None:
        """As tall as its rows (up to four), so one suggestion leaves no blank box."""
        rows = max(1, min(4, self.drafts_list.count()))
        row_height = max(self.drafts_list.sizeHintForRow(0), self.fontMetrics().height() + 4)
        frame = 2 * self.drafts_list.frameWidth()
        self.drafts_list.setFixedHeight(rows * row_height + frame + 4)

    def _update_choice(self) -> None:
        target = self._target_path()
        if self._target:
            target_text = _html(Path(self._target).name)
        elif target is not None:
            target_text = f"embedded {DEFAULT_MODEL_NAME}"
        else:
            target_text = f"embedded {DEFAULT_MODEL_NAME} (fetched on first start)"
        drafter = {
            "none": "none",
            "lookup": "prompt lookup",
            "layerskip": "self-speculation (skip layers)",
            "draft": f"draft model {_html(Path(self._draft).name) if self._draft else '(none)'}",
        }[self._drafter]
        changed = self.chosen_settings() != self._settings
        self.choice_label.setText(
            f"Target: <b>{target_text}</b>&nbsp;&nbsp;·&nbsp;&nbsp;Drafter: <b>{drafter}</b>"
            + ("&nbsp;&nbsp;(changed)" if changed else "")
        )

    def _after_choice(self) -> None:
        self._refresh_roles()
        entry = self.selected_entry()
        if entry is not None:
            self._show_memory(entry)
        self._update_choice()

    # ================================================================== catalog

    def _load_catalog(self) -> None:
        try:
            self._catalog = load_catalog()
        except GambitError as exc:
            self._catalog = []
            _show_message(self.catalog_error, str(exc), "bad")
        table = self.catalog_table
        table.setRowCount(len(self._catalog))
        self.download_buttons.clear()
        for row, pair in enumerate(self._catalog):
            name = QTableWidgetItem(pair.name)
            name.setToolTip(pair.description)
            if pair.verified:
                name.setText(f"{pair.name}  ✓")
                name.setToolTip(pair.description + "\nVerified end to end by the developers.")
            table.setItem(row, 0, name)
            for col, item in ((1, pair.target), (2, pair.draft)):
                cell = QTableWidgetItem(f"{item.filename}  ({item.params})")
                cell.setToolTip(f"{item.repo}\n{_mb(item.size_mb)}")
                table.setItem(row, col, cell)
            size = QTableWidgetItem(_mb(pair.target.size_mb + pair.draft.size_mb))
            size.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
            table.setItem(row, 3, size)
            table.setItem(row, 4, QTableWidgetItem(""))
            table.setCellWidget(row, 5, self._download_button(pair))
        if self._catalog:
            table.selectRow(0)

    def _download_button(self, pair: CatalogPair) -> QWidget:
        button = QToolButton()
        button.setObjectName("downloadButton")
        button.setText("Download")
        button.setToolTip(f"Download both files ({_mb(pair.target.size_mb + pair.draft.size_mb)})")
        button.setPopupMode(QToolButton.ToolButtonPopupMode.MenuButtonPopup)
        menu = QMenu(button)
        both = menu.addAction("Both files")
        target = menu.addAction(f"Target only ({_mb(pair.target.size_mb)})")
        draft = menu.addAction(f"Draft only ({_mb(pair.draft.size_mb)})")
        both.triggered.connect(lambda: self.download(pair.name, "both"))
        target.triggered.connect(lambda: self.download(pair.name, "target"))
        draft.triggered.connect(lambda: self.download(pair.name, "draft"))
        button.setMenu(menu)
        button.clicked.connect(lambda: self.download(pair.name, "both"))
        self.download_buttons[pair.name] = button
        holder = QWidget()
        row = QHBoxLayout(holder)
        row.setContentsMargins(4, 2, 4, 2)
        row.addWidget(button)
        return holder

    def _fill_catalog_status(self) -> None:
        have = {e.path.name for e in self._entries}
        for row, pair in enumerate(self._catalog):
            got_t, got_d = pair.target.filename in have, pair.draft.filename in have
            text = (
                "in the library" if got_t and got_d
                else "target in the library" if got_t
                else "draft in the library" if got_d
                else ""
            )  # fmt: skip
            item = self.catalog_table.item(row, 4)
            if item is not None:
                item.setText(text)

    def _on_catalog_row(self, row: int, _col: int, _prev_row: int, _prev_col: int) -> None:
        if not 0 <= row < len(self._catalog):
            self.catalog_details.clear()
            return
        pair = self._catalog[row]
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
        self.catalog_details.setText("\n".join(lines))

    # ================================================================== tasks

    def _worker_library(self) -> ModelLibrary:
        """A library object of the worker's own over the same index and folder
        (the index is re-read and written atomically on every change)."""
        return ModelLibrary(self.library.index_path, self.library.models_dir)

    def _start(
        self, kind: TaskKind, label: str, job: Job, on_done: Callable[[object], None]
    ) -> None:
        if self._task is not None:
            self._show_error(f"Wait for “{self._task.label}” to finish, or cancel it.")
            return
        self._clear_error()
        if kind != "measure":
            self.measure_button.hide()
        task = _TaskThread(kind, label, job, self)
        task.on_done = on_done
        task.progressed.connect(self._on_progress)
        task.finished.connect(self._on_task_finished)
        self._task = task
        self.task_label.setText(f"{label}…")
        if kind in ("measure", "folder", "rescan"):
            self.progress.setRange(0, 0)  # busy: no byte counts to show
        else:
            self.progress.setRange(0, PROGRESS_STEPS)
            self.progress.setValue(0)
        self.progress.show()
        self.cancel_button.setVisible(True)
        cancellable = kind in ("import", "derive", "download")
        self.cancel_button.setEnabled(cancellable)
        self.cancel_button.setToolTip(
            "" if cancellable else "This step cannot be stopped midway; it takes seconds."
        )
        self.task_panel.show()
        self._set_idle(False)
        task.start()

    @Slot(str, object, object)
    def _on_progress(self, stage: str, done: object, total: object) -> None:
        task = self._task
        if task is None or not isinstance(done, int) or not isinstance(total, int):
            return
        if task.cancel_event.is_set():
            return
        if total > 0:
            self.progress.setRange(0, PROGRESS_STEPS)
            self.progress.setValue(min(PROGRESS_STEPS, round(PROGRESS_STEPS * done / total)))
            what = task.label if stage in ("quantizing", "copying") else stage.capitalize()
            self.task_label.setText(f"{what}: {format_bytes(done)} of {format_bytes(total)}")

    @Slot()
    def _on_task_finished(self) -> None:
        task = self._task
        if task is None or task is not self.sender():
            return
        task.wait()
        self._task = None
        outcome = task.outcome or TaskOutcome(task.kind, "failed", message="no result")
        task.deleteLater()
        self.progress.hide()
        self.cancel_button.hide()
        self._set_idle(True)
        if outcome.status == "cancelled":
            self._say(f"{task.label}: cancelled; nothing was left behind.")
        elif outcome.status == "failed":
            self._say("")
            self._show_error(outcome.message)
        if outcome.kind != "measure":
            self.reload()
        if outcome.status == "done" and task.on_done is not None:
            try:
                task.on_done(outcome.value)
            except (GambitError, OSError) as exc:
                self._show_error(str(exc))
        self.task_finished.emit(outcome)

    def _set_idle(self, idle: bool) -> None:
        for widget in (
            self.add_folder_button,
            self.import_button,
            self.rescan_button,
            self.derive_start_button,
            self.measure_button,
            *self.download_buttons.values(),
        ):
            widget.setEnabled(idle)
        has_selection = self.selected_entry() is not None
        self.remove_button.setEnabled(idle and has_selection)
        self.derive_button.setEnabled(idle and has_selection)

    def _stop_task(self) -> None:
        """Cancel a running task and wait for its thread (closing the dialog)."""
        task = self._task
        if task is None:
            return
        task.cancel_event.set()
        task.wait()
        self._task = None

    def done(self, result: int) -> None:  # the one way a QDialog closes
        self._stop_task()
        super().done(result)

    # ================================================================== helpers

    def _say(self, text: str) -> None:
        self.task_label.setText(text)
        self.task_panel.setVisible(bool(text) or self.busy or self.measure_button.isVisible())

    def _show_error(self, message: str) -> None:
        _show_message(self.error_label, message, "bad")

    def _clear_error(self) -> None:
        _show_message(self.error_label, "")
        _show_message(self.catalog_error, "")

    def _info_for(self, path: str | os.PathLike[str]) -> ModelInfo:
        """A model's metadata: from the library if it is there, else from its header."""
        for entry in self._entries:
            if _same_file(entry.path, path):
                return entry.info
        return inspect_model(path)

    def _target_path(self) -> Path | None:
        """The chosen target file; for the embedded default model, its file if present."""
        if self._target:
            return Path(self._target).expanduser()
        bundled = bundled_model_path()
        if bundled is not None:
            return bundled
        for folder in (self.library.models_dir, paths.models_dir()):
            candidate = folder / DEFAULT_MODEL_FILE
            if candidate.is_file():
                return candidate
        return None

    def _draft_path(self) -> Path | None:
        if self._drafter == "draft" and self._draft:
            return Path(self._draft).expanduser()
        return None

    def _on_draft_activated(self, item: QListWidgetItem) -> None:
        value = item.data(_PATH_ROLE)
        if isinstance(value, str):
            self.select_model(value)

    def _toggle_derive_panel(self) -> None:
        if self.derive_panel.isVisible() or self.derive_missing_label.isVisible():
            self._hide_derive_panel()
            return
        entry = self.selected_entry()
        if entry is None:
            return
        try:
            advice = advise(entry.path, self._cost_curve(entry.path), self._settings.gamma_max)
        except (GambitError, OSError) as exc:
            self._show_error(str(exc))
            return
        self._derive_advice = advice
        self.derive_combo.blockSignals(True)
        self.derive_combo.clear()
        for option in advice.offered:
            self.derive_combo.addItem(option.label(), option.ftype)
        self.derive_combo.blockSignals(False)
        missing = advice.missing()
        if not advice.offered:
            missing = (
                "No quantization is meaningfully cheaper than this model, so none is offered: "
                "import a smaller model of the same family, or use prompt lookup. " + missing
            )
        self.derive_missing_label.setText(missing)
        self.derive_missing_label.setVisible(bool(missing))
        self.derive_panel.setVisible(bool(advice.offered))
        self._show_derive_estimate()

    def _hide_derive_panel(self) -> None:
        for widget in (self.derive_panel, self.derive_estimate_label, self.derive_missing_label):
            widget.hide()

    def _cost_curve(self, target: Path) -> CostCurve | None:
        """The target's verification cost if a kernel probe measured it here, with
        the threads, GPU layers, batch sizes and kernels these settings load it with."""
        s = self._settings
        nodes = s.tree_nodes if s.tree_drafts else s.gamma_max
        return cached_curve(
            target,
            n_threads=s.threads or default_threads(),
            n_gpu_layers=s.gpu_layers_target,
            k_max=nodes + 1,
            exact=s.exact_kernels,
            cache_dir=paths.cache_dir(),
        )

    def _show_derive_estimate(self) -> None:
        advice = self._derive_advice
        option = advice.option(self.derive_combo.currentData()) if advice else None
        text = f"{option.estimate()} {advice.curve.source}" if option and advice else ""
        self.derive_estimate_label.setText(text)
        self.derive_estimate_label.setVisible(bool(text))

    def _on_derive_start(self) -> None:
        ftype = self.derive_combo.currentData()
        if isinstance(ftype, str):
            self.derive(ftype)

    def _browse_folder(self) -> None:
        dialog = QFileDialog(self, "Add a folder of models", str(Path.home()))
        dialog.setObjectName("folderDialog")
        dialog.setFileMode(QFileDialog.FileMode.Directory)
        dialog.setOption(QFileDialog.Option.ShowDirsOnly, True)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.fileSelected.connect(self.add_folder)
        dialog.open()

    def _browse_file(self) -> None:
        dialog = QFileDialog(self, "Import a model file", str(Path.home()), GGUF_FILTER)
        dialog.setObjectName("importDialog")
        dialog.setFileMode(QFileDialog.FileMode.ExistingFile)
        dialog.setAcceptMode(QFileDialog.AcceptMode.AcceptOpen)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.fileSelected.connect(lambda path: self.import_file(path))
        dialog.open()

    def _confirm_remove(self) -> None:
        entry = self.selected_entry()
        if entry is None:
            return
        if entry.origin not in _OWNED:
            self.remove_model(entry.path)
            return
        box = QMessageBox(
            QMessageBox.Icon.Question,
            "Remove model",
            f"Remove {entry.path.name} from the library?\n\nGambit put this file in its "
            f"models folder ({format_bytes(entry.info.file_size)}); it can delete it too.",
            QMessageBox.StandardButton.Cancel,
            self,
        )
        box.setObjectName("removeBox")
        delete = box.addButton("Remove and delete the file", QMessageBox.ButtonRole.DestructiveRole)
        keep = box.addButton("Remove, keep the file", QMessageBox.ButtonRole.AcceptRole)
        box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)

        def chosen() -> None:
            clicked = box.clickedButton()
            if clicked is delete:
                self.remove_model(entry.path, delete_file=True)
            elif clicked is keep:
                self.remove_model(entry.path)

        box.finished.connect(chosen)
        box.open()


def _display_name(path: Path) -> str:
    """A model's name in the table: its file name without ``.gguf`` (general.name
    is often the same for every quantization of a model)."""
    return path.name[: -len(".gguf")] if path.name.lower().endswith(".gguf") else path.name


def _html(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
