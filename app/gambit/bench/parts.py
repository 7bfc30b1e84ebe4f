"""The parts of a speculative round, timed alone at a reply's own context.

Round efficiency compares a fixed-γ round with what its parts cost when each
runs by itself: γ draft steps and one verification batch of γ + 1 tokens.
Those parts have to be timed where the rounds ran — at the same context
length (attention grows with it), and by the same statistic. A calibration at
a short filler context, keeping the fastest of a few runs, makes the parts
look 20-25 % cheaper than they are in the middle of a reply, and the rounds
look that much less efficient than they are.

So after each fixed-γ reply the bench re-builds the context half-way through
that reply in both models' caches and times, a few times each, one draft
step (decode one token, read its logits) and target batches of 1 and γ + 1
tokens (decode, read every row), keeping the median. The caches are cleared
before the next run (``bench.run_once`` starts cold), so nothing of this
leaks into the figures of the runs themselves.
"""

from __future__ import annotations

import statistics
import time
from collections import defaultdict
from dataclasses import dataclass, field

from gambit.engine.estimates import CostModel
from gambit.engine.machine.runtime import ModelRuntime

REPEATS = 5  # per part and reply: the median of five is steady to a few per cent


@dataclass
class PartTimes:
    """Medians of the parts, one sample per measured reply."""

    target: dict[int, list[float]] = field(default_factory=lambda: defaultdict(list))
    draft: list[float] = field(default_factory=list)

    def add(self, other: PartTimes) -> None:
        for k, samples in other.target.items():
            self.target[k].extend(samples)
        self.draft.extend(other.draft)

    def verify_s(self, k: int) -> float | None:
        samples = self.target.get(k)
        return statistics.median(samples) if samples else None

    def draft_s(self) -> float | None:
        return statistics.median(self.draft) if self.draft else None

    def cost_model(self, k_max: int) -> CostModel | None:
        """The costs at the replies' context, as the controller's cost model
        (None until t(1) and one other batch size have been timed)."""
        t1 = self.verify_s(1)
        if t1 is None or len(self.target) < 2:
            return None
        costs = CostModel(k_max)
        for k in sorted(self.target):
            if k <= k_max:
                costs.set_target(k, self.verify_s(k) or 0.0)
        draft = self.draft_s()
        costs.t_draft = draft or 0.0  # none timed: a drafter that costs nothing (lookup)
        return costs


def time_parts(
    target: ModelRuntime,
    draft: ModelRuntime | None,
    context: list[int],
    batch_sizes: tuple[int, ...],
    repeats: int = REPEATS,
    draft_context: list[int] | None = None,
) -> PartTimes:
    """Time one draft step and target batches of ``batch_sizes`` tokens on top
    of ``context`` (which must hold at least max(batch_sizes) + 1 tokens);
    leaves both caches holding ``context`` minus its last token.
    ``draft_context``: the same text in the draft's own tokens, for a draft of
    another vocabulary (None: ``context``)."""
    parts = PartTimes()
    head = context[:-1]
    target.sync(head)
    for k in batch_sizes:
        batch = context[-k:] if k <= len(context) else context
        samples = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            n_rows = target.decode(list(batch), n_logits=len(batch))
            target.logits_rows(n_rows)  # waits for the backend, as a round does
            samples.append(time.perf_counter() - t0)
            target.truncate(len(head))
        parts.target[len(batch)].append(statistics.median(samples))
    if draft is not None:
        own = context if draft_context is None else draft_context
        draft.sync(own[:-1])
        samples = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            draft.decode(own[-1:])
            draft.logits(-1)
            samples.append(time.perf_counter() - t0)
            draft.truncate(len(own) - 1)
        parts.draft.append(statistics.median(samples))
    return parts
