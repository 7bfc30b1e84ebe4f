"""What a measurement says, from hand-built reports: the recommendation and its
reason, the kind of a turn, the regime sentence, the CSV export, the split
of accepted tokens by source."""

from __future__ import annotations

import csv
import dataclasses
import io
from typing import Any

import pytest

from gambit.bench.measure import TARGET_ONLY_MODE, MeasureConfig
from gambit.bench.measure_report import PAYS_FROM, recommend, regime_sentence, report_csv, turn_kind
from gambit.bench.runner import ModeTotals
from gambit.engine.gamma.metrics import GenerationStats
from gambit.engine.text.reply import Round


def _report(speedups: dict[str, dict[str, float]], turns: int = 6) -> dict[str, Any]:
    """suites: kind -> mode name -> speedup; ALL is the first kind's unless given."""
    configs = [
        MeasureConfig("lookup", "adaptive"),
        MeasureConfig("lookup", "fixed=4"),
        MeasureConfig("draft", "adaptive"),
        MeasureConfig("draft", "fixed=4", tree=False),
    ]
    suites = {
        kind: {
            mode: {"speedup": s, "tokens_per_s": 10.0 * s, "divergence_rate": 0.0}
            for mode, s in by_mode.items()
        }
        for kind, by_mode in speedups.items()
    }
    return {
        "started": "2026-01-02T03:04:05",
        "target": "/m/t.gguf",
        "draft": "/m/d.gguf",
        "drafter": "draft",
        "temperature": 0.0,
        "seed": 1234,
        "max_tokens": 32,
        "turns": turns,
        "modes": [TARGET_ONLY_MODE, *(c.describe() for c in configs)],
        "suites": suites,
    }


ALL_PLAIN = {"target-only": 1.0}


def test_recommends_the_fastest_configuration_and_names_the_kinds_that_gain() -> None:
    rep = _report({
        "code": {**ALL_PLAIN, "lookup adaptive": 1.9, "lookup fixed=4": 1.7, "draft adaptive": 1.1},
        "rewriting": {**ALL_PLAIN, "lookup adaptive": 1.6, "lookup fixed=4": 1.5,
                      "draft adaptive": 1.0},
        "chat": {**ALL_PLAIN, "lookup adaptive": 1.0, "lookup fixed=4": 0.9,
                 "draft adaptive": 1.05},
        "ALL": {**ALL_PLAIN, "lookup adaptive": 1.4, "lookup fixed=4": 1.3,
                "draft adaptive": 1.05},
    })  # fmt: skip
    rec = recommend(rep)
    assert not rec["off"]
    assert (rec["drafter"], rec["policy"], rec["gamma"], rec["tree"]) == (
        "lookup", "adaptive", None, False,
    )  # fmt: skip
    assert rec["headline"] == "Prompt lookup, adaptive: 1.40x on your chats"
    assert rec["reason"].startswith("code and rewriting gain most (1.90x, 1.60x)")
    assert "chat 1.00x" in rec["reason"]


def test_adaptive_is_preferred_within_two_percent_of_the_best_fixed_gamma() -> None:
    rep = _report({"ALL": {**ALL_PLAIN, "lookup adaptive": 1.29, "lookup fixed=4": 1.30}})
    assert recommend(rep)["policy"] == "adaptive"
    rep = _report({"ALL": {**ALL_PLAIN, "lookup adaptive": 1.20, "lookup fixed=4": 1.30}})
    rec = recommend(rep)
    assert (rec["policy"], rec["gamma"]) == ("fixed", 4)
    assert rec["headline"].startswith("Prompt lookup, γ=4: 1.30x")


def test_speculation_off_when_nothing_reaches_the_bar_and_it_says_the_bar() -> None:
    rep = _report({"ALL": {**ALL_PLAIN, "lookup adaptive": 1.03, "draft fixed=4": 0.8}})
    rec = recommend(rep)
    assert rec["off"] and rec["headline"] == "Speculation off"
    assert f"{PAYS_FROM:.2f}x" in rec["reason"] and "5% faster" in rec["reason"]
    assert "the best with drafts accepted, prompt lookup, adaptive, ran at 1.03x" in rec["reason"]
    assert recommend(_report({"ALL": ALL_PLAIN}))["off"]  # nothing compared


def test_a_configuration_with_no_draft_accepted_claims_nothing() -> None:
    # Prompt lookup drafted, but none of it was accepted: its 1.64x against
    # target-only was the noise of a busy machine, not a gain (speedup None).
    rep = _report({"ALL": {**ALL_PLAIN, "lookup adaptive": 1.64, "draft fixed=4": 0.8}})
    rep["suites"]["ALL"]["lookup adaptive"]["speedup"] = None
    rec = recommend(rep)
    assert rec["off"]
    assert rec["reason"].startswith(
        "nothing paid on your chats: the best with drafts accepted, draft model, γ=4, ran at "
        "0.80x plain decoding (prompt lookup, adaptive had no draft accepted)"
    )
    rep["suites"]["ALL"]["draft fixed=4"]["speedup"] = None
    assert "no configuration had a draft accepted" in recommend(rep)["reason"]


def test_a_gain_within_the_noise_is_not_enough_evidence() -> None:
    rep = _report({"ALL": {**ALL_PLAIN, "lookup adaptive": 1.12, "draft adaptive": 1.08}})
    rep["noise"] = 0.15  # plain decoding varied by 15 % between two runs of the same turns
    rep["busy"] = {"replays": 12, "of": 40, "other_cores": 1.0}
    rec = recommend(rep)
    assert rec["off"] and rec["apply"] is False and rec["mode"] is None
    assert rec["headline"] == "Not enough evidence yet: measure more turns"
    assert "prompt lookup, adaptive, ran at 1.12x" in rec["reason"]
    assert "varied by 15%" in rec["reason"]
    assert "busy during 12 of 40 replays (1.0 cores on average)" in rec["reason"]
    rep["noise"] = 0.04  # a quieter run: the same gain now clears the noise
    rec = recommend(rep)
    assert not rec["off"] and rec["apply"] and rec["mode"] == "lookup adaptive"
    assert "busy during 12 of 40 replays" in rec["reason"]


def test_a_candidate_draft_is_recommended_with_its_file_only_beyond_the_noise() -> None:
    rep = _report({"ALL": {**ALL_PLAIN, "draft adaptive": 1.10}})
    candidate = MeasureConfig("draft", "adaptive", draft="/lib/gemma.gguf")
    rep["modes"].append(candidate.describe())
    rep["suites"]["ALL"][candidate.name] = {
        "speedup": 1.30, "tokens_per_s": 13.0, "divergence_rate": 0.0,
    }  # fmt: skip
    rep["noise"] = 0.35  # its 1.30x is within plain decoding's own spread: no draft named
    rec = recommend(rep)
    assert rec["off"] and rec["apply"] is False and rec.get("draft_model") is None
    rep["noise"] = 0.05
    rec = recommend(rep)
    assert rec["mode"] == "draft adaptive: gemma.gguf" and rec["draft_model"] == "/lib/gemma.gguf"
    assert rec["headline"] == "Draft gemma.gguf, adaptive: 1.30x on your chats"
    # The loaded draft, when it is the best, applies as the report's draft.
    rep["suites"]["ALL"][candidate.name]["speedup"] = 1.05
    rec = recommend(rep)
    assert rec["mode"] == "draft adaptive" and rec["draft_model"] is None


def test_one_kind_of_turn_says_what_it_was_measured_on() -> None:
    rep = _report({"chat": {**ALL_PLAIN, "draft adaptive": 1.2},
                   "ALL": {**ALL_PLAIN, "draft adaptive": 1.2}}, turns=3)  # fmt: skip
    assert recommend(rep)["reason"] == "measured on 3 chat turns of yours"


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("Here is my code:\n```\nx = 1\n```\nwhy does it fail?", "code"),
        ("def add(a, b): return a + b  -- add a docstring", "code"),
        ("Write a Python script that renames files", "code"),
        ("Rewrite this paragraph so it sounds friendlier", "rewriting"),
        ("Summarize the text below in two lines", "rewriting"),
        ("What should I see in Lisbon in two days?", "chat"),
        ("My class starts at nine, any breakfast ideas?", "chat"),
    ],
)
def test_turn_kind(text: str, kind: str) -> None:
    assert turn_kind(text) == kind


def test_regime_sentence_from_the_measured_cost_ratio() -> None:
    regime, sentence = regime_sentence(2.12, "big.gguf")
    assert regime == "compute-bound"
    assert "2.12× one token" in sentence and "t(5)/t(1)" in sentence and "big.gguf" in sentence
    regime, sentence = regime_sentence(1.16, "f32.gguf")
    assert regime == "bandwidth-bound" and "only 1.16×" in sentence


def test_csv_has_a_row_per_suite_and_mode_with_every_figure() -> None:
    rep = _report({"code": {**ALL_PLAIN, "lookup adaptive": 1.5},
                   "ALL": {**ALL_PLAIN, "lookup adaptive": 1.5}})  # fmt: skip
    rows = list(csv.DictReader(io.StringIO(report_csv(rep))))
    assert [(r["suite"], r["mode"]) for r in rows] == [
        ("code", "target-only"), ("code", "lookup adaptive"),
        ("ALL", "target-only"), ("ALL", "lookup adaptive"),
    ]  # fmt: skip
    assert rows[1]["speedup"] == "1.5" and rows[1]["tokens_per_s"] == "15"
    assert rows[0]["target"] == "/m/t.gguf" and rows[0]["started"] == "2026-01-02T03:04:05"


def test_bench_figures_say_what_each_source_supplied() -> None:
    one_source, two_sources = ModeTotals(), ModeTotals()
    lookup = GenerationStats()
    for i, by in enumerate(["prompt lookup", "prompt lookup"]):
        lookup.add(dataclasses.replace(_round(i, 0.1 * (i + 1), 4, 3, 3), drafted_by=by))
    one_source.add(lookup)
    both = GenerationStats()
    for i, (by, n) in enumerate([("prompt lookup", 3), ("draft model", 2), ("earlier chats", 4)]):
        both.add(dataclasses.replace(_round(i, 0.1 * (i + 1), n + 1, n, n), drafted_by=by))
    two_sources.add(both)
    assert "accepted_by_drafter" not in one_source.figures()  # one source: nothing to split
    split = two_sources.figures()["accepted_by_drafter"]
    assert split == {"prompt lookup": 3, "draft model": 2, "earlier chats": 4}
    report = {"suites": {"ALL": {"lookup": one_source.figures(), "both": two_sources.figures()}}}
    csv_text = report_csv(report)
    assert "3 prompt lookup; 2 draft model; 4 earlier chats" in csv_text


def _round(index: int, elapsed_s: float, n_tokens: int, n_drafted: int, n_accepted: int) -> Round:
    return Round(
        index=index, tokens=tuple(range(n_tokens)), text="x" * n_tokens, gamma=n_drafted,
        n_drafted=n_drafted, n_accepted=n_accepted, outcomes=(True,) * n_accepted,
        t_draft_s=0.0, t_verify_s=0.01, elapsed_s=elapsed_s,
    )  # fmt: skip
