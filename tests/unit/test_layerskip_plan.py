"""When a layer-skip plan cannot pay, it says why in plain words."""

from __future__ import annotations

from dataclasses import replace

from gambit.models.layerskip import LayerSkipPlan

PLAN = LayerSkipPlan(
    source_name="big.gguf",
    source_blocks=40,
    skipped=(10, 11, 12, 13, 14, 15, 16, 17, 18, 19),
    acceptance=0.82,
    draft_cost_ratio=0.74,
    best_gamma=4,
    expected_speedup=1.31,
    candidates=(),
    verify_cost=(1.0, 1.1),
    control_cost_ratio=1.0,
    n_positions=192,
    search_seconds=60.0,
)


def test_a_plan_that_pays_has_no_refusal() -> None:
    assert PLAN.pays and PLAN.refusal() is None


def test_below_one_says_slower_not_faster() -> None:
    plan = replace(PLAN, acceptance=0.31, expected_speedup=0.78)
    text = plan.refusal()
    assert text is not None and not plan.pays
    assert text.startswith("Skipping layers cannot speed up big.gguf on this machine")
    assert "leaves out 10 of its 40 blocks" in text
    assert "only 31% of the words" in text and "about 0.78x" in text
    assert "slower, not faster" in text


def test_too_few_blocks_skipped_to_gain() -> None:
    # an estimate above 1 does not rescue a draft that saves almost nothing
    plan = replace(PLAN, skipped=(20,), draft_cost_ratio=0.97, expected_speedup=1.02)
    text = plan.refusal()
    assert text is not None
    assert "leaves out only 1 of its 40 blocks" in text and "97% of a full step" in text
    assert "too little saved" in text


def test_nothing_skipped() -> None:
    text = replace(PLAN, skipped=()).refusal()
    assert text == "Skipping layers cannot speed up big.gguf: no block of it can be left out."
