"""Ratios of two ways of running the same prompts, with the noise they carry.

On a shared 2-core machine one reply's rate moves ±10-25 % from minute to
minute while nothing else changes (the same rounds, γ for γ, took 388 and
595 ms apart; docs/performance.md). A bench that runs every prompt under
every mode back to back can compare them prompt by prompt: the ratio of
their rates on each prompt, a geometric mean over the prompts, and a 95 %
interval from the prompts' spread.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

# Student's t at 97.5 % for 1-10 degrees of freedom (more: the normal's 1.96
# is within 3 % of it by 11, and tightens from there).
_T975 = (12.71, 4.30, 3.18, 2.78, 2.57, 2.45, 2.36, 2.31, 2.26, 2.23)


def paired_ratio(pairs: Sequence[tuple[float, float]]) -> tuple[float, float, float] | None:
    """The ratio b/a of rates measured on the same prompts, given as (a, b) per
    prompt: their geometric mean with its 95 % interval, (mean, low, high);
    None with fewer than two usable pairs (a rate of 0 is left out)."""
    logs = [math.log(b / a) for a, b in pairs if a > 0 and b > 0]
    if len(logs) < 2:
        return None
    mean = statistics.fmean(logs)
    df = len(logs) - 1
    t = _T975[df - 1] if df <= len(_T975) else 1.96
    half = t * statistics.stdev(logs) / math.sqrt(len(logs))
    return math.exp(mean), math.exp(mean - half), math.exp(mean + half)


def held_out_ratio(rates: Mapping[str, Sequence[float]], mode: str, rivals: Sequence[str]) -> float:
    """``mode`` against the best of ``rivals`` chosen on the *other* prompts.

    The best of several fixed policies "in hindsight" is the largest of
    several noisy figures, and so reads high: against it even a policy that
    made the very same rounds as the best one loses a few percent. Here the
    prompts are split in two (even and odd places); the best rival is picked
    on one half by its rates' geometric mean and compared with ``mode`` on the
    other, prompt by prompt. The result is the geometric mean of those ratios
    (0.0 with fewer than two prompts or no rival)."""
    n = len(rates.get(mode, ()))
    if n < 2 or not rivals or any(len(rates[r]) != n for r in rivals):
        return 0.0
    logs = []
    for half in (0, 1):
        train = [i for i in range(n) if i % 2 != half]
        test = [i for i in range(n) if i % 2 == half]

        def level(r: str, train: list[int] = train) -> float:
            return statistics.fmean(math.log(max(rates[r][i], 1e-9)) for i in train)

        best = max(rivals, key=level)
        logs += [
            math.log(rates[mode][i] / rates[best][i])
            for i in test
            if rates[mode][i] > 0 and rates[best][i] > 0
        ]
    return math.exp(statistics.fmean(logs)) if logs else 0.0


# A prompt where some fixed γ makes at least this speedup is one where drafting
# pays, and adaptive is judged against the best fixed γ there; elsewhere it is
# judged against target-only (issue 47's bar: ≥ 0.9 and ≥ 0.97 of them).
PAYS_FROM = 1.2


def prompt_regret(
    rates: Mapping[str, Sequence[float]], mode: str, fixed: Sequence[str], plain: str
) -> list[dict[str, Any]]:
    """Prompt by prompt, ``mode`` against the best of ``fixed`` for that prompt
    and against ``plain``: the regret a user who tuned γ by hand for each
    prompt would see. Per prompt: ``best_fixed`` (its name), ``best_fixed_speedup``
    and ``speedup`` (both over ``plain``), ``vs_best_fixed`` and ``judged``, the
    ratio to hold ``mode`` to: against the best fixed γ where it pays at least
    PAYS_FROM, else against ``plain``. Empty where the rates are missing."""
    n = len(rates.get(mode, ()))
    if not n or len(rates.get(plain, ())) != n or any(len(rates[f]) != n for f in fixed):
        return []
    rows: list[dict[str, Any]] = []
    for i in range(n):
        base = rates[plain][i]
        if base <= 0:
            continue
        own = rates[mode][i]
        best = max(fixed, key=lambda f: rates[f][i]) if fixed else None
        best_rate = rates[best][i] if best else 0.0
        pays = best_rate / base >= PAYS_FROM
        rows.append(
            {
                "index": i,
                "speedup": own / base,
                "best_fixed": best,
                "best_fixed_speedup": best_rate / base if best else None,
                "vs_best_fixed": own / best_rate if best_rate > 0 else None,
                "judged": ("best fixed", own / best_rate) if pays else ("target-only", own / base),
            }
        )
    return rows
