"""Measuring the costs the γ controller starts from, on this machine, and
keeping them between loads.

Calibrating a pair takes a second or more (measured: 1.2 s of a 2.7 s start
of the embedded pair on 2 cores, 4.7 s with the other core busy), and the
controller refines every figure from the rounds it runs anyway. So the costs
a session ends with are kept (``CostStore``: per target and draft file,
llama.cpp build, CPU, threads, kernels and GPU layers) and the next load of
the same pair starts from them instead of calibrating again. What the policy
learned of the pair's acceptance is kept beside them (``CostStore.
save_learned``: per target and draft file and drafter, on any machine), so
that a session's first reply starts from the pair's own figures, not a
generic prior.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gambit.engine.estimates import CostModel
from gambit.engine.machine.kernels import build_id, cpu_id
from gambit.engine.machine.runtime import ModelRuntime
from gambit.fsutil import write_atomic

log = logging.getLogger(__name__)


# Tokens of filler context the calibration times batches on.
CALIBRATION_FILLER = 32


def calibrate(
    target: ModelRuntime,
    draft: ModelRuntime | None,
    k_max: int,
    costs: CostModel | None = None,
    repeats: int = 3,
    context: int = CALIBRATION_FILLER,
    step: Callable[[int, int], None] | None = None,
) -> CostModel:
    """Measure t_target(k) for k = 1..k_max and one draft step, on this machine.

    Decodes a filler context of ``context`` tokens, then batches of k tokens on top of it,
    keeping the fastest of ``repeats`` runs (the least disturbed by other work).
    Leaves both caches empty. A few hundred milliseconds for small models, but
    minutes for a large one on a slow machine: ``step(done, total)`` hears of
    every timed decode, and may raise to stop the calibration there.
    """
    costs = costs or CostModel(k_max)
    filler = _filler_tokens(target, max(context, k_max))
    # A few batch sizes suffice: t_target(k) is smooth in k and the rest is
    # interpolated, then refined by every round's own timing.
    sizes = sorted({1, 2, 3, 5, k_max})
    total = len(sizes) * repeats + (repeats + 1 if draft is not None else 0)
    done = 0

    def timed(rt: ModelRuntime, tokens: list[int], all_logits: bool = False) -> float:
        nonlocal done
        t0 = time.perf_counter()
        rt.decode(tokens, all_logits=all_logits)
        seconds = time.perf_counter() - t0
        done += 1
        if step is not None:
            step(done, total)
        return seconds

    try:
        target.clear()
        target.decode(filler)
        for k in sizes:
            best = float("inf")
            for _ in range(repeats):
                best = min(best, timed(target, filler[:k], all_logits=True))
                target.truncate(len(filler))
            costs.set_target(k, best)
        target.clear()
        if draft is not None:
            # (its own tokens: a draft through text has a vocabulary of its own)
            own = _filler_tokens(draft, max(context, k_max) + repeats + 1)
            draft.clear()
            draft.decode(own[: -repeats - 1])
            steps = own[-repeats - 1 :]
            costs.t_draft = min(timed(draft, [tok]) for tok in steps)
            draft.clear()
    except BaseException:
        target.clear()  # (stopped: the caches are left empty all the same)
        if draft is not None:
            draft.clear()
        raise
    return costs


def _filler_tokens(rt: ModelRuntime, n: int) -> list[int]:
    text = "The quick brown fox jumps over the lazy dog. " * 8
    tokens = rt.tokenize(text, add_special=False)
    while len(tokens) < n:
        tokens = tokens + tokens
    return tokens[:n]


class CostStore:
    """Costs kept per pair and machine in ``cache_dir``/costs.json (None: not kept).

    A damaged file costs a calibration, never a start; a full disk costs the
    next load a calibration, nothing more.
    """

    FILE = "costs.json"
    KEPT = 64  # pairs; the least recently saved go first

    def __init__(self, cache_dir: Path | None) -> None:
        self.path = cache_dir / self.FILE if cache_dir is not None else None

    @staticmethod
    def key(
        target: ModelRuntime, draft: ModelRuntime | None, k_max: int, threads: int | None = None
    ) -> str:
        """The pair's entry, at ``threads`` CPU threads (default: the runtimes' now)."""

        def how_run(rt: ModelRuntime) -> list[str]:
            n = threads or rt.n_threads
            return [str(n), str(rt.options.n_gpu_layers), rt.kernels.key]

        return _pair_key([build_id(), cpu_id(), str(k_max)], target, draft, how_run)

    @staticmethod
    def learned_key(target: ModelRuntime, draft: ModelRuntime | None, drafter: str) -> str:
        """Where what the policy learned of a pair is kept: per target and
        draft file and ``drafter`` kind, not per machine or thread count (how
        often drafts land is the models' and the text's)."""
        return _pair_key(["learned", drafter], target, draft, lambda _rt: [])

    def load(self, key: str, k_max: int) -> CostModel | None:
        costs = self._field(key, "costs")
        return CostModel.from_json(costs, k_max) if isinstance(costs, dict) else None

    def save(self, key: str, costs: CostModel) -> None:
        if costs.t1 > 0:
            self._put(key, "costs", costs.to_json(), "the measured costs")

    def load_learned(self, key: str) -> dict[str, Any] | None:
        """What ``save_learned`` kept (unchecked: ``RoundLearning.resume`` checks it)."""
        learned = self._field(key, "learned")
        return learned if isinstance(learned, dict) else None

    def save_learned(self, key: str, learned: dict[str, Any]) -> None:
        self._put(key, "learned", learned, "what was learned of the pair")

    def _field(self, key: str, name: str) -> Any:
        entry = self._read().get(key)
        return entry.get(name) if isinstance(entry, dict) else None

    def _put(self, key: str, name: str, value: Any, what: str) -> None:
        if self.path is None:
            return
        data = self._read()
        data.pop(key, None)
        data[key] = {"saved_at": time.time(), name: value}
        while len(data) > self.KEPT:
            data.pop(next(iter(data)))
        try:
            write_atomic(self.path, json.dumps(data))
        except (OSError, ValueError) as exc:  # (ValueError: a value JSON cannot hold)
            log.warning("could not keep %s in %s: %s", what, self.path, exc)

    def _read(self) -> dict[str, Any]:
        if self.path is None or not self.path.is_file():
            return {}
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError) as exc:
            log.warning("ignoring unreadable measured costs in %s: %s", self.path, exc)
            return {}
        return data if isinstance(data, dict) else {}


def _pair_key(
    parts: list[str],
    target: ModelRuntime,
    draft: ModelRuntime | None,
    how_run: Callable[[ModelRuntime], list[str]],
) -> str:
    """An entry's key: ``parts``, then each model's file (path, size, time
    written) and ``how_run`` it; "-" for no draft model."""
    for rt in (target, draft):
        if rt is None:
            parts.append("-")
            continue
        st = rt.path.stat()
        parts += [str(rt.path.resolve()), str(st.st_size), str(st.st_mtime_ns), *how_run(rt)]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()
