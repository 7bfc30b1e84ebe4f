"""Fits to a measured cost curve r(k) = t_target(k) / t_target(1), for
``CostModel``'s smoothed curve: a non-decreasing fit to noisy sizes, and the
line the freshly measured sizes extrapolate to."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np


def non_decreasing(values: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """The weighted least-squares non-decreasing fit to ``values`` (pool
    adjacent violators); an infinite weight pins its value."""
    blocks: list[list[float]] = []  # [mean, weight, count]
    for v, w in zip(values.tolist(), weights.tolist(), strict=True):
        blocks.append([v, w, 1])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            v2, w2, n2 = blocks.pop()
            v1, w1, n1 = blocks.pop()
            if math.isinf(w1) or math.isinf(w2):
                mean = v1 if math.isinf(w1) else v2
            else:
                mean = (v1 * w1 + v2 * w2) / (w1 + w2)
            blocks.append([mean, w1 + w2, n1 + n2])
    fitted: np.ndarray = np.repeat([b[0] for b in blocks], [int(b[2]) for b in blocks])
    return fitted


def fresh_line(
    sizes: np.ndarray, ratios: np.ndarray, weights: np.ndarray
) -> Callable[[np.ndarray], np.ndarray]:
    """r(k) beyond the largest of ``sizes`` (ascending; ``ratios`` measured
    there, each weighing ``weights``): from its ratio on, at the slope of a
    weighted least-squares line through r(1) = 1 and the sizes above 1 (a
    batch's cost grows about linearly in k on a CPU); no bound (infinity)
    where no size above 1 was measured."""
    above = sizes > 1
    if not above.any():
        return lambda k: np.full(np.shape(k), np.inf)
    dk = sizes[above] - 1.0
    w = weights[above]
    slope = max(0.0, float(np.sum(w * dk * (ratios[above] - 1.0)) / np.sum(w * dk * dk)))
    last, start = int(sizes[-1]), float(ratios[-1])
    return lambda k: start + slope * (np.asarray(k, dtype=float) - last)
