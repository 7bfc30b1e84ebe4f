"""Threads that follow the load: as many as the cores other programs leave free.

llama.cpp's CPU threads meet at a barrier after every operation of a decode,
and wait there spinning. When another program keeps a core busy, one of them
is preempted at each barrier while the others spin, and every decode crawls:
on 2 cores with one busy loop beside it, the embedded model fell from
~125 to 17-26 tok/s at 2 threads and ran at 46-58 with 1 (docs/performance.md,
"A machine that is doing something else"). So with the thread count on
automatic (the default), the engine decodes with the cores that other
programs leave free, up to the physical cores it would use on an idle
machine, and changes the count between rounds when the load changes:

- ``LoadSampler``, one per process, reads every ``SAMPLE_S`` how many cores
  other programs kept busy (all CPU time but ours, ``gambit.engine.machine.busy``);
- ``next_threads`` is the rule, with hysteresis: fewer threads once the mean
  of ``DOWN_READINGS`` readings says a core is taken, more once the mean of
  ``UP_READINGS`` says it is free again, with a band between the two, so a
  tab that spikes for a moment does not flap the count;
- ``ThreadCount`` applies the rule to a target and a draft runtime between
  rounds (``llama_set_n_threads``: no cost, the KV cache stays) and says
  which count is in use and why (``ThreadChoice``).

Whether the target's logits stay the same at another count is decided by its
kernels: the matrix products give each output to one thread, so they do not
depend on the count, but flash attention over an F16 KV cache splits the
cache across threads (docs/adr/0001). So with a Q8_0 cache (the exact
kernels) the count changes between rounds, and with an F16 cache only
between replies; the greedy-identity tests decode with it changing.
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from gambit.engine.machine.busy import machine_busy_seconds, psutil
from gambit.words import counted


def default_threads() -> int:
    """Threads for decoding on an idle machine: the physical cores, approximated.

    Decoding is memory-bound, so hyper-threads and efficiency cores do not help
    and contend for bandwidth; halve the logical count on larger machines.
    """
    n = os.cpu_count() or 1
    return n if n <= 4 else n // 2


SAMPLE_S = 0.25  # one reading of the load: 25 ticks of the kernel's 10 ms per core
# The load that makes one thread fewer faster, in cores other programs would
# keep busy (``next_threads``): from DOWN_FROM on a thread is given up, below
# UP_BELOW it is taken back; between the two the count stays. Measured on 2
# cores (a loop busy a quarter, half, three quarters of every 10 ms, or all
# of it), 2 threads against 1: SmolLM2 Q4_1 93 / 72, 91 / 72, 63 / 70, 30 / 72
# tok/s in a decode loop, and in whole replies 73-120 / 49-89 at a quarter,
# 40-92 / 50-76 at half; the cost-scaled F32 target 10.6 / 8.7, 8.7 / 8.5,
# 5.8 / 7.3, 3.3 / 6.5. At a quarter 2 threads always won; at half, 1 thread
# made 0.79-1.26 of 2 threads' rate over 11 measurements, and from three
# quarters on it won. A count that flips between the two loses to both.
DOWN_FROM = 0.45
UP_BELOW = 0.35
# What a load reads while every core runs one of our threads, against what it
# would take beside them: the threads spin at their barriers, so it gets a
# share of its core (readings beside 2 threads: 0.20, 0.36, 0.46, 0.74 of a
# core for the loads above, which read 0.26, 0.50, 0.73, 1.00 beside 1).
CONTENDED = 0.74
DOWN_READINGS = 3  # ~0.75 s of a load before a thread is given up
UP_READINGS = 4  # ~1 s of a lighter one before it is taken back
_KEPT = max(DOWN_READINGS, UP_READINGS)


def next_threads(readings: Sequence[float], current: int, most: int, cores: int) -> int:
    """The thread count after ``readings`` (other programs' load in cores, the
    latest last) when ``current`` threads run now; at most ``most`` (the
    count on an idle machine), at least 1.

    A reading taken while our threads hold every core is divided by
    ``CONTENDED``: the load it stands for. The count that fits a load is
    the cores it leaves, a core counted as taken from ``DOWN_FROM`` of it on
    when giving threads up and from ``UP_BELOW`` when taking them back: fewer
    threads once the mean of the last ``DOWN_READINGS`` calls for fewer (a
    moment's spike does not), more once the mean of the last ``UP_READINGS``
    leaves room for more.
    """
    scale = 1.0 / CONTENDED if current >= cores else 1.0

    def fits(last: int, threshold: float) -> int:
        load = scale * sum(readings[-last:]) / last
        taken = math.floor(load + 1.0 - threshold)  # cores taken, from ``threshold`` on
        return max(1, min(most, cores - taken))

    if len(readings) >= DOWN_READINGS:
        down = fits(DOWN_READINGS, DOWN_FROM)
        if down < current:
            return down
    if current < most and len(readings) >= UP_READINGS:
        up = fits(UP_READINGS, UP_BELOW)
        if up > current:
            return up
    return current


class LoadSampler:
    """Other programs' load in cores, read every ``SAMPLE_S`` by a daemon
    thread while anyone asks (it stops after ``IDLE_STOP_S`` nobody did)."""

    # Long enough that a reply after a pause to read and type starts on the
    # count the load calls for (a reply on a busy machine without readings
    # started on every thread and changed count mid-reply, so it could claim
    # no speedup); ~0.1 ms a reading, four a second.
    IDLE_STOP_S = 600.0

    def __init__(self, period_s: float = SAMPLE_S) -> None:
        self.period_s = period_s
        self.cores = psutil.cpu_count() or 1
        self._readings: deque[tuple[float, float]] = deque(maxlen=_KEPT)  # (when, cores)
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._asked = time.monotonic()
        self._ours = {os.getpid(): psutil.Process(os.getpid())}  # pid -> process

    def readings(self) -> list[float]:
        """The latest readings, oldest first; fewer than ``_KEPT`` just after a start."""
        self.start()
        with self._lock:
            return [cores for _, cores in self._readings]

    def start(self) -> None:
        """Read from now on (a no-op while reading), until IDLE_STOP_S from now."""
        with self._lock:
            self._asked = time.monotonic()
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="gambit-load", daemon=True)
                self._thread.start()

    def count_as_ours(self, pid: int) -> None:
        """Count process ``pid``'s CPU time as ours: a target split over workers
        decodes in a child (``target_host``), and its threads are not another
        program's load."""
        with self._lock, contextlib.suppress(psutil.Error):
            self._ours[pid] = psutil.Process(pid)

    def _our_seconds(self) -> dict[int, float]:
        """CPU seconds so far of each of our processes that still runs, by id."""
        with self._lock:
            processes = list(self._ours.values())
        seconds = {}
        for p in processes:
            with contextlib.suppress(psutil.Error):  # (one that just ended)
                t = p.cpu_times()
                seconds[p.pid] = t.user + t.system
        return seconds

    def _run(self) -> None:
        then, busy, ours = time.monotonic(), machine_busy_seconds(), self._our_seconds()
        while True:
            time.sleep(self.period_s)
            now, busy_now = time.monotonic(), machine_busy_seconds()
            ours_now = self._our_seconds()
            # (one counted from meanwhile: all of its time is taken as the span's)
            own = sum(t - ours.get(pid, 0.0) for pid, t in ours_now.items())
            others = max(0.0, (busy_now - busy) - own) / max(now - then, 1e-9)
            then, busy, ours = now, busy_now, ours_now
            with self._lock:
                self._readings.append((now, others))
                if now - self._asked > self.IDLE_STOP_S:
                    self._readings.clear()  # stale once nobody reads them
                    self._thread = None
                    return


_sampler: LoadSampler | None = None
_sampler_lock = threading.Lock()


def load_sampler() -> LoadSampler:
    """The process's one sampler (every engine reads the same machine)."""
    global _sampler
    with _sampler_lock:
        if _sampler is None:
            _sampler = LoadSampler()
        return _sampler


class Threaded(Protocol):
    """A runtime whose decodes run on a number of CPU threads."""

    n_threads: int
    process_id: int | None  # the process it decodes in, where not this one

    def set_threads(self, n: int) -> None: ...


@dataclass(frozen=True)
class ThreadChoice:
    """The thread count in use, and why."""

    threads: int
    most: int  # the count on an idle machine (auto), or the one set
    auto: bool
    other_cores: float | None  # other programs' load in cores (None: not read yet)
    cores: int

    def describe(self) -> str:
        """ "1 of 2 threads: other programs use 1.0 of 2 cores" """
        count = (
            f"{self.threads} of {counted(self.most, 'thread')}"
            if self.threads != self.most
            else counted(self.threads, "thread")
        )
        if not self.auto:
            return f"{count} (as set)"
        if self.other_cores is None:
            return f"{count} (automatic)"
        load = f"other programs use {self.other_cores:.1f} of {counted(self.cores, 'core')}"
        return f"{count} (automatic: {load})"


class ThreadCount:
    """The thread count of a target and a draft runtime: fixed (``fixed`` > 0)
    or following the load (0), changed only between rounds (``follow``)."""

    def __init__(
        self,
        fixed: int,
        runtimes: Sequence[Threaded],
        sampler: LoadSampler | None = None,
        *,
        mid_reply: bool = True,
    ) -> None:
        """``mid_reply``: the count may change between rounds of a reply, where
        the target's logits do not depend on it (else only between replies)."""
        self.runtimes = list(runtimes)
        self.mid_reply = mid_reply
        self.current = self.runtimes[0].n_threads if self.runtimes else default_threads()
        self._sampler = sampler
        self._last: float | None = None
        self.pin(fixed)

    def pin(self, fixed: int) -> None:
        """Keep ``fixed`` threads from the next decode on, or (0) follow the
        load again, up to the count of an idle machine."""
        self.auto = fixed == 0 and bool(self.runtimes)
        self.most = fixed or default_threads()
        if self.auto and self._sampler is None:
            self._sampler = load_sampler()
            for runtime in self.runtimes:
                if runtime.process_id is not None:
                    self._sampler.count_as_ours(runtime.process_id)
        if self.auto and self._sampler is not None:
            self._sampler.start()  # (so that the first reply has readings)
        if fixed:
            self.set(fixed)

    def follow(self, *, reply_start: bool = False) -> bool:
        """Set the runtimes to the count the load calls for; whether it changed.
        Between rounds of a reply only where ``mid_reply`` allows it."""
        if not self.auto or self._sampler is None or not (reply_start or self.mid_reply):
            return False
        readings = self._sampler.readings()
        if readings:
            self._last = readings[-1]
        wanted = next_threads(readings, self.current, self.most, self._sampler.cores)
        if wanted == self.current:
            return False
        self.set(wanted)
        return True

    def set(self, n: int) -> None:
        """Decode on ``n`` threads from the next decode on."""
        for runtime in self.runtimes:
            runtime.set_threads(n)
        self.current = n

    @property
    def choice(self) -> ThreadChoice:
        cores = self._sampler.cores if self._sampler is not None else (os.cpu_count() or 1)
        return ThreadChoice(self.current, self.most, self.auto, self._last, cores)
