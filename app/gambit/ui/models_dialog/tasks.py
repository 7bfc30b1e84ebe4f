"""The activity strip: the dialog's slow work and what it did.

Importing, scanning, deriving, measuring acceptance and downloading run one at
a time on a :class:`~gambit.qt.tasks.TaskThread`; :class:`TaskStrip` shows
what runs, its progress and a Cancel button, or what the last task did.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final, Literal

from PySide6.QtCore import Qt, Signal, Slot
from PySide6.QtGui import QPalette
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QProgressBar, QWidget

from gambit.models.derive import DeriveCancelledError
from gambit.qt.tasks import Job, TaskOutcome, TaskThread
from gambit.ui import theme
from gambit.ui.models_dialog.text import format_bytes
from gambit.ui.models_dialog.widgets import PROGRESS_STEPS, button

TaskKind = Literal["import", "folder", "rescan", "derive", "measure", "download"]
# No byte counts to show: a busy bar. Cancellable: stops at its next progress check.
_UNCOUNTED: Final = ("measure", "folder", "rescan")
_CANCELLABLE: Final = ("import", "derive", "download")


class TaskStrip(QFrame):
    """The activity strip: what runs now (progress, Cancel), or what the last
    task did; it also holds the button that measures a derived draft.

    ``ended`` carries the finished :class:`TaskThread` (its ``outcome`` set)."""

    ended = Signal(object)

    def __init__(self, parent: QWidget) -> None:
        super().__init__(parent)
        self.setObjectName("taskPanel")
        self.task: TaskThread | None = None
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
        self.cancel_button = button("Cancel", "cancelTaskButton")
        self.cancel_button.clicked.connect(self.cancel)
        self.measure_button = button("Measure acceptance", "measureButton")
        self.measure_button.setToolTip(
            "Runs the target and the new draft on four short prompts and counts the "
            "drafted tokens the target accepts (a few seconds)."
        )
        self.measure_button.hide()
        palette = self.palette()
        accent = theme.pick(theme.ACCENT, palette)
        window = palette.color(QPalette.ColorRole.Window)
        self.setStyleSheet(
            f"QFrame#taskPanel {{ background: {theme.blend(accent, window, 0.93).name()};"
            f" border: 1px solid {theme.blend(accent, window, 0.7).name()};"
            " border-radius: 4px; }"
        )
        strip = QHBoxLayout(self)
        strip.setContentsMargins(10, 6, 6, 6)
        strip.setSpacing(8)
        strip.addWidget(self.task_label, 1)
        strip.addWidget(self.measure_button)
        strip.addWidget(self.progress)
        strip.addWidget(self.cancel_button)
        self.progress.hide()
        self.cancel_button.hide()
        self.hide()

    @property
    def busy(self) -> bool:
        return self.task is not None

    def say(self, text: str) -> None:
        self.task_label.setText(text)
        self.setVisible(bool(text) or self.busy or self.measure_button.isVisible())

    def start(
        self, kind: TaskKind, label: str, job: Job, on_done: Callable[[object], None]
    ) -> None:
        """Run ``job``; ``on_done`` gets its value once it is done (the caller
        checks ``busy`` first: one task at a time)."""
        if kind != "measure":
            self.measure_button.hide()
        parent = self.parentWidget() or self
        task = TaskThread(kind, label, job, parent, cancelled=(DeriveCancelledError,))
        task.on_done = on_done
        task.progressed.connect(self._on_progress)
        task.finished.connect(self._on_finished)
        self.task = task
        self.task_label.setText(f"{label}…")
        if kind in _UNCOUNTED:
            self.progress.setRange(0, 0)
        else:
            self.progress.setRange(0, PROGRESS_STEPS)
            self.progress.setValue(0)
        self.progress.show()
        self.cancel_button.setVisible(True)
        cancellable = kind in _CANCELLABLE
        self.cancel_button.setEnabled(cancellable)
        self.cancel_button.setToolTip(
            "" if cancellable else "This step cannot be stopped midway; it takes seconds."
        )
        self.show()
        task.start()

    def cancel(self) -> None:
        """Ask the running task to stop (it stops at its next progress check)."""
        if self.task is not None:
            self.task.cancel_event.set()
            self.cancel_button.setEnabled(False)
            self.task_label.setText(f"{self.task.label}: cancelling…")

    def stop(self) -> None:
        """Cancel a running task and wait for its thread (closing the dialog)."""
        task = self.task
        if task is None:
            return
        task.cancel_event.set()
        task.wait()
        self.task = None

    @Slot(str, object, object)
    def _on_progress(self, stage: str, done: object, total: object) -> None:
        task = self.task
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
    def _on_finished(self) -> None:
        task = self.task
        if task is None or task is not self.sender():
            return
        task.wait()
        self.task = None
        if task.outcome is None:
            task.outcome = TaskOutcome(task.kind, "failed", message="no result")
        task.deleteLater()
        self.progress.hide()
        self.cancel_button.hide()
        self.ended.emit(task)
