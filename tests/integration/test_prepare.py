"""The drafter reads the prompt during prompt processing, and only when it will draft."""

from __future__ import annotations

from gambit.engine.decoder import FixedGamma, GenerationConfig, SpeculativeDecoder
from gambit.engine.drafters.draft_model import DraftModelDrafter
from gambit.engine.runtime import ModelRuntime
from gambit.engine.sampling import SamplingParams

GREEDY = GenerationConfig(max_tokens=12, sampling=SamplingParams(temperature=0.0, seed=0))
TEXT = "Rewrite in the past tense: Tom walks his dog along the river every morning. " * 4


def test_draft_model_reads_the_prompt_before_the_first_round(
    rt_q8_0: ModelRuntime, rt_q4_1: ModelRuntime
) -> None:
    rt_q4_1.clear()
    decoder = SpeculativeDecoder(rt_q8_0, DraftModelDrafter(rt_q4_1), FixedGamma(4))
    prompt = rt_q8_0.tokenize(TEXT)
    rounds = list(decoder.generate(prompt, GREEDY))
    # The first round had nothing left to catch up on: its drafting is steady-state.
    assert rounds[0].n_drafted > 0 and rounds[0].n_draft_synced <= 1
    assert decoder.last_prefill_s > 0


def test_draft_model_is_left_alone_while_speculation_is_off(
    rt_q8_0: ModelRuntime, rt_q4_1: ModelRuntime
) -> None:
    rt_q4_1.clear()
    decoder = SpeculativeDecoder(rt_q8_0, DraftModelDrafter(rt_q4_1), FixedGamma(0))
    rounds = list(decoder.generate(rt_q8_0.tokenize(TEXT), GREEDY))
    assert all(r.n_drafted == 0 for r in rounds)
    assert rt_q4_1.kv_tokens == []  # no prompt processing spent on a drafter that never drafts
