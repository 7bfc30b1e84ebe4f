"""Timing a round's parts alone at a reply's context, on real models."""

from __future__ import annotations

import pytest

from gambit.bench.parts import time_parts
from gambit.engine.machine.runtime import ModelRuntime


def test_parts_are_timed_on_top_of_the_context(
    rt_q8_0: ModelRuntime, rt_q4_1: ModelRuntime
) -> None:
    context = rt_q8_0.tokenize("The parts of a round are timed where the round ran. " * 6)
    parts = time_parts(rt_q8_0, rt_q4_1, context, (1, 5), repeats=3)
    assert sorted(parts.target) == [1, 5]
    assert all(len(samples) == 1 and samples[0] > 0 for samples in parts.target.values())
    assert len(parts.draft) == 1 and parts.draft[0] > 0
    # Both caches are left on the context (but its last token), as a round finds them.
    assert rt_q8_0.kv_tokens == context[:-1]
    assert rt_q4_1.kv_tokens == context[:-1]
    costs = parts.cost_model(9)
    assert costs is not None
    assert costs.verify_cost(1) == pytest.approx(parts.target[1][0])
    # (the curve is made non-decreasing: a batch of 5 timed below one token,
    # as it can be on a fast CPU, reads t(1))
    t1, t5 = parts.target[1][0], parts.target[5][0]
    assert costs.verify_cost(5) == pytest.approx(max(t1, t5))
    assert costs.t_draft == pytest.approx(parts.draft[0])  # (kept as a ratio to t1)


def test_a_short_context_times_the_batch_it_has(rt_q8_0: ModelRuntime) -> None:
    context = rt_q8_0.tokenize("Hi there", add_special=False)[:3]
    parts = time_parts(rt_q8_0, None, context, (9,), repeats=1)
    assert list(parts.target) == [len(context)]
    assert parts.draft == []
