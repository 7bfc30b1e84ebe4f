"""What the benchmarks read off a cost model: the regime, the bound, a summary.

Shared by the regime benchmark and Measure on my chats, so both name a
machine's regime by the same threshold and report costs in the same shape.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from gambit.engine.estimates import CostModel

# t(5)/t(1) below this: a batch of five costs little more than one token.
BANDWIDTH_BOUND_BELOW = 1.3
# The calibration context: about where the benchmarks' replies are decoded.
CALIBRATION_CONTEXT = 192


def cost_bound(alpha: Sequence[float], costs: CostModel, gamma_max: int = 8) -> float:
    """The best expected speedup of a fixed γ ≤ ``gamma_max`` over plain decoding,
    given per-position acceptance ``alpha`` and the measured costs."""
    t1 = costs.verify_cost(1)
    a = np.zeros(gamma_max)
    a[: min(len(alpha), gamma_max)] = alpha[:gamma_max]
    tokens = 1.0 + np.cumsum(np.cumprod(a))
    best = 1.0
    for g in range(1, gamma_max + 1):
        cost = g * costs.t_draft + costs.verify_cost(g + 1)
        best = max(best, float(tokens[g - 1]) / cost * t1)
    return best


def cost_summary(costs: CostModel) -> dict[str, Any]:
    t1 = costs.verify_cost(1)
    return {
        "t1_ms": t1 * 1000,
        "t_ratio": {str(k): costs.verify_cost(k) / t1 for k in (2, 3, 5, 9)},
        "draft_ratio": costs.draft_ratio,
    }


def regime_of(costs: CostModel) -> str:
    t5 = costs.verify_cost(5) / costs.verify_cost(1)
    return "bandwidth-bound" if t5 < BANDWIDTH_BOUND_BELOW else "compute-bound"
