"""A draft cut where it is unsure stays lossless, on real weights.

The adaptive policy stops a round's draft once the draft model's confidence
in its chain, read as the chance it lands, falls below what a token costs
(``ConfidenceCut``). The cut depends on the draft's own distributions only:
temperature 0 gives the target's tokens, the draft model's and one drafting
through text; at temperature 1 the joint distribution of a reply's first
three tokens is the target's (chi-square over 2,000 replies), with a draft
sampled hot whose confidence cuts rounds short at the third token often and
not always. Checked by mutation: a cut draft that sends its second token's
proposal distribution wrong fails it (p = 6e-6; 0.19 as it is).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
from scipy.stats import chisquare
from test_lossless import GREEDY, PROMPTS, _prompt, plain_reply

from gambit.engine.decoder import SpeculativeDecoder
from gambit.engine.drafters.base import ConfidenceCut, Draft, Drafter
from gambit.engine.drafters.draft_model import DraftModelDrafter
from gambit.engine.drafters.text_draft import GREEDY as DRAFT_GREEDY
from gambit.engine.drafters.text_draft import TextDraftDrafter
from gambit.engine.gamma.policy import FixedGamma
from gambit.engine.machine.runtime import ModelRuntime
from gambit.engine.text.reply import GenerationConfig, Round
from gambit.engine.verification.sampling import SamplingParams, process


def _as_is(confidence: float) -> float:
    return confidence


@dataclass
class Cutting(FixedGamma):
    """A fixed γ whose every draft stops where the draft's confidence says."""

    floor: float = 0.5

    def decided_cut(self) -> ConfidenceCut | None:
        return ConfidenceCut(self.floor, _as_is)


def _cut_short(rounds: list[Round]) -> int:
    """Rounds whose draft stopped before the γ asked for, with room left."""
    return sum(1 for r in rounds if r.stop is None and 0 < r.n_drafted < r.gamma)


@pytest.mark.parametrize("through_text", [False, True])
def test_greedy_replies_with_a_cut_draft_are_token_identical(
    rt_q8_0: ModelRuntime, rt_q4_1: ModelRuntime, rt_gemma: ModelRuntime, through_text: bool
) -> None:
    drafter: Drafter = (
        TextDraftDrafter(rt_q8_0, rt_gemma) if through_text else DraftModelDrafter(rt_q4_1)
    )
    uncut = SpeculativeDecoder(rt_q8_0, drafter, FixedGamma(8))
    spec = SpeculativeDecoder(rt_q8_0, drafter, Cutting(8, floor=0.6))
    drafted = {"cut": 0, "uncut": 0}
    short = 0
    for text in PROMPTS:
        prompt = _prompt(rt_q8_0, text)
        expected = plain_reply(rt_q8_0, prompt, GREEDY)
        rounds = list(spec.generate(prompt, GREEDY))
        assert [t for r in rounds for t in r.tokens] == expected, text
        drafted["cut"] += sum(r.n_drafted for r in rounds)
        short += _cut_short(rounds)
        # Every chain token comes with the draft's confidence in it.
        for r in rounds:
            assert len(r.confidence) == r.n_drafted
            assert all(0.0 < c <= 1.0 for c in r.confidence)
        drafted["uncut"] += sum(r.n_drafted for r in uncut.generate(prompt, GREEDY))
    assert short > 0  # the cut stopped drafts...
    assert 0 < drafted["cut"] < drafted["uncut"]  # ... and drafted less


def test_a_draft_through_text_cut_short_proposes_the_start_of_the_uncut_one(
    rt_gemma_q8_0: ModelRuntime, rt_q4_1: ModelRuntime
) -> None:
    text = "def fahrenheit_to_celsius(f):\n    return (f - 32) * 5 / 9\n\n\ndef celsius_to"
    context = rt_gemma_q8_0.tokenize(text, add_special=True, parse_special=False)
    rng = np.random.default_rng(0)
    drafter = TextDraftDrafter(rt_gemma_q8_0, rt_q4_1)
    ratio = drafter.steps_per_token  # (learned as it drafts: the steps a draft takes)

    def draft(end: int, cut: ConfidenceCut | None = None) -> Draft:
        drafter.steps_per_token = ratio
        return drafter.draft(context[:end], 16, DRAFT_GREEDY, rng, cut)

    shorter = 0
    for end in range(len(context) - 16, len(context) + 1, 2):
        whole = draft(end)
        cut = draft(end, ConfidenceCut(0.7, _as_is))
        assert draft(end, ConfidenceCut(0.0, _as_is)).tokens == whole.tokens
        assert cut.tokens == whole.tokens[: len(cut.tokens)], end
        assert len(whole.confidence) == len(whole.tokens)
        shorter += len(cut.tokens) < len(whole.tokens)
    assert shorter > 0


def _exact_distribution(
    rt: ModelRuntime, prompt: list[int], sampling: SamplingParams, n: int
) -> dict[tuple[int, ...], float]:
    """The target's exact distribution of its first ``n`` reply tokens (-1
    after an end of text)."""
    exact: dict[tuple[int, ...], float] = {}

    def walk(prefix: tuple[int, ...], p: float) -> None:
        if len(prefix) == n:
            exact[prefix] = p
            return
        rt.sync([*prompt, *prefix])
        dist = process(rt.logits(-1), sampling)
        for tok, q in zip(dist.ids.tolist(), dist.probs.tolist(), strict=True):
            if rt.is_eog(tok):
                exact[(*prefix, tok) + (-1,) * (n - len(prefix) - 1)] = p * q
            else:
                walk((*prefix, tok), p * q)

    walk((), 1.0)
    return exact


def test_temperature_one_with_a_cut_draft_matches_the_target_distribution(
    rt_q8_0_first8: ModelRuntime, rt_q4_1_first8: ModelRuntime
) -> None:
    target = rt_q8_0_first8
    sampling = SamplingParams(temperature=1.0, top_k=3, top_p=1.0, min_p=0.0)
    prompt = _prompt(target, "Say: one two one two one two one two")
    n = 3  # (tokens compared; a reply of 4 lets the first round draft 3)
    exact = _exact_distribution(target, prompt, sampling, n)
    # The draft sampled hotter and wider than the target: its confidence in
    # a second token is 0.30-0.67 (10th-90th percentile), and so in the third,
    # so a floor near the median of their product cuts many first rounds at
    # the third token; its drafts land often enough that a wrong proposal
    # distribution there shows.
    hot = SamplingParams(temperature=1.5, top_k=6, top_p=1.0, min_p=0.0)
    drafter = DraftModelDrafter(rt_q4_1_first8, sampling=hot)
    drafter.prepare(prompt)
    decoder = SpeculativeDecoder(target, drafter, Cutting(3, floor=0.25))
    samples: list[tuple[int, ...]] = []
    short = whole = 0
    for seed in range(2000):
        config = GenerationConfig(
            max_tokens=n + 1, sampling=SamplingParams(**{**sampling.__dict__, "seed": seed})
        )
        rounds = list(decoder.generate(prompt, config))
        first = next(r for r in rounds if r.n_drafted)
        short += first.gamma == 3 and first.n_drafted == 2
        whole += first.gamma == 3 and first.n_drafted == 3
        tokens = [t for r in rounds for t in r.tokens][:n]
        samples.append(tuple(tokens) + (-1,) * (n - len(tokens)))
    # The cut stopped a first round at its third token often, and not always.
    assert short > 200 and whole > 200, (short, whole)
    keys = sorted(exact, key=exact.__getitem__, reverse=True)
    counts = np.array([samples.count(k) for k in keys], dtype=float)
    assert counts.sum() == len(samples), "a sample fell outside the target's support"
    expected = np.array([exact[k] for k in keys]) * len(samples)
    rare = expected < 5
    counts = np.append(counts[~rare], counts[rare].sum())
    expected = np.append(expected[~rare], expected[rare].sum())
    assert len(expected) >= 8, f"only {len(expected)} categories: the test could not tell"
    p_value = float(chisquare(counts, expected).pvalue)
    assert p_value > 1e-3, f"p = {p_value:.2e} over {len(samples)} samples"
