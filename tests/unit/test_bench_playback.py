"""The γ policies played on recorded replies (``gambit.bench.playback``): the
arithmetic of each round, what a recording holds, and that it plays the same
every time."""

from __future__ import annotations

import json

import pytest

from gambit.bench.playback import (
    SESSIONS,
    PlayedReply,
    RecordedReply,
    Recording,
    figures,
    play,
    play_orders,
    play_policies,
    play_report,
    scaled,
)
from gambit.engine.estimates import CostModel
from gambit.engine.gamma.controller import GammaController

T1 = 0.080
SLOPE = 0.13  # a batch of k tokens: 1 + 0.13 (k - 1) steps (F32 ×4 on the Xeon)
STEP = 0.12  # a draft step, in target steps
EXTRA = 0.1  # a round's catch-up beyond one step, in target steps
READ = 0.02  # a prompt token read, in target steps


def pair_costs() -> CostModel:
    c = CostModel(17)
    for k in range(1, 18):
        c.set_target(k, T1 * (1 + SLOPE * (k - 1)))
    c.t_draft = STEP * T1
    c.draft_extra_ratio = EXTRA
    c.catch_up_ratio = READ
    return c


def reply(runs: list[int], n_prompt: int = 50, label: str = "chat #1") -> RecordedReply:
    return RecordedReply(label, n_prompt, tuple(runs), (0.99,) * len(runs))


def guessed_all(n: int) -> RecordedReply:
    """A reply the draft guesses from every position to its end."""
    return reply([n - i for i in range(n)])


def through_text(n: int, chain: int) -> RecordedReply:
    """A reply a draft through text guesses from every position, its chain
    there ``chain`` tokens long (its text ran out, or γ_max was reached)."""
    chains: tuple[tuple[float, ...], ...] = ((), *((0.9,) * min(chain, n - i) for i in range(1, n)))
    runs = tuple(len(c) for c in chains)
    return RecordedReply("prose #1", 50, runs, tuple(c[0] if c else 0.0 for c in chains), chains)


def recording(*replies: RecordedReply) -> Recording:
    return Recording("F32 ×4 + draft", "draft model", 16, pair_costs().to_json(), None, replies)


def test_a_fixed_gamma_round_costs_its_steps_its_extra_and_its_batch() -> None:
    costs = pair_costs()
    fixed = GammaController(pair_costs(), mode="fixed", fixed_gamma=4, gamma_max=16)
    played = play(guessed_all(41), fixed)  # 40 tokens after the first: 8 rounds of 5
    rounds = 8
    per_round = 4 * STEP * T1 + EXTRA * T1 + costs.verify_cost(5)
    assert played.tokens == 40
    assert played.decoding == pytest.approx(rounds * per_round)
    assert played.reading == pytest.approx(50 * READ * T1)  # a fixed γ always reads
    assert played.speedup(T1, after_first_token=False) == pytest.approx(40 * T1 / (8 * per_round))


def test_a_draft_that_never_lands_costs_fixed_gamma_and_the_adaptive_policy_switches_off() -> None:
    never = reply([0] * 129)
    by = play_policies(recording(never, never, never))
    rates = {name: [p.speedup(T1, after_first_token=False) for p in ps] for name, ps in by.items()}
    assert rates["target-only"] == pytest.approx([1.0] * 3)
    assert max(rates["fixed=4"]) < 0.7  # each round: four steps and a batch of 5 for one token
    assert min(rates["adaptive"][1:]) > 0.95  # off after its first reply's rounds
    assert set(by) == {"adaptive", "cold", "fixed=4", "fixed=8", "fixed=16", "target-only"}


def test_a_chain_through_text_drafts_no_more_than_the_draft_wrote_there() -> None:
    costs = pair_costs()
    fixed = GammaController(pair_costs(), mode="fixed", fixed_gamma=8, gamma_max=16)
    played = play(through_text(41, 3), fixed)  # 40 tokens after the first: 10 rounds of 3 + 1
    per_round = 3 * STEP * T1 + EXTRA * T1 + costs.verify_cost(4)
    assert played.decoding == pytest.approx(10 * per_round)
    rec = recording(through_text(30, 5), guessed_all(20))
    assert Recording.from_json(json.loads(json.dumps(rec.to_json()))) == rec
    assert rec.replies[0].chain(4) == (0.9,) * 5 and rec.replies[1].chain(15) == (0.99,) * 5


def test_every_order_of_the_prompts_is_played_in_sessions_the_first_as_recorded() -> None:
    never = reply([0] * 50, label="chat #1")
    rec = recording(guessed_all(60), reply([i % 5 for i in range(80)], label="code #1"), never)
    orders = play_orders(rec)
    assert len(orders) == 3 * SESSIONS and all(len(session) == 3 for session in orders)
    # The first session of the first order is the recorded one, from the same memory.
    assert orders[0] == play_policies(rec)["adaptive"]
    # Which reply comes first, and what the session before learned, change the rounds.
    assert len({tuple(session) for session in orders}) > 1
    report = play_report(rec)
    for key in ("rate", "after_first"):
        o = report[key]["orders"]
        assert o["sessions"] == 3 * SESSIONS
        assert o["range"][0] <= o["adaptive_vs_best_fixed"] <= o["range"][1]
        assert 0 < o["lowest_prompt_min"] <= o["lowest_prompt_mean"]
    said = f"every order of the prompts, {SESSIONS} sessions each"
    assert sum(said in line for line in report["lines"]) == 2


def test_batch_scale_stretches_what_a_batch_costs_beyond_one_token() -> None:
    costs = pair_costs()
    wide = scaled(costs, 1.6)
    assert wide.t1 == costs.t1
    for k in (2, 5, 17):
        assert wide.verify_cost(k) / T1 - 1 == pytest.approx((costs.verify_cost(k) / T1 - 1) * 1.6)
    assert wide.t_draft == costs.t_draft and wide.catch_up_ratio == costs.catch_up_ratio


def test_a_recording_plays_the_same_every_time_and_after_a_round_trip_through_json() -> None:
    rec = recording(guessed_all(60), reply([i % 5 for i in range(80)], label="code #1"))
    again = Recording.from_json(json.loads(json.dumps(rec.to_json())))
    assert again == rec
    first, second = play_report(rec), play_report(again)
    assert first["rate"] == second["rate"] and first["after_first"] == second["after_first"]
    assert first["prompts"] == ["chat #1", "code #1"]


@pytest.mark.parametrize(
    "damage",
    [
        lambda d: d.pop("replies"),
        lambda d: d.update(replies=[]),
        lambda d: d["replies"][0].update(runs=[1, 2]),  # runs and confidence differ
        lambda d: d["replies"][0].update(n_prompt=-1),
        lambda d: d["replies"][0].update(confidence="high"),
        lambda d: d.update(costs={"t1": "fast"}),
        lambda d: d.update(gamma_max=10**9),  # no costs cover that
        lambda d: d.update(title=None, option=None, replies=[None]),
        lambda d: d["replies"][0].update(chains=[[0.5]]),  # one chain for 20 positions
        lambda d: d["replies"][0].update(chains=[[]] * 20),  # runs longer than the chains
    ],
)
def test_a_damaged_recording_is_refused_with_a_message(damage) -> None:  # type: ignore[no-untyped-def]
    d = recording(guessed_all(20)).to_json()
    damage(d)
    with pytest.raises(ValueError, match="not a playback recording"):
        Recording.from_json(d)


def test_a_prompt_where_no_fixed_gamma_pays_is_judged_against_target_only() -> None:
    plain = PlayedReply(decoding=10 * T1, reading=0.0, tokens=10)
    played = {
        "adaptive": [PlayedReply(11 * T1, 0.0, 10), PlayedReply(5 * T1, 1 * T1, 10)],
        "fixed=4": [PlayedReply(12 * T1, 0.0, 10), PlayedReply(4 * T1, 1 * T1, 10)],
        "target-only": [plain, plain],
    }
    by_rate = figures(played, T1, after_first_token=False)
    assert by_rate["judged_by"] == ["target-only", "best fixed"]
    assert by_rate["adaptive_vs_judge"] == pytest.approx([10 / 11, 4 / 5])
    after = figures(played, T1, after_first_token=True)
    assert after["adaptive_vs_judge"][1] == pytest.approx(5 / 6)
