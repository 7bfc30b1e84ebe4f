"""Choosing kernels from probe results: pure rules, hand-built results."""

from __future__ import annotations

from gambit.engine.machine.kernels import (
    EXACT,
    LLAMA_DEFAULT,
    KernelChoice,
    KernelConfig,
    KernelVerdict,
    ProbeResult,
    implied_kernels,
)

REPACK_Q8 = KernelConfig(repack=True, kv_type="q8_0")
PLAIN_F16 = KernelConfig(repack=False, kv_type="f16")


def ok(config: KernelConfig, cost: float, diff: float = 0.0, flips: int = 0) -> ProbeResult:
    return ProbeResult(config, True, t1_s=cost / 2, tk_s=cost / 2, k_max=9, max_diff=diff,
                       argmax_flips=flips)  # fmt: skip


def crashed(config: KernelConfig) -> ProbeResult:
    return ProbeResult(config, False, error="crashed (SIGSEGV)")


def test_fastest_skips_configurations_that_crashed() -> None:
    v = KernelVerdict((ok(EXACT, 10.0), crashed(LLAMA_DEFAULT), ok(PLAIN_F16, 8.0, diff=0.5)))
    assert v.fastest() == PLAIN_F16
    assert not v.usable(LLAMA_DEFAULT)
    assert v.usable(EXACT)


def test_exact_prefers_batch_invariant_over_faster() -> None:
    v = KernelVerdict((ok(EXACT, 10.0), ok(REPACK_Q8, 7.0), ok(LLAMA_DEFAULT, 5.0, diff=0.8)))
    assert v.exact() == REPACK_Q8
    assert v.fastest() == LLAMA_DEFAULT


def test_exact_stays_on_exact_within_the_noise_margin() -> None:
    v = KernelVerdict((ok(EXACT, 10.0), ok(REPACK_Q8, 9.8)))
    assert v.exact() == EXACT
    assert v.fastest() == EXACT


def test_without_an_invariant_survivor_exact_takes_the_fewest_flips() -> None:
    v = KernelVerdict(
        (ok(EXACT, 10.0, diff=0.2, flips=1), ok(PLAIN_F16, 9.0, diff=0.03), crashed(REPACK_Q8))
    )
    assert v.exact() == PLAIN_F16


def test_nothing_ran_falls_back_to_exact() -> None:
    v = KernelVerdict(tuple(crashed(c) for c in (EXACT, LLAMA_DEFAULT)))
    assert v.exact() == EXACT and v.fastest() == EXACT


def test_verdict_round_trips_through_json() -> None:
    v = KernelVerdict((ok(EXACT, 10.0), crashed(LLAMA_DEFAULT)))
    assert KernelVerdict.from_json(v.to_json()) == v


def test_choice_names_what_it_gives_up_and_what_was_refused() -> None:
    v = KernelVerdict((ok(EXACT, 10.0), ok(PLAIN_F16, 5.0, diff=0.5, flips=1), crashed(REPACK_Q8)))
    text = KernelChoice(PLAIN_F16, "fast", v).describe()
    assert "not batch-invariant" in text and "1 greedy flip" in text
    refused = "not used on this CPU: repacked weights, Q8_0 KV cache (llama.cpp's kernels fail here"
    assert refused in text
    assert (
        "batch-invariant: greedy output as plain decoding"
        in KernelChoice(EXACT, "exact", v).describe()
    )


def test_the_exact_setting_implies_the_kernels_and_their_kv_cache_type() -> None:
    # The one rule the runtime loads with and the models dialog estimates memory by.
    assert implied_kernels(True) == EXACT and implied_kernels(True).kv_type == "q8_0"
    assert implied_kernels(False) == LLAMA_DEFAULT and implied_kernels(False).kv_type == "f16"
