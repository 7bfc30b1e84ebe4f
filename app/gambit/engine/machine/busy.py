"""Whether other programs used the cores while a figure was being taken.

Tokens per second and speedups are ratios of times; on a laptop with two or
four cores, a browser tab or a build running at the same moment moves them
by tens of per cent (measured here: target-only's p99 gap 874 ms against
~100 ms with the other core busy). A figure taken then is still shown, but
marked, so nobody acts on noise. ``LoadMeter`` reads the CPU time every core
spent busy and this process's own, from the start of a span to its end: what
is left was other programs'.
"""

from __future__ import annotations

import importlib
import os
import time
from dataclasses import dataclass
from typing import Any

from gambit.words import counted

# psutil ships no type hints; imported this way, mypy needs no stubs package.
psutil: Any = importlib.import_module("psutil")

# Other programs using this many cores on average, or more: the machine was busy.
BUSY_FROM = 0.5
# Shorter spans say nothing: the kernel counts CPU time in ticks of 10 ms.
SPAN_MIN_S = 0.25


@dataclass(frozen=True)
class LoadReading:
    other_cores: float  # cores other programs kept busy, on average over the span
    cores: int
    seconds: float

    @property
    def busy(self) -> bool:
        return self.seconds >= SPAN_MIN_S and self.other_cores >= BUSY_FROM

    def describe(self) -> str:
        """ "other programs used 1.0 of 2 cores" """
        return f"other programs used {self.other_cores:.1f} of {counted(self.cores, 'core')}"


def _busy_seconds(times: Any) -> float:
    """CPU seconds spent on anything but waiting, over every core."""
    idle = times.idle + getattr(times, "iowait", 0.0)
    return float(sum(times) - idle)


def machine_busy_seconds() -> float:
    """CPU seconds every core has spent busy so far."""
    return _busy_seconds(psutil.cpu_times())


def cpu_seconds(process: Any) -> tuple[float, float]:
    """CPU seconds so far: every core's busy time, and ``process``'s own
    (a ``psutil.Process``); the difference is other programs'."""
    own = process.cpu_times()
    return machine_busy_seconds(), own.user + own.system


class LoadMeter:
    """Started at the beginning of a span; ``read()`` at its end."""

    def __init__(self) -> None:
        self._process = psutil.Process(os.getpid())
        self._start = self._sample()

    def _sample(self) -> tuple[float, float, float]:
        return time.monotonic(), *cpu_seconds(self._process)

    def read(self) -> LoadReading:
        t0, busy0, own0 = self._start
        t1, busy1, own1 = self._sample()
        seconds = max(t1 - t0, 1e-9)
        others = max(0.0, (busy1 - busy0) - (own1 - own0)) / seconds
        return LoadReading(others, psutil.cpu_count() or 1, seconds)
