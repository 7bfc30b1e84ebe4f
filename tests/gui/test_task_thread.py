"""gambit.qt.tasks.TaskThread on a real QThread: a job's value, its cancel, and
whatever it raises end as an outcome; nothing escapes the thread."""

from __future__ import annotations

import threading

from PySide6.QtWidgets import QWidget
from pytestqt.qtbot import QtBot

from gambit.errors import GambitError
from gambit.fsutil import Progress
from gambit.qt.tasks import Job, TaskOutcome, TaskThread


class _StoppedError(Exception):
    pass


def _run(qtbot: QtBot, job: Job, cancel: bool = False) -> TaskOutcome:
    parent = QWidget()
    qtbot.addWidget(parent)
    task = TaskThread("test", "Testing", job, parent, cancelled=(_StoppedError,))
    if cancel:
        task.cancel_event.set()
    with qtbot.waitSignal(task.finished, timeout=10_000):
        task.start()
    task.wait()
    assert task.outcome is not None
    return task.outcome


def test_a_finished_job_gives_its_value(qtbot: QtBot) -> None:
    seen: list[tuple[str, int, int]] = []

    def job(progress: Progress, _cancel: threading.Event) -> object:
        progress("copying", 10, 10)  # the last report always gets through
        return 42

    parent = QWidget()
    qtbot.addWidget(parent)
    task = TaskThread("test", "Testing", job, parent)
    task.progressed.connect(lambda stage, done, total: seen.append((stage, done, total)))
    with qtbot.waitSignal(task.finished, timeout=10_000):
        task.start()
    task.wait()
    qtbot.waitUntil(lambda: bool(seen))
    assert task.outcome == TaskOutcome("test", "done", 42)
    assert seen == [("copying", 10, 10)]


def test_cancel_stops_the_job_at_its_next_report(qtbot: QtBot) -> None:
    reached: list[str] = []

    def job(progress: Progress, _cancel: threading.Event) -> object:
        progress("copying", 1, 10)
        reached.append("past the report")
        return None

    assert _run(qtbot, job, cancel=True).status == "cancelled"
    assert reached == []


def test_the_jobs_own_cancel_error_means_cancelled(qtbot: QtBot) -> None:
    def job(_progress: Progress, _cancel: threading.Event) -> object:
        raise _StoppedError

    assert _run(qtbot, job).status == "cancelled"


def test_errors_become_failed_outcomes_with_their_message(qtbot: QtBot) -> None:
    def said(_progress: Progress, _cancel: threading.Event) -> object:
        raise GambitError("the disk is full")

    def unexpected(_progress: Progress, _cancel: threading.Event) -> object:
        raise KeyError("x")

    assert _run(qtbot, said) == TaskOutcome("test", "failed", message="the disk is full")
    outcome = _run(qtbot, unexpected)
    assert outcome.status == "failed"
    assert outcome.message.startswith("Testing failed unexpectedly:")
