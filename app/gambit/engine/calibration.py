"""Measuring the costs the γ controller starts from, on this machine."""

from __future__ import annotations

import time

from gambit.engine.estimates import CostModel
from gambit.engine.runtime import ModelRuntime


def calibrate(
    target: ModelRuntime,
    draft: ModelRuntime | None,
    k_max: int,
    costs: CostModel | None = None,
    repeats: int = 3,
    context: int = 32,
) -> CostModel:
    """Measure t_target(k) for k = 1..k_max and one draft step, on this machine.

    Decodes a filler context of ``context`` tokens, then batches of k tokens on top of it,
    keeping the fastest of ``repeats`` runs (the least disturbed by other work).
    Leaves both caches empty. A few hundred milliseconds for small models.
    """
    costs = costs or CostModel(k_max)
    filler = _filler_tokens(target, max(context, k_max))
    target.clear()
    target.decode(filler)
    # A few batch sizes suffice: t_target(k) is smooth in k and the rest is
    # interpolated, then refined by every round's own timing.
    for k in sorted({1, 2, 3, 5, k_max}):
        batch = filler[:k]
        best = float("inf")
        for _ in range(repeats):
            t0 = time.perf_counter()
            target.decode(batch, all_logits=True)
            best = min(best, time.perf_counter() - t0)
            target.truncate(len(filler))
        costs.set_target(k, best)
    target.clear()
    if draft is not None:
        draft.clear()
        draft.decode(filler)
        best = float("inf")
        for i in range(repeats + 1):
            t0 = time.perf_counter()
            draft.decode([filler[i]])
            best = min(best, time.perf_counter() - t0)
        costs.t_draft = best
        draft.clear()
    return costs


def _filler_tokens(rt: ModelRuntime, n: int) -> list[int]:
    text = "The quick brown fox jumps over the lazy dog. " * 8
    tokens = rt.tokenize(text, add_special=False)
    while len(tokens) < n:
        tokens = tokens + tokens
    return tokens[:n]
