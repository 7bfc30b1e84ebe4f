"""The verifier is exact: every emitted token is distributed as the target alone draws it.

Three kinds of evidence: an analytic computation of the first emitted token's
distribution from the module's own ``acceptance_probability`` and ``residual``;
Monte-Carlo runs of the whole ``speculative_sample`` checked with a chi-square
test; and hand-built cases whose outcome is certain.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import overload

import numpy as np
import pytest
from scipy import stats

from gambit.engine.verification.sampling import Distribution, SamplingParams, process
from gambit.engine.verification.verify import (
    Verdict,
    acceptance_probability,
    residual,
    speculative_sample,
)

# --------------------------------------------------------------------- helpers


def from_dense(dense: np.ndarray, rng: np.random.Generator | None = None) -> Distribution:
    """The sparse Distribution of a dense vector (zeros dropped, ids optionally shuffled)."""
    ids = np.flatnonzero(dense > 0).astype(np.int64)
    if rng is not None:
        ids = rng.permutation(ids)
    probs = dense[ids] / dense[ids].sum()
    return Distribution(ids, probs)


def random_dense(rng: np.random.Generator, n_vocab: int, support: int | None = None) -> np.ndarray:
    """A random categorical over ``n_vocab`` tokens with ``support`` of them non-zero."""
    support = n_vocab if support is None else support
    out = np.zeros(n_vocab)
    ids = rng.choice(n_vocab, size=support, replace=False)
    out[ids] = rng.dirichlet(np.full(support, 0.7))
    out /= out.sum()
    return out


def dense_of(d: Distribution, n_vocab: int) -> np.ndarray:
    out = np.zeros(n_vocab)
    np.add.at(out, d.ids, d.probs)
    return out


def first_token_law(p: Distribution, q: Distribution, n_vocab: int) -> np.ndarray:
    """Exact law of the first emitted token: sum_x q(x) [a(x) d(x, y) + (1 - a(x)) p'(y)]."""
    r = dense_of(residual(p, q), n_vocab)
    out = np.zeros(n_vocab)
    for x, q_x in zip(q.ids.tolist(), q.probs.tolist(), strict=True):
        if q_x == 0.0:
            continue
        a = acceptance_probability(p.prob(x), q.prob(x))
        assert 0.0 <= a <= 1.0
        out[x] += q_x * a
        out += q_x * (1.0 - a) * r
    return out


def random_pair_cases() -> Iterator[tuple[str, Distribution, Distribution, int]]:
    """(label, p, q, n_vocab) over many shapes of support."""
    rng = np.random.default_rng(20240601)
    for i in range(60):
        n_vocab = int(rng.integers(6, 21))
        p_dense = random_dense(rng, n_vocab)
        q_dense = random_dense(rng, n_vocab)
        yield f"full-{i}", from_dense(p_dense, rng), from_dense(q_dense, rng), n_vocab
    for i in range(60):
        n_vocab = int(rng.integers(6, 21))
        # partial, overlapping supports: q has tokens p lacks and vice versa
        p_dense = random_dense(rng, n_vocab, int(rng.integers(2, n_vocab)))
        q_dense = random_dense(rng, n_vocab, int(rng.integers(2, n_vocab)))
        yield f"partial-{i}", from_dense(p_dense, rng), from_dense(q_dense, rng), n_vocab
    for i in range(10):
        n_vocab = int(rng.integers(6, 21))
        perm = rng.permutation(n_vocab)
        half = n_vocab // 2
        p_dense = np.zeros(n_vocab)
        q_dense = np.zeros(n_vocab)
        p_dense[perm[:half]] = rng.dirichlet(np.ones(half))
        q_dense[perm[half:]] = rng.dirichlet(np.ones(n_vocab - half))
        yield f"disjoint-{i}", from_dense(p_dense), from_dense(q_dense), n_vocab
    for i in range(10):
        n_vocab = int(rng.integers(6, 21))
        p = from_dense(random_dense(rng, n_vocab, int(rng.integers(1, n_vocab))), rng)
        q = Distribution.point(int(rng.integers(n_vocab)))  # deterministic drafter
        yield f"point-q-{i}", p, q, n_vocab
    for i in range(10):
        n_vocab = int(rng.integers(6, 21))
        p = Distribution.point(int(rng.integers(n_vocab)))  # greedy target
        q = from_dense(random_dense(rng, n_vocab, int(rng.integers(1, n_vocab))), rng)
        yield f"point-p-{i}", p, q, n_vocab


PARAMS = [
    SamplingParams(),
    SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0),
    SamplingParams(temperature=0.5, top_k=5, top_p=1.0, min_p=0.0),
    SamplingParams(temperature=1.3, top_k=0, top_p=0.8, min_p=0.0),
    SamplingParams(temperature=0.9, top_k=12, top_p=0.9, min_p=0.1),
    SamplingParams(temperature=2.0, top_k=3, top_p=0.5, min_p=0.0),
    SamplingParams(temperature=0.0),
    SamplingParams(temperature=1.1, repeat_penalty=1.5, repeat_last_n=8),
]


def processed_pair_cases() -> Iterator[tuple[str, Distribution, Distribution, int]]:
    """Truncated supports as the engine makes them: ``process`` with different params."""
    rng = np.random.default_rng(7)
    for i in range(80):
        n_vocab = int(rng.integers(6, 21))
        logits_p = (rng.normal(size=n_vocab) * 2.5).astype(np.float32)
        # the draft model roughly agrees with the target
        logits_q = (logits_p + rng.normal(size=n_vocab)).astype(np.float32)
        recent = rng.integers(0, n_vocab, size=6).tolist()
        sp = PARAMS[int(rng.integers(len(PARAMS)))]
        sq = PARAMS[int(rng.integers(len(PARAMS)))]
        p = process(logits_p, sp, recent)
        q = process(logits_q, sq, recent)
        yield f"processed-{i}", p, q, n_vocab


ALL_CASES = list(random_pair_cases()) + list(processed_pair_cases())


def check_valid(d: Distribution, n_vocab: int) -> None:
    assert d.ids.ndim == 1
    assert d.ids.shape == d.probs.shape
    assert len(np.unique(d.ids)) == len(d.ids)
    assert np.all((d.ids >= 0) & (d.ids < n_vocab))
    assert np.all(d.probs >= 0)
    assert d.probs.sum() == pytest.approx(1.0, abs=1e-12)


class Fixed:
    """A UniformSource that plays back given numbers (for outcomes that must be certain)."""

    def __init__(self, values: Sequence[float]) -> None:
        self.values = list(values)
        self.calls = 0

    def random(self) -> float:
        value = self.values[self.calls]
        self.calls += 1
        return value


# ------------------------------------------------------------ analytic exactness


@pytest.mark.parametrize(("label", "p", "q", "n_vocab"), ALL_CASES, ids=[c[0] for c in ALL_CASES])
def test_first_token_law_is_exactly_p(
    label: str, p: Distribution, q: Distribution, n_vocab: int
) -> None:
    check_valid(p, n_vocab)
    check_valid(q, n_vocab)
    law = first_token_law(p, q, n_vocab)
    assert np.allclose(law, dense_of(p, n_vocab), rtol=0.0, atol=1e-12), label


@pytest.mark.parametrize(("label", "p", "q", "n_vocab"), ALL_CASES, ids=[c[0] for c in ALL_CASES])
def test_residual_is_normalised_positive_part(
    label: str, p: Distribution, q: Distribution, n_vocab: int
) -> None:
    r = residual(p, q)
    check_valid(r, n_vocab)
    diff = np.maximum(dense_of(p, n_vocab) - dense_of(q, n_vocab), 0.0)
    if diff.sum() <= 1e-12:
        # p == q up to rounding: the documented fallback is p itself
        assert np.allclose(dense_of(r, n_vocab), dense_of(p, n_vocab), rtol=0.0, atol=1e-12)
    else:
        assert np.allclose(dense_of(r, n_vocab), diff / diff.sum(), rtol=0.0, atol=1e-12), label
    # residual only ever puts mass where p does
    assert set(r.ids.tolist()) <= set(p.ids.tolist())


def test_point_mass_drafter_first_token_law() -> None:
    rng = np.random.default_rng(3)
    n_vocab = 12
    for _ in range(50):
        p = from_dense(random_dense(rng, n_vocab, int(rng.integers(1, n_vocab + 1))), rng)
        for x in range(n_vocab):
            q = Distribution.point(x)
            # law of the emitted token when the drafter always proposes x
            a = acceptance_probability(p.prob(x), 1.0)
            law = a * np.eye(n_vocab)[x] + (1.0 - a) * dense_of(residual(p, q), n_vocab)
            # exactness holds only on average over x ~ q; for a point mass q that is x itself,
            # so the emitted law must be p for every x.
            assert np.allclose(law, dense_of(p, n_vocab), rtol=0.0, atol=1e-12)


def test_acceptance_probability_values() -> None:
    assert acceptance_probability(0.5, 0.25) == 1.0
    assert acceptance_probability(0.25, 0.25) == 1.0
    assert acceptance_probability(0.25, 0.5) == 0.5
    assert acceptance_probability(0.0, 0.5) == 0.0
    assert acceptance_probability(1.0, 1.0) == 1.0


# ------------------------------------------------------------------ Monte Carlo


def chi_square_p_value(samples: np.ndarray, p: Distribution, n_vocab: int) -> float:
    """p-value of ``samples`` against ``p``; tokens outside p's support fail outright."""
    dense = dense_of(p, n_vocab)
    counts = np.bincount(samples, minlength=n_vocab).astype(np.float64)
    assert np.all(counts[dense == 0] == 0), "emitted a token the target gives probability 0"
    n = counts.sum()
    expected = dense * n
    # pool cells with small expected counts so the chi-square approximation holds
    big = expected >= 5
    f_obs = list(counts[big])
    f_exp = list(expected[big])
    small_obs, small_exp = counts[~big & (dense > 0)].sum(), expected[~big & (dense > 0)].sum()
    if small_exp > 0:
        f_obs.append(small_obs)
        f_exp.append(small_exp)
    if len(f_obs) < 2:
        return 1.0
    f_exp_arr = np.asarray(f_exp)
    f_exp_arr *= n / f_exp_arr.sum()
    return float(stats.chisquare(np.asarray(f_obs), f_exp_arr).pvalue)


def make_chain(
    rng: np.random.Generator, gamma: int, n_vocab: int, kind: str
) -> tuple[list[Distribution], list[Distribution] | None]:
    """Target rows p_1..p_{γ+1} and draft rows q_1..q_γ (None: deterministic drafter)."""
    ps: list[Distribution] = []
    qs: list[Distribution] = []
    for _ in range(gamma + 1):
        logits = (rng.normal(size=n_vocab) * 1.5).astype(np.float32)
        if kind == "processed":
            ps.append(process(logits, SamplingParams(temperature=1.0, top_k=6, min_p=0.0)))
            noisy = (logits + rng.normal(size=n_vocab)).astype(np.float32)
            qs.append(process(noisy, SamplingParams(temperature=1.4, top_k=8, top_p=0.9)))
        else:
            ps.append(from_dense(random_dense(rng, n_vocab, n_vocab - 2), rng))
            qs.append(from_dense(random_dense(rng, n_vocab, n_vocab - 2), rng))
    return ps, (None if kind == "point" else qs[:gamma])


MC_CASES = [
    (1, "random", 11),
    (2, "random", 12),
    (3, "random", 13),
    (2, "processed", 14),
    (3, "processed", 15),
    (2, "point", 16),
]


@pytest.mark.parametrize(("gamma", "kind", "seed"), MC_CASES)
def test_speculative_sample_monte_carlo(gamma: int, kind: str, seed: int) -> None:
    n_vocab = 8
    n_trials = 20_000
    setup = np.random.default_rng(seed)
    ps, qs = make_chain(setup, gamma, n_vocab, kind)
    drafts_rng = np.random.default_rng(seed + 1000)
    if qs is None:
        # a deterministic drafter: the same (arbitrary) proposal every time
        x_all = np.tile(setup.integers(0, n_vocab, size=gamma), (n_trials, 1))
    else:
        x_all = np.stack([drafts_rng.choice(q.ids, size=n_trials, p=q.probs) for q in qs], axis=1)
    verify_rng = np.random.default_rng(seed + 2000)
    first = np.empty(n_trials, dtype=np.int64)
    second: list[int] = []
    for t in range(n_trials):
        x = x_all[t].tolist()
        v = speculative_sample(x, qs, ps, verify_rng)
        assert 0 <= v.n_accepted <= gamma
        first[t] = x[0] if v.n_accepted >= 1 else v.token
        if v.n_accepted >= 2:
            second.append(x[1])
        elif v.n_accepted == 1:
            second.append(v.token)
    assert chi_square_p_value(first, ps[0], n_vocab) > 1e-3
    # given the first token was a draft token (so a second one is emitted this round),
    # the second is distributed as p_2 (the rows here do not depend on the prefix)
    assert len(second) > 2_000
    assert chi_square_p_value(np.asarray(second), ps[1], n_vocab) > 1e-3


def test_second_token_conditional_on_first() -> None:
    """Small case: the second emitted token given each value of the first is p_2."""
    n_vocab = 4
    p1 = Distribution(np.arange(4), np.array([0.4, 0.3, 0.2, 0.1]))
    q1 = Distribution(np.arange(4), np.array([0.1, 0.2, 0.3, 0.4]))
    p2 = Distribution(np.arange(4), np.array([0.1, 0.2, 0.3, 0.4]))
    q2 = Distribution(np.array([0, 3]), np.array([0.5, 0.5]))
    p3 = Distribution(np.arange(4), np.array([0.25, 0.25, 0.25, 0.25]))
    ps, qs = [p1, p2, p3], [q1, q2]
    n_trials = 20_000
    drafts = np.random.default_rng(5)
    x_all = np.stack([drafts.choice(q.ids, size=n_trials, p=q.probs) for q in qs], axis=1)
    verify_rng = np.random.default_rng(6)
    pairs: list[tuple[int, int]] = []
    for t in range(n_trials):
        x = x_all[t].tolist()
        v = speculative_sample(x, qs, ps, verify_rng)
        if v.n_accepted == 2:
            pairs.append((x[0], x[1]))
        elif v.n_accepted == 1:
            pairs.append((x[0], v.token))
    arr = np.asarray(pairs)
    for first in range(n_vocab):
        seconds = arr[arr[:, 0] == first, 1]
        if len(seconds) < 500:
            continue
        assert chi_square_p_value(seconds, p2, n_vocab) > 1e-3, first


# ------------------------------------------------------------ certain outcomes


def greedy(token: int) -> Distribution:
    return Distribution.point(token)


def test_greedy_target_accepts_its_argmax() -> None:
    for seed in range(50):
        v = speculative_sample(
            [3, 1, 4],
            None,
            [greedy(3), greedy(1), greedy(4), greedy(9)],
            np.random.default_rng(seed),
        )
        assert v == Verdict(3, 9, (True, True, True))


def test_greedy_target_rejects_other_token_and_emits_argmax() -> None:
    for seed in range(50):
        rng = np.random.default_rng(seed)
        v = speculative_sample([3, 5, 4], None, [greedy(3), greedy(1), greedy(4), greedy(9)], rng)
        assert v == Verdict(1, 1, (True, False))


def test_greedy_target_with_stochastic_drafter() -> None:
    q = Distribution(np.array([2, 7, 1]), np.array([0.2, 0.5, 0.3]))
    for seed in range(50):
        rng = np.random.default_rng(seed)
        assert speculative_sample([7], [q], [greedy(7), greedy(0)], rng) == Verdict(1, 0, (True,))
        assert speculative_sample([2], [q], [greedy(7), greedy(0)], rng) == Verdict(0, 7, (False,))


def test_all_accepted_bonus_comes_from_last_row() -> None:
    p = Distribution(np.array([0, 1, 2]), np.array([0.5, 0.3, 0.2]))
    bonus = Distribution(np.array([10, 11, 12]), np.array([0.2, 0.3, 0.5]))
    counts: dict[int, int] = {}
    rng = np.random.default_rng(9)
    for _ in range(3000):
        # p == q: every draft token is accepted
        v = speculative_sample([0, 2], [p, p], [p, p, bonus], rng)
        assert v.n_accepted == 2
        assert v.outcomes == (True, True)
        counts[v.token] = counts.get(v.token, 0) + 1
    assert set(counts) <= {10, 11, 12}
    obs = np.array([counts.get(t, 0) for t in (10, 11, 12)])
    assert stats.chisquare(obs, bonus.probs * obs.sum()).pvalue > 1e-3


def test_bonus_token_uses_the_quantile_drawn() -> None:
    bonus = Distribution(np.array([10, 11, 12]), np.array([0.2, 0.3, 0.5]))
    p = greedy(4)
    # one uniform per accepted position, then one for the bonus
    assert speculative_sample([4], None, [p, bonus], Fixed([0.99, 0.0])).token == 10
    assert speculative_sample([4], None, [p, bonus], Fixed([0.0, 0.3])).token == 11
    assert speculative_sample([4], None, [p, bonus], Fixed([0.5, 0.999999])).token == 12


def test_token_outside_target_support_is_always_rejected() -> None:
    p = Distribution(np.array([0, 1]), np.array([0.6, 0.4]))
    q = Distribution(np.array([0, 1, 2]), np.array([0.2, 0.2, 0.6]))
    for seed in range(200):
        v = speculative_sample([2], [q], [p, p], np.random.default_rng(seed))
        assert v.n_accepted == 0
        assert v.outcomes == (False,)
        assert v.token in (0, 1)
    # even with the smallest possible uniform
    assert speculative_sample([2], [q], [p, p], Fixed([0.0, 0.5])).n_accepted == 0


def test_p_equal_q_always_accepts() -> None:
    rng = np.random.default_rng(1)
    for _ in range(30):
        n_vocab = int(rng.integers(6, 21))
        gamma = int(rng.integers(1, 5))
        qs = [from_dense(random_dense(rng, n_vocab), rng) for _ in range(gamma)]
        ps = [*qs, from_dense(random_dense(rng, n_vocab), rng)]
        x = [q.sample(rng.random()) for q in qs]
        for seed in range(20):
            v = speculative_sample(x, qs, ps, np.random.default_rng(seed))
            assert v.n_accepted == gamma
        # the worst uniforms a source can give
        v = speculative_sample(x, qs, ps, Fixed([np.nextafter(1.0, 0.0)] * (gamma + 1)))
        assert v.n_accepted == gamma


def test_acceptance_threshold_is_min_one_ratio() -> None:
    p = Distribution(np.array([0, 1]), np.array([0.3, 0.7]))
    q = Distribution(np.array([0, 1]), np.array([0.6, 0.4]))
    rows = [p, Distribution.point(5)]
    # a(0) = 0.3 / 0.6 = 0.5: accept for r < 0.5, reject for r >= 0.5
    assert speculative_sample([0], [q], rows, Fixed([0.4999, 0.0])).n_accepted == 1
    v = speculative_sample([0], [q], rows, Fixed([0.5, 0.0]))
    assert v.n_accepted == 0
    assert v.token == 1  # the residual is a point mass on 1
    # a(1) = 1
    assert speculative_sample([1], [q], rows, Fixed([0.9999, 0.0])).n_accepted == 1


def test_rejected_token_is_never_emitted_in_its_place() -> None:
    """After a rejection at x, p'(x) = 0 (since then q(x) > p(x)), so x is not re-emitted."""
    rng = np.random.default_rng(21)
    for _ in range(300):
        n_vocab = int(rng.integers(6, 21))
        p = from_dense(random_dense(rng, n_vocab, int(rng.integers(1, n_vocab + 1))), rng)
        q = from_dense(random_dense(rng, n_vocab, int(rng.integers(1, n_vocab + 1))), rng)
        x = q.sample(rng.random())
        v = speculative_sample([x], [q], [p, p], rng)
        if v.n_accepted == 0:
            assert v.token != x
            assert p.prob(v.token) > 0


def test_empty_draft_samples_the_first_row() -> None:
    p = Distribution(np.array([4, 8]), np.array([0.5, 0.5]))
    assert speculative_sample([], None, [p], Fixed([0.1])) == Verdict(0, 4, ())
    assert speculative_sample([], None, [p], Fixed([0.9])) == Verdict(0, 8, ())


class LazyRows(Sequence[Distribution]):
    """A lazy p_i that records which rows were read."""

    def __init__(self, rows: list[Distribution]) -> None:
        self.rows = rows
        self.read: list[int] = []

    def __len__(self) -> int:
        return len(self.rows)

    @overload
    def __getitem__(self, i: int) -> Distribution: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[Distribution]: ...
    def __getitem__(self, i: int | slice) -> Distribution | Sequence[Distribution]:
        assert isinstance(i, int)
        self.read.append(i)
        return self.rows[i]


def test_lazy_rows_read_only_as_needed_in_order() -> None:
    rows = LazyRows([greedy(1), greedy(2), greedy(3), greedy(4)])
    v = speculative_sample([1, 9, 3], None, rows, np.random.default_rng(0))
    assert v == Verdict(1, 2, (True, False))
    assert rows.read == [0, 1]
    rows = LazyRows([greedy(1), greedy(2), greedy(3), greedy(4)])
    v = speculative_sample([1, 2, 3], None, rows, np.random.default_rng(0))
    assert v == Verdict(3, 4, (True, True, True))
    assert rows.read == [0, 1, 2, 3]


# --------------------------------------------------------------------- residual


def test_residual_of_equal_distributions_is_p() -> None:
    rng = np.random.default_rng(4)
    for _ in range(20):
        n_vocab = int(rng.integers(6, 21))
        p = from_dense(random_dense(rng, n_vocab), rng)
        r = residual(p, p)
        assert np.allclose(dense_of(r, n_vocab), dense_of(p, n_vocab), rtol=0.0, atol=1e-15)
        # the same law listed in another order is still "p == q"
        order = rng.permutation(len(p.ids))
        r = residual(p, Distribution(p.ids[order], p.probs[order]))
        assert np.allclose(dense_of(r, n_vocab), dense_of(p, n_vocab), rtol=0.0, atol=1e-15)
    point = Distribution.point(3)
    assert residual(point, point).ids.tolist() == [3]


def test_residual_point_q_zeroes_that_token() -> None:
    p = Distribution(np.array([5, 2, 9]), np.array([0.5, 0.3, 0.2]))
    r = residual(p, Distribution.point(2))
    assert dict(zip(r.ids.tolist(), r.probs.tolist(), strict=True)) == pytest.approx(
        {5: 0.5 / 0.7, 9: 0.2 / 0.7}
    )
    # a point q outside p's support leaves p as it is
    r = residual(p, Distribution.point(7))
    assert dict(zip(r.ids.tolist(), r.probs.tolist(), strict=True)) == pytest.approx(
        {5: 0.5, 2: 0.3, 9: 0.2}
    )
    # a point p with a different point q: the residual is p
    assert residual(Distribution.point(4), Distribution.point(1)).ids.tolist() == [4]


def test_residual_hand_example() -> None:
    p = Distribution(np.array([0, 1, 2]), np.array([0.5, 0.3, 0.2]))
    q = Distribution(np.array([1, 2, 3]), np.array([0.1, 0.6, 0.3]))
    # p - q = {0: 0.5, 1: 0.2, 2: -0.4, 3: -0.3} -> {0: 5/7, 1: 2/7}
    r = residual(p, q)
    assert dict(zip(r.ids.tolist(), r.probs.tolist(), strict=True)) == pytest.approx(
        {0: 5 / 7, 1: 2 / 7}
    )


# ---------------------------------------------------------------------- Verdict


def test_outcomes_length_and_shape() -> None:
    rng = np.random.default_rng(31)
    seen_rejected = seen_all = 0
    for _ in range(400):
        n_vocab = int(rng.integers(6, 21))
        gamma = int(rng.integers(0, 6))
        qs = [from_dense(random_dense(rng, n_vocab), rng) for _ in range(gamma)]
        ps = [from_dense(random_dense(rng, n_vocab), rng) for _ in range(gamma + 1)]
        x = [q.sample(rng.random()) for q in qs]
        use_q = bool(rng.integers(2))
        v = speculative_sample(x, qs if use_q else None, ps, rng)
        rejected = v.n_accepted < gamma
        assert len(v.outcomes) == v.n_accepted + (1 if rejected else 0)
        assert all(v.outcomes[: v.n_accepted])
        if rejected:
            assert v.outcomes[-1] is False
            seen_rejected += 1
        else:
            seen_all += 1
        assert isinstance(v.token, int)
    assert seen_rejected > 50
    assert seen_all > 50
