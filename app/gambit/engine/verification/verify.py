"""Speculative sampling: the verification that keeps speculation lossless.

Leviathan et al. 2023 / Chen et al. 2023. For draft tokens x_1..x_γ proposed
from distributions q_1..q_γ, and the target's distributions p_1..p_{γ+1}
(all from ``sampling.process``):

- accept x_i with probability min(1, p_i(x_i) / q_i(x_i));
- at the first rejection, emit a token drawn from p' = norm(max(0, p_i - q_i));
- if all γ are accepted, emit a bonus token drawn from p_{γ+1}.

Every emitted token is then distributed exactly as the target alone would
draw it. A deterministic drafter (greedy draft model, n-gram lookup) is the
point mass q_i = δ(x_i). With a greedy target (p_i a point mass too) the rule
reduces to "accept while x_i equals the target's argmax", exactly.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from gambit.engine.verification.sampling import Distribution
from gambit.engine.verification.tree import DraftTree


class UniformSource(Protocol):
    def random(self) -> float: ...


@dataclass(frozen=True, slots=True)
class Verdict:
    n_accepted: int
    token: int  # emitted by the target: the resampled token or the bonus token
    outcomes: tuple[bool, ...]  # per draft position tried: accepted?


def residual(p: Distribution, q: Distribution) -> Distribution:
    """p' = norm(max(0, p - q)), the distribution to resample from after a rejection."""
    if q.is_point:
        x = int(q.ids[0])
        probs = np.where(p.ids == x, 0.0, p.probs)
        ids = p.ids
    else:
        all_ids = np.concatenate([p.ids, q.ids])
        ids, inverse = np.unique(all_ids, return_inverse=True)
        diff = np.zeros(len(ids))
        np.add.at(diff, inverse[: len(p.ids)], p.probs)
        np.subtract.at(diff, inverse[len(p.ids) :], q.probs)
        probs = np.maximum(diff, 0.0)
    total = float(probs.sum())
    if total <= 1e-12:
        # p == q (up to rounding): a rejection then has probability 0, so this
        # branch only runs on rounding noise; p itself is the right answer.
        return p
    keep = probs > 0
    return Distribution(ids[keep].astype(np.int64), probs[keep] / total)


def acceptance_probability(p_x: float, q_x: float) -> float:
    """min(1, p(x)/q(x)) for a token x that was drawn from q (so q(x) > 0)."""
    return 1.0 if p_x >= q_x else p_x / q_x


def speculative_sample(
    x: Sequence[int],
    q_i: Sequence[Distribution] | None,
    p_i: Sequence[Distribution],
    rng: UniformSource,
) -> Verdict:
    """Verify draft tokens ``x`` against the target.

    ``q_i[i]`` is the proposal distribution of ``x[i]`` (``None``: a
    deterministic drafter, point masses); ``p_i`` has ``len(x) + 1`` target
    distributions, the last one for the bonus token. ``p_i`` may be a lazy
    sequence: only the rows that are needed are read, in order.
    """
    outcomes: list[bool] = []
    for i, x_i in enumerate(x):
        p = p_i[i]
        q = Distribution.point(x_i) if q_i is None else q_i[i]
        p_x, q_x = p.prob(x_i), q.prob(x_i)
        r = rng.random()
        if q_x > 0.0 and r < acceptance_probability(p_x, q_x):
            outcomes.append(True)
            continue
        outcomes.append(False)
        p_prime = residual(p, q)
        return Verdict(i, p_prime.sample(rng.random()), tuple(outcomes))
    bonus = p_i[len(x)]
    return Verdict(len(x), bonus.sample(rng.random()), tuple(outcomes))


@dataclass(frozen=True, slots=True)
class TreeVerdict:
    path: tuple[int, ...]  # the accepted nodes, from the root's child down
    token: int  # emitted by the target after the path
    outcomes: tuple[bool, ...]  # per depth reached: was one of its candidates accepted?
    # What the main chain alone would have shown: its node at each depth
    # tried, accepted? (Ends at its first rejection, or where the path left it.)
    main_outcomes: tuple[bool, ...]


def verify_tree(
    tree: DraftTree,
    p_at: Callable[[int, Sequence[int]], Distribution],
    rng: UniformSource,
) -> TreeVerdict:
    """Verify a token tree: recursive rejection sampling over siblings.

    ``p_at(row, path)`` is the target's distribution at batch row ``row``
    (0: the root, i + 1: node i) whose path from the root is ``path``.

    At each node the children are tried in order. Child c, drawn from
    ``q_c`` (its drafter's distribution given the earlier siblings; a point
    mass for deterministic candidates), is accepted with probability
    min(1, p(x_c) / q_c(x_c)); on rejection p becomes norm(max(0, p - q_c))
    and the next sibling is tried against it. When every child is rejected
    the token is drawn from what is left of p; a node without children gets
    the bonus token from its own p. Each step is an exact rejection sampler
    for the distribution it is handed (Chen et al. 2023; for siblings drawn
    without replacement, Jeon et al. 2024, "Recursive Speculative
    Decoding"), so every emitted token is distributed as the target's. With
    a greedy target (p a point mass) this is "follow the child equal to the
    argmax", exactly.
    """
    path: list[int] = []
    outcomes: list[bool] = []
    main_outcomes: list[bool] = []
    on_main = tree.main_depth > 0
    node = -1
    kids = tree.children
    while True:
        p = p_at(node + 1, path)
        children = kids[node + 1]
        chosen = -1
        for c in children:
            x = tree.tokens[c]
            q = Distribution.point(x) if tree.q is None else tree.q[c]
            q_x = q.prob(x)
            r = rng.random()
            if q_x > 0.0 and r < acceptance_probability(p.prob(x), q_x):
                chosen = c
                break
            p = residual(p, q)
        if on_main and children:
            main_child = node + 1  # the main chain's node at this depth
            if main_child < tree.main_depth:
                main_outcomes.append(chosen == main_child)
                on_main = chosen == main_child
            else:
                on_main = False
        if chosen < 0:
            if children:
                outcomes.append(False)
            return TreeVerdict(
                tuple(path), p.sample(rng.random()), tuple(outcomes), tuple(main_outcomes)
            )
        outcomes.append(True)
        path.append(chosen)
        node = chosen
