"""The ceiling on what lookup's copies add to a draft model, on scripted replies."""

from __future__ import annotations

import pytest

from gambit.bench.foresight import ReplyRuns, copy_runs, foresight_seconds, lookup_ceiling, runs_of
from gambit.engine.estimates import CostModel

T1 = 0.010
DRAFT = 0.12  # a draft step / t1
CATCH_UP = 0.05  # a token the draft model reads after a copy / t1


def costs(slope: float = 0.1) -> CostModel:
    c = CostModel(17)
    for k in range(1, 18):
        c.set_target(k, T1 * (1 + slope * (k - 1)))
    c.draft_ratio = DRAFT
    c.catch_up_ratio = CATCH_UP
    return c


def test_runs_count_the_hits_in_a_row_from_each_position() -> None:
    assert runs_of([True, True, False, True]) == (2, 1, 0, 1)
    assert runs_of([]) == ()


def test_copies_that_never_land_leave_the_ceiling_at_one() -> None:
    runs = ReplyRuns(model=runs_of([True] * 40), copy=(0,) * 40)
    assert lookup_ceiling(runs, costs(), 16) == 1.0


def test_a_copy_saves_the_draft_steps_the_model_would_have_spent() -> None:
    # 17 tokens that both the draft model and a copy get right: one round
    # either way, 16 draft steps against reading 17 copied tokens.
    runs = ReplyRuns(model=runs_of([True] * 17), copy=tuple(min(16, 17 - i) for i in range(17)))
    c = costs()
    alone = c.round_cost(16, 17)
    assert foresight_seconds(runs, c, 16, copies=False) == pytest.approx(alone)
    copied = c.verify_cost(17) + 17 * CATCH_UP * T1
    assert foresight_seconds(runs, c, 16) == pytest.approx(copied)
    assert lookup_ceiling(runs, c, 16) == pytest.approx(alone / copied)


def test_where_the_model_misses_a_copy_beats_plain_steps() -> None:
    # The draft model gets nothing right: alone, plain steps are best (a
    # round still costs its drafting); the copy lands 8 tokens, then plain.
    n = 12
    runs = ReplyRuns(model=(0,) * n, copy=(8,) + (0,) * (n - 1))
    c = costs()
    assert foresight_seconds(runs, c, 16, copies=False) == pytest.approx(n * T1)
    copied = c.verify_cost(9) + 9 * CATCH_UP * T1 + (n - 9) * T1
    assert foresight_seconds(runs, c, 16) == pytest.approx(copied)


def test_copy_runs_follow_lookup_through_the_reply() -> None:
    # The prompt's "5 6" was followed by "7 8 9": the reply repeats that,
    # then strays; after "9 1" nothing in the context matches.
    prompt = [5, 6, 7, 8, 9, 4, 5, 6]
    reply = [7, 8, 9, 1, 2]
    assert copy_runs(prompt, reply, 16) == (3, 2, 1, 0, 0)
    assert copy_runs(prompt, reply, 2) == (2, 2, 1, 0, 0)
