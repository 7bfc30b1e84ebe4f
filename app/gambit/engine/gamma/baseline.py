"""The baseline a reply that drafted is compared with: plain decoding re-timed
on its own context, on the threads it ran on (``gambit.engine.gamma.metrics``
defines the figure; ``Engine.finish_reply`` takes it).

The thread count follows the load (``gambit.engine.machine.threads``), and a
plain step on 1 thread of 2 takes about twice as long: a baseline timed on
one count says nothing of a reply on another, so one is kept per count.
"""

from __future__ import annotations

import time

import numpy as np

from gambit.engine.gamma.metrics import GenerationStats
from gambit.engine.machine.runtime import ModelRuntime
from gambit.engine.machine.tokens import common_prefix_length

# Plain steps timed to re-measure the baseline after a reply (their median), and
# the step time from which one is enough.
BASELINE_STEPS = 3
BASELINE_SLOW_STEP_S = 0.05
BASELINE_CATCH_UP_MAX = 64  # tokens decoded first, at most


def time_plain_step(target: ModelRuntime, context: list[int]) -> float:
    """Seconds of one plain step on ``context`` (a reply's prompt and reply),
    0.0 when there is nothing to time on.

    Timed as a plain round takes it: decode the last token on the full
    context, read its logits row and pick the top token; the median of a few
    (one when a step is slow, so that a large model adds one step after a
    reply, not several). The KV cache ends as the decoder leaves it: every
    committed token but the last.
    """
    if not context or len(context) >= target.n_ctx:
        return 0.0
    # The cache may hold drafts past the reply's end (cut at a stop or at
    # max tokens), or lack a tree round's catch-up: bring it to the context.
    keep = min(common_prefix_length(target.kv_tokens, context), len(context) - 1)
    if len(context) - 1 - keep > BASELINE_CATCH_UP_MAX:
        return 0.0  # the cache went elsewhere: not worth a prompt's processing
    target.truncate(keep)
    target.decode(context[keep:-1])  # (untimed)
    times: list[float] = []
    while len(times) < BASELINE_STEPS:
        t0 = time.perf_counter()
        target.decode(context[-1:])
        int(np.argmax(target.logits(-1)))
        times.append(time.perf_counter() - t0)
        target.truncate(len(context) - 1)
        if times[0] > BASELINE_SLOW_STEP_S:
            break
    return float(np.median(times))


class Baselines:
    """Plain decoding's rate per CPU thread count, as the last reply on it
    measured it (0.0: never measured on that count)."""

    def __init__(self) -> None:
        self._by_threads: dict[int, float] = {}

    def at(self, threads: int) -> float:
        return self._by_threads.get(threads, 0.0)

    def keep(self, threads: int, baseline: float, stats: GenerationStats | None = None) -> None:
        """``baseline`` measured on ``threads``: by the reply of ``stats``, or
        (None) by the load's calibration. A reply that drafted nothing is its
        own baseline, but not if it ran on several counts: no one count's."""
        if baseline > 0 and (stats is None or stats.n_drafted or len(stats.thread_counts) <= 1):
            self._by_threads[threads] = baseline
