"""How often a draft model's tokens are accepted, measured on two loaded runtimes."""

from __future__ import annotations

from collections.abc import Sequence

from gambit.engine.decoder import SpeculativeDecoder
from gambit.engine.drafters.draft_model import DraftModelDrafter
from gambit.engine.gamma.policy import DEFAULT_GAMMA, FixedGamma
from gambit.engine.machine.runtime import ModelRuntime
from gambit.engine.text.reply import GenerationConfig
from gambit.engine.verification.sampling import SamplingParams


def greedy_acceptance(
    target: ModelRuntime,
    draft: ModelRuntime,
    prompts: Sequence[list[int]],
    n_tokens: int,
    gamma: int = DEFAULT_GAMMA,
) -> float:
    """Share of a draft model's tokens the target accepts: greedy replies of
    ``n_tokens`` to each prompt (tokens), drafting ``gamma`` a round, on two
    loaded runtimes (a draft just derived is measured without an Engine's
    kernel probe and calibration)."""
    decoder = SpeculativeDecoder(target, DraftModelDrafter(draft), FixedGamma(gamma))
    config = GenerationConfig(max_tokens=n_tokens, sampling=SamplingParams(temperature=0.0))
    drafted = accepted = 0
    for prompt in prompts:
        for rnd in decoder.generate(prompt, config):
            drafted += rnd.n_drafted
            accepted += rnd.n_accepted
    return accepted / drafted if drafted else 0.0
