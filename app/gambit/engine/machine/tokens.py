"""Token-list helpers shared by the runtime, the decoder and the drafters."""

from __future__ import annotations


def common_prefix_length(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    if a[:n] == b[:n]:  # the common case (appending), compared at C speed
        return n
    lo, hi = 0, n  # binary search for the first difference on prefixes
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo
