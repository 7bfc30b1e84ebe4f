"""Token trees: the structure, and the verifier's exactness over siblings.

The output of ``verify_tree`` must be distributed exactly as the target's, for
siblings drawn without replacement from the drafter's q (Recursive
Speculative Decoding) and for deterministic siblings (point masses), and it
must reduce to ``speculative_sample`` on a chain.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest
from scipy import stats

from gambit.engine.verification.sampling import Distribution
from gambit.engine.verification.tree import DraftTree, chain_tree
from gambit.engine.verification.verify import speculative_sample, verify_tree

V = 6  # vocabulary of the synthetic cases


def dist(dense: np.ndarray) -> Distribution:
    ids = np.flatnonzero(dense > 0).astype(np.int64)
    return Distribution(ids, dense[ids] / dense[ids].sum())


def without(d: Distribution, token: int) -> Distribution:
    keep = d.ids != token
    return Distribution(d.ids[keep], d.probs[keep] / d.probs[keep].sum())


# ------------------------------------------------------------------ structure


def test_tree_structure() -> None:
    # root -> 0 -> 1 ; root -> 2 (side) ; 0 -> 3 (side)
    tree = DraftTree((10, 11, 12, 13), (-1, 0, -1, 0), None, main_depth=2)
    assert tree.children == ((0, 2), (1, 3), (), (), ())
    assert tree.n_side == 2
    assert chain_tree((1, 2, 3), None, 0).parents == (-1, 0, 1)


@pytest.mark.parametrize(
    ("parents", "main_depth", "message"),
    [
        ((-1, 2, 0), 1, "must come before"),
        ((-1, -1), 2, "must form a chain"),
        ((-1,), 1, None),
    ],
)
def test_tree_validation(parents: tuple[int, ...], main_depth: int, message: str | None) -> None:
    tokens = tuple(range(len(parents)))
    if message is None:
        DraftTree(tokens, parents, None, main_depth)
        return
    with pytest.raises(ValueError, match=message):
        DraftTree(tokens, parents, None, main_depth)


# ------------------------------------------------------------------- verifier


class Uniforms:
    def __init__(self, values: Sequence[float]) -> None:
        self.values = list(values)

    def random(self) -> float:
        return self.values.pop(0)


def test_greedy_target_follows_the_argmax_child() -> None:
    # p at the root is a point mass on 12, the side candidate; at node 2, on 7.
    tree = DraftTree((11, 5, 12), (-1, 0, -1), None, main_depth=2)
    points = {0: 12, 3: 7}
    verdict = verify_tree(
        tree, lambda row, path: Distribution.point(points[row]), np.random.default_rng(0)
    )
    assert verdict.path == (2,)
    assert verdict.token == 7
    assert verdict.outcomes == (True,)  # node 2 is a leaf: nothing tried below it
    assert verdict.main_outcomes == (False,)  # the main chain failed at depth 1


def test_chain_tree_verifies_as_speculative_sample() -> None:
    rng = np.random.default_rng(1)
    for _ in range(200):
        g = int(rng.integers(1, 5))
        p = [dist(rng.dirichlet(np.ones(V))) for _ in range(g + 1)]
        q = [dist(rng.dirichlet(np.ones(V))) for _ in range(g)]
        x = tuple(q_i.sample(rng.random()) for q_i in q)
        u = rng.random(2 * g + 2).tolist()
        chain = speculative_sample(x, q, p, Uniforms(u))
        tree = verify_tree(chain_tree(x, q, 0), lambda row, path, p=p: p[row], Uniforms(u))
        assert (len(tree.path), tree.token, tree.outcomes) == (
            chain.n_accepted, chain.token, chain.outcomes,
        )  # fmt: skip
        assert tree.main_outcomes == chain.outcomes


class _Case:
    """p and q over two tokens, dense and as Distributions (built once: the
    samples only read them)."""

    def __init__(
        self, p_root: np.ndarray, p_next: np.ndarray, q_root: np.ndarray, q_next: np.ndarray
    ) -> None:
        self.p_root, self.p_next = p_root, p_next  # p_next row t1: p(t2 | t1)
        self.q_root, self.q_next = q_root, q_next
        self.p_root_dist, self.q_root_dist = dist(p_root), dist(q_root)
        self.p_next_dist = [dist(row) for row in p_next]
        self.q_next_dist = [dist(row) for row in q_next]


def _two_level_case(seed: int) -> _Case:
    rng = np.random.default_rng(seed)
    p_root = rng.dirichlet(np.ones(V) * 0.7)
    p_next = rng.dirichlet(np.ones(V) * 0.7, size=V)  # p(t2 | t1)
    q_root = rng.dirichlet(np.ones(V) * 0.7)
    q_next = rng.dirichlet(np.ones(V) * 0.7, size=V)
    return _Case(p_root, p_next, q_root, q_next)


def _sample_pair(
    kind: str,
    n_siblings: int,
    case: _Case,
    rng: np.random.Generator,
) -> tuple[int, int]:
    """Draft a two-level tree, verify it, and return the first two emitted tokens."""
    tokens: list[int] = []
    parents: list[int] = []
    qs: list[Distribution] = []
    # Root candidates: the main child and siblings.
    if kind == "sampled":  # drawn without replacement from q_root
        remaining = case.q_root_dist
        for _ in range(n_siblings):
            if len(remaining.ids) == 0:
                break
            t = remaining.sample(rng.random())
            tokens.append(t)
            parents.append(-1)
            qs.append(remaining)
            if len(remaining.ids) == 1:
                break
            remaining = without(remaining, t)
    else:  # deterministic: the top candidates of q_root, point masses
        for t in np.argsort(-case.q_root)[:n_siblings]:
            tokens.append(int(t))
            parents.append(-1)
            qs.append(Distribution.point(int(t)))
    # Each root candidate gets one child of its own.
    for i in range(len(tokens)):
        q = case.q_next_dist[tokens[i]]
        t = q.sample(rng.random()) if kind == "sampled" else int(np.argmax(case.q_next[tokens[i]]))
        tokens.append(t)
        parents.append(i)
        qs.append(q if kind == "sampled" else Distribution.point(t))
    # Put the main chain first: node 0 and its child.
    main_child = len(tokens) // 2  # the first candidate's own child
    order = [0, main_child] + [i for i in range(len(tokens)) if i not in (0, main_child)]
    remap = {old: new for new, old in enumerate(order)}
    tree = DraftTree(
        tuple(tokens[i] for i in order),
        tuple(-1 if parents[i] < 0 else remap[parents[i]] for i in order),
        tuple(qs[i] for i in order),
        main_depth=2,
    )

    def p_at(row: int, path: Sequence[int]) -> Distribution:
        if row == 0:
            return case.p_root_dist
        if len(path) == 1:
            return case.p_next_dist[tree.tokens[path[0]]]
        return case.p_root_dist  # depth 2: not needed for the first two tokens

    verdict = verify_tree(tree, p_at, rng)
    out = [tree.tokens[i] for i in verdict.path] + [verdict.token]
    if len(out) == 1:  # the tree stopped at the root: the next token comes from p
        out.append(case.p_next_dist[out[0]].sample(rng.random()))
    return out[0], out[1]


@pytest.mark.parametrize("kind", ["sampled", "deterministic"])
@pytest.mark.parametrize("n_siblings", [1, 2, 4])
def test_tree_output_matches_the_target_distribution(kind: str, n_siblings: int) -> None:
    for seed in range(3):
        case = _two_level_case(seed)
        exact = (case.p_root[:, None] * case.p_next).ravel()
        rng = np.random.default_rng(100 + seed)
        n = 12_000
        counts = np.zeros(V * V)
        for _ in range(n):
            t1, t2 = _sample_pair(kind, n_siblings, case, rng)
            counts[t1 * V + t2] += 1
        assert counts[exact == 0].sum() == 0
        expected = exact * n
        rare = expected < 5  # merged: chi-square needs expected counts of 5 or more
        p_value = stats.chisquare(
            np.append(counts[~rare], counts[rare].sum()),
            np.append(expected[~rare], expected[rare].sum()),
        ).pvalue
        # 18 chi-square tests in this file: 1e-4 each keeps false alarms rare
        # (Bonferroni), while a wrong residual or acceptance rule gives p ~ 0.
        assert p_value > 1e-4, f"{kind}, {n_siblings} siblings, case {seed}: p = {p_value:.2e}"


def test_siblings_rescue_rejected_main_candidates() -> None:
    """A sibling equal to the target's likely token is accepted when the main one is not."""
    p_root = np.array([0.0, 0.0, 1.0, 0.0, 0.0, 0.0])
    tree = DraftTree((1, 2), (-1, -1), None, main_depth=1)
    verdict = verify_tree(
        tree, lambda row, path: dist(p_root) if row == 0 else Distribution.point(4),
        np.random.default_rng(0),
    )  # fmt: skip
    assert verdict.path == (1,)
    assert verdict.token == 4
    assert verdict.main_outcomes == (False,)
    assert verdict.outcomes == (True,)
