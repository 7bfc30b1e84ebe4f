"""The kernel probe on real weights, in real child processes: a configuration
that crashes or hangs is marked unusable and the others are still measured."""

from __future__ import annotations

import sys
from pathlib import Path

from gambit.engine.machine.kernels import CANDIDATES, EXACT, KernelConfig, KernelProbe
from gambit.engine.session import Engine, EngineConfig

TEST_THREADS = 2

# The real probe child, except that one named configuration misbehaves the way
# a broken native kernel does: it kills the process by a signal, or never returns.
MISBEHAVING_CHILD = """
import os, signal, sys, time
from gambit.engine.machine import kernel_child as kernels
how, bad = sys.argv[1], sys.argv[2]
real = kernels.measure
def measure(model, config, *args):
    if config.key == bad:
        if how == "crash":
            os.kill(os.getpid(), signal.SIGSEGV)
        time.sleep(3600)
    return real(model, config, *args)
kernels.measure = measure
sys.exit(kernels.child_main(sys.argv[3:]))
"""

REPACK_Q8 = KernelConfig(repack=True, kv_type="q8_0")


def _probe(how: str, bad: KernelConfig, timeout_s: float = 120.0) -> KernelProbe:
    return KernelProbe(
        None, timeout_s=timeout_s, command=[sys.executable, "-c", MISBEHAVING_CHILD, how, bad.key]
    )


def test_probe_measures_every_configuration(smol_q8_0: Path) -> None:
    verdict = KernelProbe(None).verdict(smol_q8_0, TEST_THREADS, 0, 5)
    assert [r.config for r in verdict.results] == list(CANDIDATES)
    exact = verdict.result(EXACT)
    assert exact is not None and exact.ok and exact.t1_s > 0 and exact.tk_s > 0
    # A repacked twin is measured unless its weights landed where the plain load's did.
    for r in verdict.results:
        plain = verdict.result(KernelConfig(repack=False, kv_type=r.config.kv_type))
        assert plain is not None
        if r.config.repack and r.ok:
            assert bool(r.same_as) == (r.weight_buffers == plain.weight_buffers)
    # A Q8_0 KV cache with plain weights keeps batched logits identical (docs/adr/0001).
    assert exact.batch_invariant
    assert verdict.exact() in {r.config for r in verdict.results if r.batch_invariant}


def test_a_repacking_load_that_repacks_nothing_is_not_measured_twice(smol_f32: Path) -> None:
    # llama.cpp's CPU backend has no repacked kernels for F32 weights: a
    # repacking load puts them in the same buffers as a plain one, so the
    # probe measures each KV type once and the repacking twin stands for it.
    verdict = KernelProbe(None).verdict(smol_f32, TEST_THREADS, 0, 5)
    assert [r.config for r in verdict.results] == list(CANDIDATES)
    for kv in ("q8_0", "f16"):
        plain = verdict.result(KernelConfig(repack=False, kv_type=kv))
        twin = verdict.result(KernelConfig(repack=True, kv_type=kv))
        assert plain is not None and plain.ok and not plain.same_as
        assert plain.weight_buffers  # the load's log said where the weights went
        assert twin is not None and twin.same_as == plain.config.key
        assert (twin.t1_s, twin.tk_s, twin.max_diff) == (plain.t1_s, plain.tk_s, plain.max_diff)
    # Equal figures: the plain configuration of each pair is the one chosen.
    assert not verdict.exact().repack and not verdict.fastest().repack


def test_a_configuration_that_crashes_is_refused_and_the_rest_measured(smol_q8_0: Path) -> None:
    verdict = _probe("crash", REPACK_Q8).verdict(smol_q8_0, TEST_THREADS, 0, 5)
    bad = verdict.result(REPACK_Q8)
    assert bad is not None and not bad.ok and bad.error == "crashed (SIGSEGV)"
    # Every other configuration was still tried, in a new child: each has its
    # own result (on AVX-512 + AMX CPUs the other repacked one crashes for real
    # in llama.cpp's AMX kernels, by SIGILL or SIGSEGV as the CPU has it), and
    # the plain ones were measured.
    others = [r for r in verdict.results if r.config != REPACK_Q8]
    assert [r.config for r in others] == [c for c in CANDIDATES if c != REPACK_Q8]
    for r in others:
        assert r.ok or (r.config.repack and r.error.startswith("crashed (SIG")), r
    exact = verdict.result(EXACT)
    assert exact is not None and exact.ok and exact.t1_s > 0
    assert REPACK_Q8 not in (verdict.exact(), verdict.fastest())


def test_a_configuration_that_hangs_is_refused(smol_q8_0: Path) -> None:
    # EXACT first: the child that hangs on the next one is killed, and what it
    # had finished before (read from its output so far) is kept. (The child
    # gets 4 s a configuration, 8 s in all, start-up included: EXACT's part
    # takes about a second here.)
    probe = _probe("hang", REPACK_Q8, timeout_s=4.0)
    verdict = probe.verdict(smol_q8_0, TEST_THREADS, 0, 3, configs=(EXACT, REPACK_Q8))
    bad = verdict.result(REPACK_Q8)
    assert bad is not None and not bad.ok and bad.error.startswith("hung")
    exact = verdict.result(EXACT)
    assert exact is not None and exact.ok and exact.t1_s > 0


def test_verdict_is_cached_on_disk_per_file(smol_q8_0: Path, tmp_path: Path) -> None:
    first = KernelProbe(tmp_path).verdict(smol_q8_0, TEST_THREADS, 0, 5)
    assert (tmp_path / "kernels.json").is_file()
    KernelProbe._memory.clear()  # a new process: only the file remembers
    # A child that would crash on everything proves the cache answered.
    again = _probe("crash", EXACT)
    again.cache_dir = tmp_path
    assert again.verdict(smol_q8_0, TEST_THREADS, 0, 5) == first


def test_engine_runs_the_chosen_kernels_and_says_so(smol_q8_0: Path, smol_q4_1: Path) -> None:
    engine = Engine(EngineConfig(target=smol_q8_0, drafter="draft", draft=smol_q4_1))
    try:
        assert engine.target_kernels.verdict is not None
        assert engine.target.kernels == engine.target_kernels.config
        assert engine.target_kernels.config == engine.target_kernels.verdict.exact()
        assert engine.draft_kernels is not None and engine.draft_runtime is not None
        assert engine.draft_runtime.kernels == engine.draft_kernels.verdict.fastest()  # type: ignore[union-attr]
        assert "KV cache" in engine.target_kernels.describe()
    finally:
        engine.close()
