"""The thread count that follows the load: the rule (``next_threads``), its
bookkeeping (``ThreadCount``), the costs the policy prices at each count,
and the figures that refuse a baseline timed on other threads.

Loads are other programs' cores, as ``LoadSampler`` reads them every 0.25 s.
"""

from __future__ import annotations

import pytest

from gambit.engine.estimates import CostModel
from gambit.engine.gamma.controller import GammaController
from gambit.engine.gamma.controller_learning import RoundLearning
from gambit.engine.gamma.metrics import MetricsTracker
from gambit.engine.machine.threads import (
    CONTENDED,
    DOWN_READINGS,
    UP_READINGS,
    LoadSampler,
    ThreadCount,
    next_threads,
)
from gambit.engine.text.reply import Round

QUIET = 0.02
# What a loop busy all the time, three quarters, half and a quarter of it reads beside 2
# spinning threads on 2 cores, and beside 1 (measured: gambit.engine.machine.threads).
BUSY_BESIDE_2, THREE_QUARTERS_BESIDE_2, HALF_BESIDE_2, QUARTER_BESIDE_2 = 0.74, 0.46, 0.36, 0.20
BUSY_BESIDE_1, THREE_QUARTERS_BESIDE_1, HALF_BESIDE_1, QUARTER_BESIDE_1 = 1.0, 0.73, 0.50, 0.26


def test_a_quiet_machine_keeps_every_thread() -> None:
    assert next_threads([QUIET] * 8, current=2, most=2, cores=2) == 2


def test_a_busy_core_takes_a_thread_within_three_readings_a_spike_does_not() -> None:
    assert DOWN_READINGS == 3
    busy = BUSY_BESIDE_2
    assert next_threads([busy, busy], current=2, most=2, cores=2) == 2  # too soon
    assert next_threads([QUIET, QUIET, busy], current=2, most=2, cores=2) == 2  # a spike
    assert next_threads([QUIET, busy, busy], current=2, most=2, cores=2) == 1
    assert next_threads([0.60, 0.62, 0.58], current=2, most=2, cores=2) == 1  # its low readings


def test_a_quarter_of_a_core_keeps_both_threads_half_a_core_takes_one() -> None:
    """A quarter busy: 2 threads always faster (73-120 against 49-89 tok/s);
    half: 1 thread made 0.79-1.26 of 2 threads' rate, and it does not flip."""
    assert next_threads([QUARTER_BESIDE_2] * 6, current=2, most=2, cores=2) == 2
    assert next_threads([QUARTER_BESIDE_1] * 4, current=1, most=2, cores=2) == 2
    assert next_threads([HALF_BESIDE_2] * 3, current=2, most=2, cores=2) == 1
    assert next_threads([HALF_BESIDE_1] * 6, current=1, most=2, cores=2) == 1


def test_a_thread_comes_back_once_the_last_second_averages_a_lighter_load() -> None:
    assert UP_READINGS == 4
    busy = [BUSY_BESIDE_1] * 4
    assert next_threads([*busy, QUIET, QUIET], current=1, most=2, cores=2) == 1
    assert next_threads([*busy, QUIET, QUIET, QUIET], current=1, most=2, cores=2) == 2
    assert next_threads(busy * 2, current=1, most=2, cores=2) == 1


def test_three_quarters_of_a_core_takes_a_thread_and_keeps_it() -> None:
    """1 thread is faster there (70 / 63 tok/s, the cost-scaled target 7.3 / 5.8)."""
    assert next_threads([THREE_QUARTERS_BESIDE_2] * 3, current=2, most=2, cores=2) == 1
    for _ in range(6):
        assert next_threads([THREE_QUARTERS_BESIDE_1] * 4, current=1, most=2, cores=2) == 1


def test_a_load_between_the_thresholds_does_not_flap() -> None:
    """A load of ~0.4 of a core: beside 2 threads it reads under DOWN_FROM,
    beside 1 above UP_BELOW, so neither count moves."""
    for current, reading in ((2, 0.4 * CONTENDED), (1, 0.4)):
        count = current
        for _ in range(6):
            count = next_threads([reading] * 4, count, most=2, cores=2)
        assert count == current


def test_never_more_than_the_idle_count_nor_fewer_than_one() -> None:
    # 8 logical cores, 4 threads on an idle machine (uncontended): 3 busy leave 4.
    assert next_threads([3.0] * 3, current=4, most=4, cores=8) == 4
    assert next_threads([5.0] * 3, current=4, most=4, cores=8) == 3
    assert next_threads([2.0] * 3, current=2, most=2, cores=2) == 1
    assert next_threads([QUIET] * 4, current=1, most=4, cores=8) == 4


class ScriptedLoad(LoadSampler):
    """A sampler that reads the loads it is given instead of the machine's."""

    def __init__(self, loads: list[list[float]], cores: int = 2) -> None:
        super().__init__()
        self.cores = cores
        self.loads = loads

    def start(self) -> None:
        pass  # (nothing to read: the loads are given)

    def readings(self) -> list[float]:
        return self.loads.pop(0) if self.loads else []


class Runtime:
    """What ThreadCount drives: a runtime's thread count."""

    def __init__(self) -> None:
        self.n_threads = 2
        self.process_id: int | None = None

    def set_threads(self, n: int) -> None:
        self.n_threads = n


def test_thread_count_sets_both_runtimes_and_says_why() -> None:
    target, draft = Runtime(), Runtime()
    sampler = ScriptedLoad([[QUIET] * 3, [BUSY_BESIDE_2] * 3])
    threads = ThreadCount(0, [target, draft], sampler)
    assert not threads.follow()
    assert threads.choice.describe() == "2 threads (automatic: other programs use 0.0 of 2 cores)"
    assert threads.follow()
    assert (target.n_threads, draft.n_threads, threads.current) == (1, 1, 1)
    assert threads.choice.describe() == (
        "1 of 2 threads (automatic: other programs use 0.7 of 2 cores)"
    )


def test_a_count_set_by_hand_or_an_f16_cache_mid_reply_does_not_move() -> None:
    busy = [[BUSY_BESIDE_2] * 3] * 3
    fixed = ThreadCount(2, [Runtime()], ScriptedLoad(list(busy)))
    assert not fixed.follow() and fixed.current == 2
    assert fixed.choice.describe() == "2 threads (as set)"
    f16 = ThreadCount(0, [Runtime()], ScriptedLoad(list(busy)), mid_reply=False)
    assert not f16.follow()  # between two rounds: the logits depend on the count
    assert f16.follow(reply_start=True) and f16.current == 1


def costs(t1: float) -> CostModel:
    c = CostModel(9)
    for k in range(1, 10):
        c.set_target(k, t1 * (1 + 0.2 * (k - 1)))
    c.t_draft = 0.1 * t1
    return c


def test_rounds_on_a_new_count_are_priced_from_the_old_scaled_then_their_own() -> None:
    learned = RoundLearning(costs(0.010), gamma_max=8)
    two = learned.costs
    learned.at_threads(1, was=2)
    assert learned.costs is not two
    assert learned.costs.t1 == pytest.approx(0.020)  # the work of 2 threads on 1
    assert learned.costs.verify_cost(5) / learned.costs.t1 == pytest.approx(1.8)
    learned.costs.observe_plain_step(0.030)
    one = learned.costs
    learned.at_threads(2, was=1)
    assert learned.costs is two and two.t1 == pytest.approx(0.010)  # untouched meanwhile
    learned.at_threads(1, was=2)
    assert learned.costs is one  # what was measured on 1 thread, not scaled again
    assert learned.costs_by_threads(1) == {2: two, 1: one}


def test_the_controller_takes_a_stored_count_and_decides_again() -> None:
    stored = costs(0.015)
    controller = GammaController(
        costs(0.010), gamma_max=8, threads=2, stored_costs=lambda n: stored if n == 1 else None
    )
    controller.at_threads(1)
    assert controller.threads == 1 and controller.costs is stored
    assert controller.baseline_tokens_per_s == pytest.approx(1 / 0.015)


def a_round(threads: int, n_drafted: int = 4, n_accepted: int = 3) -> Round:
    return Round(
        index=0, tokens=tuple(range(n_accepted + 1)), text="", gamma=n_drafted,
        n_drafted=n_drafted, n_accepted=n_accepted, outcomes=(True,) * n_accepted + (False,),
        t_draft_s=0.001, t_verify_s=0.01, elapsed_s=0.1, threads=threads,
    )  # fmt: skip


def tracker(*counts: int) -> MetricsTracker:
    t = MetricsTracker()
    for n in counts:
        t.add(a_round(n))
    return t


def test_a_speedup_only_against_plain_decoding_on_the_same_threads() -> None:
    same = tracker(2, 2).snapshot(50.0, baseline_threads=2)
    assert same.speedup is not None and same.speedup_withheld is None
    other = tracker(1, 1).snapshot(50.0, baseline_threads=2)
    assert other.speedup is None and other.baseline_tokens_per_s == 0.0
    assert other.speedup_withheld is not None and "timed on 2 threads" in other.speedup_withheld
    changed = tracker(2, 1).snapshot(50.0, baseline_threads=1)
    assert changed.speedup is None
    assert changed.speedup_withheld is not None and "threads 2 → 1" in changed.speedup_withheld
    none_yet = tracker(1).snapshot(0.0, baseline_threads=1)
    assert none_yet.speedup_withheld == (
        "plain decoding not timed on 1 thread yet: at the reply's end"
    )


def test_a_reply_that_drafted_nothing_is_its_own_baseline_on_any_threads() -> None:
    t = MetricsTracker()
    for n in (2, 1):
        t.add(a_round(n, n_drafted=0, n_accepted=0))
    s = t.snapshot(50.0, baseline_threads=2)
    assert s.speedup is None and s.speedup_withheld is None
    assert s.baseline_tokens_per_s == s.tokens_per_s
