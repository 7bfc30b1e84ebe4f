"""The Models dialog: the user's GGUF files, which pair to use, and where to get more.

It wires the package's parts (see ``gambit.ui.models_dialog``) and holds the
actions: import, scan, remove, choose, derive, measure, download. Slow work
runs in the background against its own ``ModelLibrary`` over the same index,
so the UI thread never waits on it; every ``GambitError`` is shown inline and
nothing a user does raises out of the dialog. The dialog edits a copy of the
settings: :meth:`ModelsDialog.chosen_settings` returns them with the target
and draft chosen here.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Final

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QHBoxLayout,
    QLabel,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from gambit.engine.machine.kernels import implied_kernels
from gambit.engine.machine.runtime import RuntimeOptions
from gambit.errors import GambitError
from gambit.formats.gguf_info import ModelInfo, inspect_model
from gambit.fsutil import Progress
from gambit.models.catalog import Which
from gambit.models.catalog import download as download_pair
from gambit.models.derive import derive_draft, derived_name
from gambit.models.derive import measure_acceptance as measure_draft
from gambit.models.derive_advice import advise
from gambit.models.library import LibraryEntry, ModelLibrary
from gambit.models.pairing import drafts_through_text, estimate_pair
from gambit.qt.compat import give_to_qt_parents
from gambit.qt.tasks import Job, TaskOutcome, TaskThread
from gambit.storage.settings import Settings
from gambit.ui import theme
from gambit.ui.models_dialog.catalog import CatalogPage
from gambit.ui.models_dialog.choice import Choice
from gambit.ui.models_dialog.derive_panel import settings_curve
from gambit.ui.models_dialog.details import DetailsPane
from gambit.ui.models_dialog.library_page import (
    LOOKING_TEXT,
    LibraryPage,
    ask_file,
    ask_folder,
    ask_remove,
    library_tab,
    problem_lines,
)
from gambit.ui.models_dialog.memory_view import Workers, estimate_pair_memory
from gambit.ui.models_dialog.tasks import TaskKind, TaskStrip
from gambit.ui.models_dialog.text import format_bytes, same_file
from gambit.ui.models_dialog.widgets import message_label, show_message
from gambit.ui.models_dialog.worker_memory import WorkerMemoryProbe
from gambit.ui.theme import Tone
from gambit.words import counted

log = logging.getLogger(__name__)

MEASURE_CONTEXT: Final = 512  # tokens: the calibration prompts and replies are short


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
        self._choice = Choice.of(settings, library.models_dir)
        self._entries: list[LibraryEntry] = []
        # Per selected model: its drafts, and which of them draft through text.
        self._drafts_cache: dict[str, tuple[list[ModelInfo], set[str]]] = {}
        self._derived: tuple[Path, Path] | None = None  # (target, draft) to measure

        self.setObjectName("modelsDialog")
        self.setWindowTitle("Models")
        self.setSizeGripEnabled(True)
        self.resize(1300, 800)
        self._build()
        give_to_qt_parents(self)  # one owner per widget (see there)
        self._connect()
        # The workers' free memory, for the split of the target (asked off the UI thread)
        self.worker_memory = WorkerMemoryProbe(settings.rpc_workers, self)
        self.worker_memory.answered.connect(self._on_workers_answered)
        self.worker_memory.start()
        self.catalog.load()
        self.reload()
        if self._unlisted():  # e.g. the default model, fetched before any scan
            self.rescan()
            self.left.empty_label.setText(LOOKING_TEXT)

    # ================================================================== public API

    def chosen_settings(self) -> Settings:
        """The settings given, with the target and draft picked in the dialog."""
        return self._choice.applied_to(self._settings)

    @property
    def busy(self) -> bool:
        """True while a background task (import, scan, derive, measure, download) runs."""
        return self.tasks.busy

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
        self.table.fill(self._entries)
        self._mark_roles()
        lines = list(self.library.notices)  # the index was damaged and set aside
        lines += problem_lines(problems)
        self.left.show_state(lines, bool(self._entries), self.busy)
        kept = keep is not None and self.select_model(keep)
        if not kept and self._entries and self.table.currentRow() < 0:
            self.table.selectRow(0)
        self._show_details()
        self.catalog.mark_present({e.path.name for e in self._entries})
        self._update_choice()

    def selected_entry(self) -> LibraryEntry | None:
        path = self.selected_path()
        if path is None:
            return None
        return next((e for e in self._entries if e.path == path), None)

    def selected_path(self) -> Path | None:
        return self.table.selected_path()

    def select_model(self, path: str | os.PathLike[str]) -> bool:
        """Select the library entry of ``path``; False if it is not in the table."""
        return self.table.select(path)

    def add_folder(self, folder: str | os.PathLike[str]) -> None:
        """Scan ``folder`` for models from now on (in the background)."""
        path = Path(folder)

        def job(_progress: Progress, _cancel: threading.Event) -> object:
            return self._worker_library().add_folder(path)

        def done(value: object) -> None:
            found = value if isinstance(value, list) else []
            self._say(
                f"Added the folder {path}: {counted(len(found), 'usable model')} in the library."
            )

        self._start("folder", f"Scanning {path}", job, done)

    def import_file(self, path: str | os.PathLike[str], copy: bool | None = None) -> None:
        """Import one model file, copied into the models folder or referenced
        where it is (``copy`` None: as the check box says)."""
        src = Path(path)
        do_copy = self.left.copy_check.isChecked() if copy is None else copy

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
            extra = f"; {counted(bad, 'file')} could not be used" if bad else ""
            self._say(f"Rescanned: {counted(len(found), 'usable model')}{extra}.")

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
        show_message(self.details.pair_label, self._choice.forget(path), "warn")
        self.reload()

    def use_as_target(self) -> None:
        """Choose the selected model as the target; a chosen draft that cannot
        draft for it is dropped (prompt lookup takes over), saying why."""
        entry = self.selected_entry()
        if entry is None:
            return
        said = self._choice.use_target(entry, self._info_for)
        show_message(self.details.pair_label, said.text, said.tone)
        self._after_choice()

    def use_as_draft(self) -> bool:
        """Choose the selected model as the draft of the chosen target, if it can
        draft for it; else say why inline. True when it was chosen."""
        entry = self.selected_entry()
        if entry is None:
            return False
        chosen, said = self._choice.use_draft(entry, self._info_for)
        show_message(self.details.pair_label, said.text, said.tone)
        if chosen:
            self._after_choice()
        return chosen

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
            self.tasks.measure_button.show()
            self.acceptance_label.clear()
            self.acceptance_label.hide()

        self.details.derive.close_panel()
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
            self.tasks.measure_button.hide()
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
        pair = self.catalog.pair(name)
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

    def done(self, result: int) -> None:  # the one way a QDialog closes
        self.tasks.stop()
        self.worker_memory.stop()
        super().done(result)

    # ================================================================== layout

    def _build(self) -> None:
        self.left = LibraryPage(self.library.models_dir)
        self.table = self.left.table
        self.details = DetailsPane()
        self.derive_panel = self.details.derive.panel
        self.catalog = CatalogPage()
        self.catalog_table = self.catalog.table
        self.download_buttons = self.catalog.download_buttons
        self.tabs = QTabWidget()
        self.tabs.setObjectName("modelsTabs")
        self.tabs.addTab(library_tab(self.left, self.details), "Library")
        self.tabs.addTab(self.catalog, "Catalog")

        self.tasks = TaskStrip(self)  # what runs now, or what the last task did
        self.progress = self.tasks.progress
        self.acceptance_label = QLabel()
        self.acceptance_label.setObjectName("acceptanceLabel")
        self.acceptance_label.setTextFormat(Qt.TextFormat.RichText)
        self.acceptance_label.setWordWrap(True)
        self.acceptance_label.hide()
        self.error_label = message_label("errorLabel")

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
        bottom = QHBoxLayout()
        bottom.setSpacing(12)
        bottom.addWidget(self.choice_label, 1)
        bottom.addWidget(self.buttons)

        layout = QVBoxLayout(self)
        layout.setContentsMargins(14, 14, 14, 14)
        layout.setSpacing(10)
        layout.addWidget(self.tabs, 1)
        layout.addWidget(self.tasks)
        layout.addWidget(self.acceptance_label)
        layout.addWidget(self.error_label)
        layout.addLayout(bottom)

    def _connect(self) -> None:
        left, details = self.left, self.details
        self.table.currentCellChanged.connect(self._on_current_changed)
        left.add_folder_button.clicked.connect(lambda: ask_folder(self, self.add_folder))
        left.import_button.clicked.connect(lambda: ask_file(self, self.import_file))
        left.remove_button.clicked.connect(self._confirm_remove)
        left.rescan_button.clicked.connect(self.rescan)
        details.use_target_button.clicked.connect(self.use_as_target)
        details.use_draft_button.clicked.connect(self.use_as_draft)
        details.drafts.activated.connect(self.select_model)
        details.derive.toggle_requested.connect(self._toggle_derive_panel)
        details.derive.derive_requested.connect(self.derive)
        self.catalog.download_requested.connect(self._on_download_requested)
        self.tasks.measure_button.clicked.connect(self.measure_acceptance)
        self.tasks.ended.connect(self._on_task_ended)
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)

    # ================================================================== showing

    def _mark_roles(self) -> None:
        self.table.mark_roles(self._choice.target_path(), self._choice.draft_path())

    def _on_current_changed(self, row: int, _col: int, prev_row: int, _prev_col: int) -> None:
        if row != prev_row:
            show_message(self.details.pair_label, "")
            self.details.derive.close_panel()
            self._show_details()

    def _show_details(self) -> None:
        entry = self.selected_entry()
        idle = not self.busy
        self.details.derive.derive_button.setEnabled(entry is not None and idle)
        self.left.remove_button.setEnabled(entry is not None and idle)
        self.details.show_entry(entry)
        if entry is not None:
            self._show_memory(entry)
            self._show_drafts(entry)

    def _show_memory(self, entry: LibraryEntry) -> None:
        """Estimate the pair ``estimate_pair`` picks for the selection, with the
        KV cache the settings' kernels imply."""
        s = self._settings
        kv = implied_kernels(s.exact_kernels).kv_type
        draft_path, target_path = self._choice.draft_path(), self._choice.target_path()
        view = self.details.memory
        try:
            draft = self._info_for(draft_path) if draft_path is not None else None
            target, draft = estimate_pair(
                entry.info,
                draft,
                lambda: self._info_for(target_path) if target_path is not None else None,
            )
            workers = Workers(s.rpc_workers, s.worker_layers, self.worker_memory.results)
            est = estimate_pair_memory(
                target, draft, s.context_size, kv, s.gpu_layers_target, workers
            )
        except (GambitError, OSError, ValueError) as exc:
            view.show_failure(str(exc))
            return
        view.show_estimate(est)

    def _on_workers_answered(self) -> None:
        entry = self.selected_entry()
        if entry is not None:
            self._show_memory(entry)

    def _show_drafts(self, entry: LibraryEntry) -> None:
        key = str(entry.path)
        found = self._drafts_cache.get(key)
        if found is None:
            try:
                drafts = self.library.drafts_for(entry.info)
                text = {str(d.path) for d in drafts if drafts_through_text(entry.info, d)}
            except (GambitError, OSError) as exc:
                self.details.drafts.show_failure(str(exc))
                return
            found = self._drafts_cache[key] = (drafts, text)
        self.details.drafts.show_drafts(*found)

    def _update_choice(self) -> None:
        changed = self.chosen_settings() != self._settings
        self.choice_label.setText(
            self._choice.describe() + ("&nbsp;&nbsp;(changed)" if changed else "")
        )

    def _after_choice(self) -> None:
        self._mark_roles()
        entry = self.selected_entry()
        if entry is not None:
            self._show_memory(entry)
        self._update_choice()

    def _toggle_derive_panel(self) -> None:
        panel = self.details.derive
        if panel.is_open:
            panel.close_panel()
            return
        entry = self.selected_entry()
        if entry is None:
            return
        try:
            curve = settings_curve(entry.path, self._settings)
            advice = advise(entry.path, curve, self._settings.gamma_max)
        except (GambitError, OSError) as exc:
            self._show_error(str(exc))
            return
        panel.open_with(advice)

    # ================================================================== tasks

    def _worker_library(self) -> ModelLibrary:
        """A library object of the worker's own over the same index and folder
        (the index is re-read and written atomically on every change)."""
        return ModelLibrary(self.library.index_path, self.library.models_dir)

    def _start(
        self, kind: TaskKind, label: str, job: Job, on_done: Callable[[object], None]
    ) -> None:
        running = self.tasks.task
        if running is not None:
            self._show_error(f"Wait for “{running.label}” to finish, or cancel it.")
            return
        self._clear_error()
        self.tasks.start(kind, label, job, on_done)
        self._set_idle(False)

    def _on_task_ended(self, task: TaskThread) -> None:
        outcome = task.outcome or TaskOutcome(task.kind, "failed", message="no result")
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
        left = self.left
        for widget in (
            left.add_folder_button,
            left.import_button,
            left.rescan_button,
            self.details.derive.start_button,
            self.tasks.measure_button,
            *self.download_buttons.values(),
        ):
            widget.setEnabled(idle)
        has_selection = self.selected_entry() is not None
        left.remove_button.setEnabled(idle and has_selection)
        self.details.derive.derive_button.setEnabled(idle and has_selection)

    def _on_download_requested(self, name: str, which: str) -> None:
        if which in ("both", "target", "draft"):
            self.download(name, which)  # type: ignore[arg-type]

    # ================================================================== helpers

    def _say(self, text: str) -> None:
        self.tasks.say(text)

    def _show_error(self, message: str) -> None:
        show_message(self.error_label, message, "bad")

    def _clear_error(self) -> None:
        show_message(self.error_label, "")
        show_message(self.catalog.error_label, "")

    def _unlisted(self) -> list[Path]:
        try:
            return self.library.unlisted()
        except (GambitError, OSError) as exc:
            log.warning("could not list the models folder: %s", exc)
            return []

    def _confirm_remove(self) -> None:
        entry = self.selected_entry()
        if entry is not None:
            ask_remove(self, entry, self.remove_model)

    def _info_for(self, path: str | os.PathLike[str]) -> ModelInfo:
        """A model's metadata: from the library if it is there, else from its header."""
        for entry in self._entries:
            if same_file(entry.path, path):
                return entry.info
        return inspect_model(path)
