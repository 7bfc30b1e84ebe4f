"""The window's local server: requests run on the window's engine thread.

``WorkerHost`` hands each request to the ``EngineWorker`` through a queued
signal, so served replies and the window's own take turns on the one thread
that owns llama.cpp, and the window never waits for either. ``LocalService``
starts and stops the HTTP server (``gambit.serve``) on a thread of its own.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QObject, Signal

from gambit.qt.worker import EngineInfo, EngineWorker
from gambit.serve.jobs import Job, model_name
from gambit.serve.openai_api import ServeOptions, create_app
from gambit.serve.prometheus import ServeMetrics
from gambit.serve.server import LocalServer


class WorkerHost(QObject):
    """An ``EngineHost`` over the window's worker (called from the server's thread)."""

    submitted = Signal(object)  # Job, to EngineWorker.serve on the worker's thread

    def __init__(self, worker: EngineWorker, info: Callable[[], EngineInfo | None]) -> None:
        super().__init__()
        self._info = info
        self.submitted.connect(worker.serve)

    def model_id(self) -> str | None:
        info = self._info()
        return model_name(info.target_name) if info is not None else None

    def context_size(self) -> int:
        info = self._info()
        return info.n_ctx if info is not None else 0

    def fills_in_the_middle(self) -> bool:
        info = self._info()
        return info is not None and info.fills_in_the_middle

    def submit(self, job: Job) -> None:
        self.submitted.emit(job)


class LocalService:
    """The server of one window, while it runs."""

    def __init__(self, worker: EngineWorker, info: Callable[[], EngineInfo | None]) -> None:
        self._worker = worker
        self._info = info
        self.metrics = ServeMetrics()
        self._server: LocalServer | None = None
        self._host: WorkerHost | None = None

    @property
    def running(self) -> bool:
        return self._server is not None

    @property
    def base_url(self) -> str | None:
        return self._server.base_url if self._server is not None else None

    def start(self, host: str, port: int, options: ServeOptions) -> str:
        """Serve on ``host``:``port``; the base URL (GambitError if it cannot)."""
        self.stop()
        self._host = WorkerHost(self._worker, self._info)
        server = LocalServer(create_app(self._host, options, self.metrics), host, port)
        server.start()
        self._server = server
        return server.base_url

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None
        self._host = None
