"""One job off the UI thread, with progress and Cancel.

A :class:`TaskThread` runs a job that gets a progress callback (which raises
``TaskCancelledError`` once cancelled, so a job stops at its next report) and
the cancel event itself. Whatever the job raises stays in the thread: the
outcome says done (with the value), cancelled, or failed (a ``GambitError``'s
message as it is; anything else logged and named as unexpected).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Literal

from PySide6.QtCore import QObject, QThread, Signal

from gambit.errors import GambitError
from gambit.fsutil import Progress

log = logging.getLogger(__name__)

Job = Callable[[Progress, threading.Event], object]
PROGRESS_INTERVAL_S: Final = 0.05  # at most this often from the worker to the window


class TaskCancelledError(Exception):
    """Raised from the progress callback once the user pressed Cancel."""


@dataclass(frozen=True)
class TaskOutcome:
    kind: str
    status: Literal["done", "failed", "cancelled"]
    value: object = None
    message: str = ""


class TaskThread(QThread):
    """Runs one job; the outcome is kept in ``outcome``, and ``finished`` says
    it is there. ``cancelled``: the job's own exceptions that mean it stopped
    on request (besides ``TaskCancelledError``)."""

    progressed = Signal(str, object, object)  # stage, done, total (ints past 2**31)

    def __init__(
        self,
        kind: str,
        label: str,
        job: Job,
        parent: QObject,
        *,
        cancelled: tuple[type[BaseException], ...] = (),
    ) -> None:
        super().__init__(parent)
        self.kind = kind
        self.label = label
        self.cancel_event = threading.Event()
        self.outcome: TaskOutcome | None = None
        self.on_done: Callable[[object], None] | None = None
        self._job = job
        self._cancelled: tuple[type[BaseException], ...] = (TaskCancelledError, *cancelled)
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
        except self._cancelled:
            self.outcome = TaskOutcome(self.kind, "cancelled")
        except Exception as exc:  # shown by the owner; nothing may escape a thread
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
