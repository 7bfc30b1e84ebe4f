"""Ctrl-C and SIGTERM as a request to stop, for the command-line tool.

By default SIGTERM ends Python at once, and Ctrl-C lands as KeyboardInterrupt
wherever the interpreter happens to be. A long job (a reply, the layer-skip
search) checks a cancel event instead: it stops at its next step, removes
what it was writing, and the tool exits with the signal's usual status.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class StopSignals:
    """While installed, SIGINT and SIGTERM set ``cancel`` (main thread only)."""

    def __init__(self, cancel: threading.Event) -> None:
        self.cancel = cancel
        self.signum: int | None = None
        self._previous: dict[int, object] = {}

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        self.signum = self.signum or signum
        self.cancel.set()

    def install(self) -> StopSignals:
        for sig in SIGNALS:
            self._previous[sig] = signal.signal(sig, self._on_signal)
        return self

    def restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]
        self._previous.clear()

    def __enter__(self) -> StopSignals:
        return self.install()

    def __exit__(self, *exc: object) -> None:
        self.restore()

    @property
    def exit_code(self) -> int:
        """128 + the signal's number, as shells report it: 130 for Ctrl-C, 143 for SIGTERM."""
        return 128 + (self.signum or signal.SIGINT)
