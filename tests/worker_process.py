"""Real ``gambit-worker`` processes on 127.0.0.1 for the RPC tests."""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gambit.engine.machine import rpc


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _limit_memory(n_bytes: int) -> None:
    """In the worker's process: an address-space limit, so that it runs out of
    memory on a model that fits the machine."""
    resource.setrlimit(resource.RLIMIT_AS, (n_bytes, n_bytes))


class WorkerProcess:
    """One ``python -m gambit.cli.worker`` on a free port, its output in a file."""

    def __init__(self, log_dir: Path, threads: int = 1, memory_limit: int | None = None) -> None:
        self.port = free_port()
        self.endpoint = f"127.0.0.1:{self.port}"
        self.log = log_dir / f"worker-{self.port}.log"
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "gambit.cli.worker", "--port", str(self.port),
                 "--threads", str(threads), "--no-cache"],
                stdout=out, stderr=subprocess.STDOUT,
                preexec_fn=(lambda: _limit_memory(memory_limit)) if memory_limit else None,
            )  # fmt: skip
        deadline = time.monotonic() + 60
        while True:
            try:
                self.info = rpc.probe(self.endpoint, timeout=2)
                return
            except rpc.RpcWorkerError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    log = self.log.read_text()
                    raise RuntimeError(f"gambit-worker did not start: {log}") from None
                time.sleep(0.2)

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, signal.SIGCONT)  # (a test may have paused it)
            self.kill()


@contextlib.contextmanager
def workers(log_dir: Path, n: int) -> Iterator[list[WorkerProcess]]:
    if not rpc.supported():
        pytest.skip(rpc.NO_RPC_MESSAGE)
    started: list[WorkerProcess] = []
    try:
        for _ in range(n):
            started.append(WorkerProcess(log_dir))
        yield started
    finally:
        for w in started:
            w.stop()
