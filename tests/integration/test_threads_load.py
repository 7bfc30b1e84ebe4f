"""The thread count follows the load on the real llama.cpp: a busy loop beside
a reply takes a thread, its end gives it back, greedy replies stay the
target's own while the count changes between rounds, and the load bench
runs each setting under a real background load.

No clock is read: the tests watch the thread count each round reports.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_lossless import _prompt, _reply, plain_reply

from gambit.cli.main import main
from gambit.engine.decoder import SpeculativeDecoder
from gambit.engine.drafters.draft_model import DraftModelDrafter
from gambit.engine.gamma.policy import FixedGamma
from gambit.engine.machine.runtime import ModelRuntime, RuntimeOptions
from gambit.engine.machine.threads import (
    LoadSampler,
    ThreadCount,
    default_threads,
    load_sampler,
)
from gambit.engine.session import Engine, EngineConfig
from gambit.engine.text.reply import GenerationConfig
from gambit.engine.verification.sampling import SamplingParams
from gambit.storage.paths import cache_dir

GREEDY = GenerationConfig(max_tokens=120, sampling=SamplingParams(temperature=0.0))


class EveryRound(LoadSampler):
    """Loads that call for the other count at every round: one core busy, then none."""

    def __init__(self) -> None:
        super().__init__()
        self.cores = 2
        self._busy = False

    def start(self) -> None:
        pass  # (nothing to read: the loads are given)

    def readings(self) -> list[float]:
        self._busy = not self._busy
        return [1.0] * 4 if self._busy else [0.0] * 4


@pytest.fixture
def restored(rt_q8_0: ModelRuntime, rt_q4_1: ModelRuntime) -> Iterator[None]:
    yield
    for rt in (rt_q8_0, rt_q4_1):  # (shared by the session's tests, at 2 threads)
        rt.set_threads(2)


@pytest.mark.usefixtures("restored")
def test_greedy_reply_is_the_targets_own_while_the_count_changes_every_round(
    rt_q8_0: ModelRuntime, rt_q4_1: ModelRuntime
) -> None:
    """Past 256 cells of context too, where an F16 cache's attention would
    depend on the count: the exact kernels' Q8_0 cache does not."""
    passage = " ".join(f"Item {i}: the box on shelf {i % 7} is {i * 3} cm wide." for i in range(12))
    prompt = _prompt(rt_q8_0, f"Repeat this list exactly:\n{passage}")
    expected = plain_reply(rt_q8_0, prompt, GREEDY)
    assert len(prompt) + len(expected) > 300
    threads = ThreadCount(0, [rt_q8_0, rt_q4_1], EveryRound())
    decoder = SpeculativeDecoder(rt_q8_0, DraftModelDrafter(rt_q4_1), FixedGamma(4), threads)
    rounds = list(decoder.generate(prompt, GREEDY))
    assert [t for r in rounds for t in r.tokens] == expected
    assert {r.threads for r in rounds} == {1, 2}
    assert sum(r.n_accepted for r in rounds) > 0
    # and plain decoding on 1 thread is plain decoding on 2
    rt_q8_0.set_threads(1)
    assert _reply(SpeculativeDecoder(rt_q8_0), prompt, GREEDY) == expected


def busy_loop() -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", "while True: pass"])


def test_a_busy_loop_started_mid_reply_takes_a_thread_and_gives_it_back(
    q4_1_first8: Path,
) -> None:
    """Replies stream while the test moves through three phases, each ended by
    the count the rounds report: quiet until a round runs on every thread
    (what ran before this test may have left a load), then a busy loop until a
    round runs on one fewer, then quiet again until a round runs on every
    thread. Each phase is bounded by rounds, far above what it takes."""
    engine = Engine(
        EngineConfig(
            target=q4_1_first8,
            target_options=RuntimeOptions(n_ctx=512, n_threads=0),
            kernel_cache=cache_dir(),
        )
    )
    config = GenerationConfig(max_tokens=400, sampling=SamplingParams(temperature=0.0))
    most = engine.threads.most
    phases = [most, most - 1, most]  # the count that ends each phase
    loop: subprocess.Popen[bytes] | None = None
    described = ""

    def rounds() -> Iterator[int]:
        for _ in range(200):
            for rnd in engine.complete("Once upon a time", config):
                yield rnd.threads

    if most < 2:
        engine.close()
        pytest.skip("one core: no thread to give up")
    counts = rounds()
    try:
        assert engine.threads.auto
        for threads in counts:
            if threads != phases[0]:
                continue
            phases.pop(0)
            if not phases:
                break
            if loop is None:
                loop = busy_loop()  # a round ran on every thread: the load starts
            else:
                described = engine.threads.choice.describe()
                loop.kill()  # a round ran on one fewer: the load ends
                loop.wait()
    finally:
        counts.close()  # (the reply it was in ends here)
        if loop is not None and loop.poll() is None:
            loop.kill()
            loop.wait()
        engine.close()
    assert not phases, f"no round ran on {phases[0]} threads"
    assert described.startswith(f"{most - 1} of {most} threads (automatic: other programs use")


def test_bench_under_a_busy_core_runs_auto_on_the_cores_left_and_each_fixed_count(
    q8_0_first8: Path, q4_1_first8: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(json.dumps({"prompt": "Name three colours.", "suite": "chat"}) + "\n")
    args = ["bench", "--load", "none,busy", "--prompts", prompts, "--target", q8_0_first8,
            "--draft", q4_1_first8, "--max-tokens", "12", "--json"]  # fmt: skip
    # Another program's load that ends as the bench starts: its quiet phase
    # waits for the automatic count to follow (it ran on what came before).
    load_sampler().start()
    loop = busy_loop()
    time.sleep(1.5)
    loop.kill()
    loop.wait()
    assert main([str(a) for a in args]) == 0
    report = json.loads(capsys.readouterr().out)
    most = default_threads()
    settings = ["auto", *map(str, range(1, most + 1))]
    for load in ("none", "busy"):
        assert set(report[load]) == {"target-only", "adaptive"}
        for row in report[load].values():
            assert list(row["tokens_per_s"]) == settings
            assert all(rate > 0 for rate in row["tokens_per_s"].values())
            assert row["auto_over_best"] > 0 and row["auto_over_best_worst_prompt"] > 0
    # (quiet: every thread, after whatever load the sampler saw just before the run)
    assert most in report["none"]["target-only"]["auto_threads"]
    if most > 1:  # one core busy all along: automatic runs on the others
        assert report["busy"]["target-only"]["auto_threads"] == [most - 1]
    adaptive = report["none"]["adaptive"]
    assert adaptive["shown_over_measured"] is not None or adaptive["speedup_withheld"]


def test_a_child_counted_as_ours_is_not_another_programs_load() -> None:
    """A target split over workers decodes in a child process (target_host):
    its threads are Gambit's, and a busy one must not take a thread away."""
    sampler = LoadSampler()
    ours, theirs = busy_loop(), busy_loop()
    try:
        sampler.count_as_ours(ours.pid)
        sampler.readings()  # (starts it)
        while len(sampler.readings()) < 4:
            time.sleep(0.1)
        loads = sampler.readings()
    finally:
        for loop in (ours, theirs):
            loop.kill()
            loop.wait()
    # Two busy loops on the machine, one of them ours: about one core is theirs.
    assert all(0.5 < load < 1.5 for load in loads[1:]), loads
