"""What prompt lookup could add to a draft model on one reply, with perfect foresight.

The regime benchmark compares draft model + lookup with the same policy's
draft model alone (``MODEL_ALONE``). How much better it could be depends on
the reply: where it copies its input, a free copy saves the draft model's
steps; where it does not, there is nothing to gain. This module gives the
ceiling that arithmetic sets on each reply, so the measured ratio is read
against what the reply allowed, not against a guess.

(``text_chains``, for ``gambit.bench.playback``: the same for a draft
through text, from the chain it drafts at each position.)

For one greedy reply it finds, per position, how many tokens in a row the
draft model drafts right (``model_guesses``: its greedy choice, teacher-forced
on the reply, equals the reply token) and how many lookup's copy gets right
(``copy_runs``: the copy ``PromptLookupDrafter`` drafts there). A schedule
with perfect foresight then picks each round's drafter and γ to reach the
reply's end soonest (``foresight_seconds``), under the measured costs:

- a round of the draft model: γ draft steps (and its per-round catch-up)
  and a target batch of γ + 1 (``CostModel.round_cost``);
- a round of a copy: the target batch, and the draft model's reading of the
  tokens the copy committed before it drafts again (``catch_up_cost``);
- a plain step: one target token.

The ceiling is the draft model alone's best time ÷ the best time with
copies too, on the same reply and costs (``lookup_ceiling``): 1.0 where no
copy lands, above it by what a copy's skipped draft steps save.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gambit.engine.drafters.base import Drafter, top_probability
from gambit.engine.drafters.lookup import PromptLookupDrafter
from gambit.engine.estimates import CostModel
from gambit.engine.machine.runtime import ModelRuntime
from gambit.engine.verification.sampling import SamplingParams

_GREEDY = SamplingParams(temperature=0.0)


@dataclass(frozen=True)
class ReplyRuns:
    """Per reply position: the tokens in a row the draft model, and lookup's
    copy, get right from there (the copy's as drafted: at most γ max)."""

    model: tuple[int, ...]
    copy: tuple[int, ...]


def runs_of(hits: Sequence[bool]) -> tuple[int, ...]:
    """For each position, how many ``hits`` in a row start there."""
    runs = [0] * (len(hits) + 1)
    for i in range(len(hits) - 1, -1, -1):
        runs[i] = runs[i + 1] + 1 if hits[i] else 0
    return tuple(runs[:-1])


def model_guesses(
    draft: ModelRuntime, prompt: list[int], reply: list[int]
) -> tuple[list[bool], list[float]]:
    """Whether the draft model's greedy choice, given the prompt and the reply
    so far, is each reply token, and how sure it was there (its distribution's
    top probability, as a draft's ``ConfidenceCut`` reads it); leaves
    ``draft`` holding prompt + reply."""
    if not reply:
        return [], []
    draft.sync(prompt)
    rows = [np.array(draft.logits(-1))]  # (copies: the next decode overwrites them)
    for start in range(0, len(reply), draft.n_batch):
        chunk = reply[start : start + draft.n_batch]
        n = draft.decode(chunk, all_logits=True)
        rows.extend(np.array(draft.logits_rows(n)))
    hits = [int(np.argmax(rows[i])) == tok for i, tok in enumerate(reply)]
    return hits, [top_probability(rows[i]) for i in range(len(reply))]


def text_chains(
    drafter: Drafter, prompt: list[int], reply: list[int], gamma_max: int
) -> tuple[tuple[int, ...], tuple[tuple[float, ...], ...]]:
    """From each reply position, how many tokens of the chain a draft through
    text drafts there (``gamma_max`` of them, uncut) land in a row, and its
    confidence in each of them. Position 0 is the prompt's own token: nothing
    is drafted for it."""
    rng = np.random.default_rng(0)  # (a greedy draft draws nothing)
    runs: list[int] = [0]
    chains: list[tuple[float, ...]] = [()]
    for i in range(1, len(reply)):
        draft = drafter.draft(prompt + reply[:i], gamma_max, _GREEDY, rng)
        n = 0
        while n < len(draft.tokens) and i + n < len(reply) and draft.tokens[n] == reply[i + n]:
            n += 1
        confidence = tuple(draft.confidence) or (1.0,) * len(draft.tokens)
        runs.append(n)
        chains.append(confidence[: len(draft.tokens)])
    return tuple(runs), tuple(chains)


def copy_runs(prompt: list[int], reply: list[int], gamma_max: int) -> tuple[int, ...]:
    """How many tokens of lookup's copy (up to ``gamma_max``) land at each
    reply position, copying from the conversation as it stands there."""
    lookup = PromptLookupDrafter()
    rng = np.random.default_rng(0)  # (a copy draws nothing)
    runs = []
    for i in range(len(reply)):
        copy = lookup.draft(prompt + reply[:i], gamma_max, _GREEDY, rng).tokens
        n = 0
        while n < len(copy) and i + n < len(reply) and copy[n] == reply[i + n]:
            n += 1
        runs.append(n)
    return tuple(runs)


def reply_runs(
    draft: ModelRuntime, prompt: list[int], reply: list[int], gamma_max: int
) -> ReplyRuns:
    hits, _ = model_guesses(draft, prompt, reply)
    return ReplyRuns(runs_of(hits), copy_runs(prompt, reply, gamma_max))


def foresight_seconds(
    runs: ReplyRuns, costs: CostModel, gamma_max: int, *, copies: bool = True
) -> float:
    """The least time any schedule of rounds needs for the reply, knowing
    every round's outcome beforehand (``copies`` False: the draft model's
    rounds and plain steps only)."""
    n = len(runs.model)
    best = [np.inf] * (n + 1)  # index i: the soonest the first i tokens are committed
    best[0] = 0.0
    plain = costs.verify_cost(1)
    for i in range(n):
        now = best[i]
        if now == np.inf:
            continue
        best[i + 1] = min(best[i + 1], now + plain)
        for gamma in range(1, gamma_max + 1):
            landed = min(gamma, runs.model[i])
            j = min(n, i + landed + 1)  # (the target adds a token of its own)
            best[j] = min(best[j], now + costs.round_cost(gamma, gamma + 1))
        landed = runs.copy[i]
        if copies and landed:
            j = min(n, i + landed + 1)
            cost = costs.verify_cost(landed + 1) + costs.catch_up_cost(j - i)
            best[j] = min(best[j], now + cost)
    return float(best[n])


def foresight_times(runs: ReplyRuns, costs: CostModel, gamma_max: int) -> tuple[float, float]:
    """(the draft model alone's, with lookup's copies too) least times for the reply."""
    alone = foresight_seconds(runs, costs, gamma_max, copies=False)
    return alone, foresight_seconds(runs, costs, gamma_max)


def ceiling_of(times: Sequence[tuple[float, float]]) -> float:
    """The summed ``foresight_times`` of one or more replies: alone ÷ with copies."""
    alone = sum(t[0] for t in times)
    with_copies = sum(t[1] for t in times)
    return alone / with_copies if with_copies > 0 else 1.0


def lookup_ceiling(runs: ReplyRuns, costs: CostModel, gamma_max: int) -> float:
    """The draft model alone's foresight time ÷ that with lookup's copies too:
    the most lookup can speed this reply up (1.0: no copy would help)."""
    return ceiling_of([foresight_times(runs, costs, gamma_max)])
