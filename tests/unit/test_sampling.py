"""``process``, ``penalise``, ``SamplingParams`` and ``Distribution``, checked by hand."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import special, stats

from gambit.engine.verification.sampling import Distribution, SamplingParams, penalise, process


def plain(temperature: float, repeat_penalty: float = 1.0) -> SamplingParams:
    """Temperature only: top-k, top-p and min-p off."""
    return SamplingParams(
        temperature=temperature, top_k=0, top_p=1.0, min_p=0.0, repeat_penalty=repeat_penalty
    )


def logits_of(probs: list[float]) -> np.ndarray:
    return np.log(np.asarray(probs, dtype=np.float64)).astype(np.float32)


def as_dict(d: Distribution) -> dict[int, float]:
    return dict(zip(d.ids.tolist(), d.probs.tolist(), strict=True))


def check_well_formed(d: Distribution, n_vocab: int) -> None:
    assert d.ids.dtype == np.int64
    assert d.ids.shape == d.probs.shape
    assert len(d.ids) >= 1
    assert len(np.unique(d.ids)) == len(d.ids)
    assert np.all((d.ids >= 0) & (d.ids < n_vocab))
    assert d.probs.sum() == pytest.approx(1.0, abs=1e-12)
    assert np.all(d.probs >= 0)
    assert np.all(np.diff(d.probs) <= 0), "probabilities must be in descending order"


def reference(logits: np.ndarray, params: SamplingParams) -> dict[int, float]:
    """Straightforward re-statement of the documented pipeline (no repetition penalty)."""
    x = logits.astype(np.float64)
    order = np.argsort(-x, kind="stable")
    if 0 < params.top_k < len(x):
        order = order[: params.top_k]
    probs = special.softmax(x[order] / params.temperature)
    keep = len(probs)
    if params.top_p < 1.0:
        cum = np.cumsum(probs)
        keep = min(keep, next(i + 1 for i, c in enumerate(cum) if c >= params.top_p))
    if params.min_p > 0.0:
        keep = min(keep, int(np.sum(probs >= params.min_p * probs.max())))
    keep = max(keep, 1)
    kept = probs[:keep] / probs[:keep].sum()
    return dict(zip(order[:keep].tolist(), kept.tolist(), strict=True))


# ----------------------------------------------------------------------- greedy


def test_greedy_is_point_mass_at_argmax() -> None:
    rng = np.random.default_rng(0)
    for _ in range(50):
        logits = rng.normal(size=int(rng.integers(2, 50))).astype(np.float32)
        d = process(logits, SamplingParams(temperature=0.0))
        assert d.is_point
        assert d.ids.tolist() == [int(np.argmax(logits))]
        assert d.probs.tolist() == [1.0]
        assert d.prob(int(np.argmax(logits))) == 1.0


def test_greedy_ignores_truncation_settings() -> None:
    logits = np.array([0.1, 2.0, 1.9, -3.0], dtype=np.float32)
    for params in (
        SamplingParams(temperature=0.0, top_k=1),
        SamplingParams(temperature=0.0, top_k=0, top_p=0.01, min_p=0.99),
    ):
        assert process(logits, params).ids.tolist() == [1]


def test_repeat_penalty_moves_argmax_for_positive_logit() -> None:
    logits = np.array([1.0, 3.0, 2.5, -1.0], dtype=np.float32)
    assert process(logits, SamplingParams(temperature=0.0)).ids.tolist() == [1]
    params = SamplingParams(temperature=0.0, repeat_penalty=1.5)
    # 3.0 / 1.5 = 2.0 < 2.5
    assert process(logits, params, recent=[1]).ids.tolist() == [2]
    # a token not in recent is not penalised
    assert process(logits, params, recent=[0, 3]).ids.tolist() == [1]


def test_repeat_penalty_multiplies_negative_logits() -> None:
    logits = np.array([-1.0, -2.0, -1.2], dtype=np.float32)
    params = SamplingParams(temperature=0.0, repeat_penalty=1.5)
    assert process(logits, SamplingParams(temperature=0.0)).ids.tolist() == [0]
    # -1.0 * 1.5 = -1.5 < -1.2
    assert process(logits, params, recent=[0]).ids.tolist() == [2]


def test_repeat_penalty_window_and_off_switches() -> None:
    logits = np.array([1.0, 3.0, 2.5], dtype=np.float32)
    # only the last repeat_last_n tokens count
    windowed = SamplingParams(temperature=0.0, repeat_penalty=1.5, repeat_last_n=2)
    assert process(logits, windowed, recent=[1, 0, 0]).ids.tolist() == [1]
    assert process(logits, windowed, recent=[0, 1, 0]).ids.tolist() == [2]
    # repeat_last_n = 0 or penalty 1 turn it off
    no_window = SamplingParams(temperature=0.0, repeat_penalty=1.5, repeat_last_n=0)
    assert process(logits, no_window, recent=[1]).ids.tolist() == [1]
    assert process(logits, SamplingParams(temperature=0.0), recent=[1]).ids.tolist() == [1]


def test_penalise_values() -> None:
    logits = np.array([2.0, -2.0, 0.0, 4.0], dtype=np.float32)
    # duplicates count once; ids outside the vocabulary are ignored
    out = penalise(logits, [0, 1, 2, 0, 0, 17, -3], 2.0)
    assert out.tolist() == [1.0, -4.0, 0.0, 4.0]
    assert logits.tolist() == [2.0, -2.0, 0.0, 4.0]
    assert out.dtype == logits.dtype


def test_repeat_penalty_changes_sampled_distribution() -> None:
    logits = np.array([1.0, 2.0, 0.5], dtype=np.float32)
    params = plain(1.0, repeat_penalty=2.0)
    d = process(logits, params, recent=[1])
    expected = special.softmax(np.array([1.0, 1.0, 0.5]))
    got = d.dense(3)
    assert np.allclose(got, expected, rtol=0.0, atol=1e-12)


# ------------------------------------------------------------------- truncation


def test_top_k_keeps_the_k_largest() -> None:
    rng = np.random.default_rng(1)
    for _ in range(100):
        n_vocab = int(rng.integers(2, 60))
        logits = rng.permutation(n_vocab).astype(np.float32) * 0.3  # distinct values
        k = int(rng.integers(1, n_vocab + 3))
        d = process(logits, SamplingParams(temperature=1.0, top_k=k, top_p=1.0, min_p=0.0))
        check_well_formed(d, n_vocab)
        expect = min(k, n_vocab)
        assert len(d.ids) == expect
        assert set(d.ids.tolist()) == set(np.argsort(-logits)[:expect].tolist())
        # the probabilities are a softmax over the kept logits only
        kept = logits[d.ids].astype(np.float64)
        assert np.allclose(d.probs, special.softmax(kept), rtol=0.0, atol=1e-12)


def test_top_k_one_is_a_point_mass() -> None:
    logits = np.array([0.3, 1.7, -0.2, 1.6], dtype=np.float32)
    d = process(logits, SamplingParams(temperature=1.0, top_k=1, top_p=1.0, min_p=0.0))
    assert d.ids.tolist() == [1]
    assert d.probs.tolist() == [1.0]


@pytest.mark.parametrize(
    ("top_p", "expected"),
    [
        (0.3, {0: 1.0}),  # 0.4 already reaches 0.3
        (0.5, {0: 4 / 7, 1: 3 / 7}),  # 0.4 < 0.5 <= 0.7
        (0.75, {0: 4 / 9, 1: 3 / 9, 2: 2 / 9}),  # 0.7 < 0.75 <= 0.9
        (0.95, {0: 0.4, 1: 0.3, 2: 0.2, 3: 0.1}),  # 0.9 < 0.95
        (1.0, {0: 0.4, 1: 0.3, 2: 0.2, 3: 0.1}),
    ],
)
def test_top_p_hand_computed(top_p: float, expected: dict[int, float]) -> None:
    logits = logits_of([0.4, 0.3, 0.2, 0.1])
    d = process(logits, SamplingParams(temperature=1.0, top_k=0, top_p=top_p, min_p=0.0))
    check_well_formed(d, 4)
    assert as_dict(d) == pytest.approx(expected, abs=1e-6)


def test_top_p_hand_computed_shuffled_ids() -> None:
    # probabilities 0.1, 0.4, 0.2, 0.3 for ids 0..3; top_p 0.75 keeps ids 1, 3, 2
    logits = logits_of([0.1, 0.4, 0.2, 0.3])
    d = process(logits, SamplingParams(temperature=1.0, top_k=0, top_p=0.75, min_p=0.0))
    assert d.ids.tolist() == [1, 3, 2]
    assert d.probs == pytest.approx([4 / 9, 3 / 9, 2 / 9], abs=1e-6)


@pytest.mark.parametrize(
    ("min_p", "expected_ids"),
    [
        (0.2, [1, 3, 2, 0]),  # threshold 0.08: all of 0.4, 0.3, 0.2, 0.1 stay
        (0.3, [1, 3, 2]),  # threshold 0.12 drops 0.1
        (0.6, [1, 3]),  # threshold 0.24 drops 0.2
        (0.9, [1]),  # threshold 0.36 keeps only the top
    ],
)
def test_min_p_hand_computed(min_p: float, expected_ids: list[int]) -> None:
    probs = [0.1, 0.4, 0.2, 0.3]
    logits = logits_of(probs)
    d = process(logits, SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=min_p))
    check_well_formed(d, 4)
    assert d.ids.tolist() == expected_ids
    kept = np.array([probs[i] for i in expected_ids])
    assert d.probs == pytest.approx(kept / kept.sum(), abs=1e-6)


def test_min_p_drops_tokens_below_threshold_random() -> None:
    rng = np.random.default_rng(2)
    for _ in range(100):
        n_vocab = int(rng.integers(2, 40))
        logits = (rng.normal(size=n_vocab) * 2).astype(np.float32)
        min_p = float(rng.uniform(0.01, 0.99))
        d = process(logits, SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=min_p))
        check_well_formed(d, n_vocab)
        full = special.softmax(logits.astype(np.float64))
        expect = set(np.flatnonzero(full >= min_p * full.max()).tolist())
        # skip values too close to the threshold to call
        margin = np.abs(full - min_p * full.max()).min()
        if margin > 1e-9:
            assert set(d.ids.tolist()) == expect


def test_process_matches_reference_pipeline() -> None:
    rng = np.random.default_rng(3)
    for _ in range(300):
        n_vocab = int(rng.integers(2, 40))
        logits = (rng.normal(size=n_vocab) * rng.uniform(0.5, 4)).astype(np.float32)
        params = SamplingParams(
            temperature=float(rng.uniform(0.2, 2.5)),
            top_k=int(rng.choice([0, 1, 3, 10, 50])),
            top_p=float(rng.choice([1.0, rng.uniform(0.05, 1.0)])),
            min_p=float(rng.choice([0.0, rng.uniform(0.0, 0.5)])),
        )
        d = process(logits, params)
        check_well_formed(d, n_vocab)
        ref = reference(logits, params)
        got = as_dict(d)
        # (with these seeds no cumulative mass or ratio sits on a threshold)
        assert set(got) == set(ref), (params, got, ref)
        assert got == pytest.approx(ref, rel=1e-9, abs=1e-12)


def test_temperature_scaling_equals_softmax() -> None:
    rng = np.random.default_rng(4)
    for temperature in (0.05, 0.3, 0.7, 1.0, 1.5, 4.0, 100.0):
        logits = (rng.normal(size=32) * 3).astype(np.float32)
        d = process(logits, plain(temperature))
        check_well_formed(d, 32)
        assert len(d.ids) == 32
        expected = special.softmax(logits.astype(np.float64) / temperature)
        assert np.allclose(d.dense(32), expected, rtol=1e-10, atol=1e-15)
        assert d.ids.tolist() == np.argsort(-logits, kind="stable").tolist()


def test_tiny_temperature_is_nearly_greedy_and_finite() -> None:
    logits = np.array([1.0, 1.5, 1.49, -2.0], dtype=np.float32)
    d = process(logits, plain(1e-6))
    assert np.all(np.isfinite(d.probs))
    assert d.ids[0] == 1
    assert d.probs[0] == pytest.approx(1.0)


def test_masked_logits_are_never_kept_with_mass() -> None:
    logits = np.array([0.5, -np.inf, 1.0, -np.inf, 0.2], dtype=np.float32)
    for params in (
        SamplingParams(),
        plain(1.0),
        SamplingParams(temperature=1.0, top_k=4, top_p=1.0, min_p=0.0),
    ):
        d = process(logits, params)
        assert np.all(np.isfinite(d.probs))
        assert d.probs.sum() == pytest.approx(1.0)
        assert d.prob(1) == 0.0
        assert d.prob(3) == 0.0
        for u in np.linspace(0.0, 1.0, 101, endpoint=False):
            assert d.sample(float(u)) in (0, 2, 4)


def test_probabilities_sum_to_one_and_descend() -> None:
    rng = np.random.default_rng(5)
    for _ in range(200):
        n_vocab = int(rng.integers(1, 80))
        logits = (rng.normal(size=n_vocab) * 5).astype(np.float32)
        params = SamplingParams(
            temperature=float(rng.uniform(0.01, 3)),
            top_k=int(rng.integers(0, 100)),
            top_p=float(rng.uniform(0.01, 1.0)),
            min_p=float(rng.uniform(0.0, 0.99)),
            repeat_penalty=float(rng.uniform(0.5, 2)),
            repeat_last_n=int(rng.integers(0, 10)),
        )
        recent = rng.integers(0, n_vocab, size=int(rng.integers(0, 12))).tolist()
        check_well_formed(process(logits, params, recent), n_vocab)


def test_process_does_not_modify_its_input() -> None:
    rng = np.random.default_rng(6)
    logits = (rng.normal(size=40) * 2).astype(np.float32)
    before = logits.copy()
    logits.setflags(write=False)
    for params in (
        SamplingParams(),
        SamplingParams(temperature=0.0),
        SamplingParams(temperature=0.0, repeat_penalty=1.3),
        plain(1.0),
        SamplingParams(temperature=0.8, top_k=5, top_p=0.5, min_p=0.2, repeat_penalty=1.2),
    ):
        process(logits, params, recent=[0, 1, 2, 3, 39])
        process(logits, params)
        assert np.array_equal(logits, before)
    assert penalise(logits, [0, 1], 1.5).flags.writeable
    assert np.array_equal(logits, before)


# ------------------------------------------------------------------ validation


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"temperature": -0.1}, "temperature"),
        ({"temperature": float("nan")}, "temperature"),
        ({"top_k": -1}, "top-k"),
        ({"top_p": 0.0}, "top-p"),
        ({"top_p": -0.5}, "top-p"),
        ({"top_p": 1.01}, "top-p"),
        ({"top_p": float("nan")}, "top-p"),
        ({"min_p": 1.0}, "min-p"),
        ({"min_p": -0.01}, "min-p"),
        ({"min_p": float("nan")}, "min-p"),
        ({"repeat_penalty": 0.0}, "repetition penalty"),
        ({"repeat_penalty": -1.0}, "repetition penalty"),
        ({"repeat_penalty": float("nan")}, "repetition penalty"),
        ({"repeat_last_n": -1}, "repetition window"),
    ],
)
def test_params_validation(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SamplingParams(**kwargs)  # type: ignore[arg-type]


def test_params_validation_reports_every_problem() -> None:
    with pytest.raises(ValueError) as info:
        SamplingParams(temperature=-1, top_p=0.0, min_p=1.0)
    text = str(info.value)
    assert "temperature" in text
    assert "top-p" in text
    assert "min-p" in text


def test_params_valid_edges() -> None:
    SamplingParams(temperature=0.0, top_k=0, top_p=1.0, min_p=0.0, repeat_last_n=0)
    SamplingParams(top_p=1e-9, min_p=0.999, repeat_penalty=1e-3)
    assert SamplingParams(temperature=0.0).greedy
    assert not SamplingParams(temperature=1e-9).greedy


# ---------------------------------------------------------------- Distribution


def test_sample_inverse_cdf_edges() -> None:
    d = Distribution(np.array([7, 3, 9, 1]), np.array([0.1, 0.2, 0.3, 0.4]))
    assert d.sample(0.0) == 7
    assert d.sample(float(np.nextafter(1.0, 0.0))) == 1
    assert d.sample(0.0999) == 7
    assert d.sample(0.1001) == 3
    assert d.sample(0.2999) == 3
    assert d.sample(0.3001) == 9
    assert d.sample(0.5999) == 9
    assert d.sample(0.6001) == 1


def test_sample_skips_zero_probability_entries() -> None:
    d = Distribution(np.array([5, 6, 7, 8]), np.array([0.0, 0.5, 0.0, 0.5]))
    assert d.sample(0.0) == 6
    assert d.sample(0.4999) == 6
    assert d.sample(0.5) == 8
    assert d.sample(float(np.nextafter(1.0, 0.0))) == 8
    trailing = Distribution(np.array([5, 6, 7]), np.array([0.5, 0.5, 0.0]))
    assert trailing.sample(float(np.nextafter(1.0, 0.0))) == 6


def test_sample_point_mass() -> None:
    d = Distribution.point(42)
    assert d.is_point
    assert d.sample(0.0) == 42
    assert d.sample(0.999) == 42
    assert d.prob(42) == 1.0
    assert d.prob(41) == 0.0
    assert d.dense(44).tolist() == [0.0] * 42 + [1.0, 0.0]


def test_sample_chi_square() -> None:
    ids = np.array([4, 0, 2, 9, 5, 1])
    probs = np.array([0.05, 0.3, 0.15, 0.25, 0.1, 0.15])
    d = Distribution(ids, probs)
    u = np.random.default_rng(8).random(20_000)
    draws = [d.sample(float(v)) for v in u]
    counts = np.array([draws.count(int(i)) for i in ids])
    assert counts.sum() == len(u)
    assert stats.chisquare(counts, probs * len(u)).pvalue > 1e-3


def test_prob_and_dense() -> None:
    d = Distribution(np.array([3, 0, 5]), np.array([0.5, 0.25, 0.25]))
    assert d.prob(3) == 0.5
    assert d.prob(0) == 0.25
    assert d.prob(4) == 0.0
    assert d.dense(6).tolist() == [0.25, 0.0, 0.0, 0.5, 0.0, 0.25]
    assert not d.is_point
