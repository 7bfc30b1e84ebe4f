"""The workers' free memory for the models dialog's estimate, asked off the UI thread.

A worker that does not answer costs its probe's timeout; on a task thread the
dialog stays live meanwhile, and shows the estimate without the split until
the answers come. The answers are kept for as long as the dialog is open.
"""

from __future__ import annotations

import threading
from typing import Final

from PySide6.QtCore import QObject, Signal

from gambit.fsutil import Progress
from gambit.models.memory_split import WorkerMemory, probe_workers
from gambit.qt.tasks import TaskThread

PROBE_TIMEOUT_S: Final = 3.0


class WorkerMemoryProbe(QObject):
    """Asks the workers once; ``answered`` says ``results`` are there."""

    answered = Signal()

    def __init__(self, endpoints: tuple[str, ...], parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.endpoints = endpoints
        self.results: tuple[WorkerMemory, ...] | None = None
        self.task: TaskThread | None = None

    @property
    def pending(self) -> bool:
        return bool(self.endpoints) and self.results is None

    def start(self) -> None:
        if not self.endpoints or self.task is not None:
            return
        endpoints = self.endpoints

        def job(_progress: Progress, _cancel: threading.Event) -> tuple[WorkerMemory, ...]:
            return probe_workers(endpoints, PROBE_TIMEOUT_S)

        self.task = TaskThread("probe", "Asking the workers for their memory", job, self)
        self.task.finished.connect(self._on_finished)
        self.task.start()

    def _on_finished(self) -> None:
        task = self.task
        outcome = task.outcome if task is not None else None
        if outcome is not None and outcome.status == "done":
            self.results = outcome.value  # type: ignore[assignment]
        else:  # (probe_workers turns every worker's failure into an answer)
            why = outcome.message if outcome is not None else "no answer"
            self.results = tuple(WorkerMemory(e, error=why) for e in self.endpoints)
        self.answered.emit()

    def stop(self) -> None:
        """The dialog is closing: wait for the probe (it times out within seconds)."""
        task = self.task
        if task is not None and task.isRunning():
            task.cancel_event.set()
            task.wait()
