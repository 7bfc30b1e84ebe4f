"""Self-speculation by layer skipping is lossless, chain and tree alike.

The draft is the Q8_0 target with three of its 30 blocks left out (a real
layer-skip GGUF, written by ``write_layer_skip_model``). It disagrees with
the target often (MODELS.md: ~60 % agreement at 27 of 30 blocks), so
rejections, residual resampling and side candidates are all exercised. The
temperature-1 tests run on conftest's 8-block target, with two of its blocks
left out for the draft.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from test_lossless import (
    GREEDY,
    PROMPTS,
    _exact_two_token_distribution,
    _goodness_of_fit,
    _prompt,
    plain_reply,
)
from test_tree import TREE_OPTIONS

from gambit.engine.decoder import SpeculativeDecoder
from gambit.engine.drafters.draft_model import DraftModelDrafter, check_compatible
from gambit.engine.gamma.policy import FixedGamma
from gambit.engine.machine.runtime import ModelRuntime
from gambit.engine.text.reply import GenerationConfig
from gambit.engine.verification.sampling import SamplingParams
from gambit.formats.layerskip_file import read_layer_skip_info, write_layer_skip_model

SKIPPED = (12, 18, 24)


@pytest.fixture(scope="module")
def rt_layer_skip(
    smol_q8_0: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ModelRuntime]:
    path = write_layer_skip_model(
        smol_q8_0, tmp_path_factory.mktemp("layerskip") / "skip.gguf", SKIPPED
    )
    info = read_layer_skip_info(path)
    assert info is not None and info.skipped == SKIPPED
    with ModelRuntime(path, TREE_OPTIONS) as rt:
        yield rt


@pytest.fixture(scope="module")
def rt_target(smol_q8_0: Path) -> Iterator[ModelRuntime]:
    with ModelRuntime(smol_q8_0, TREE_OPTIONS) as rt:
        yield rt


# For the distribution tests: the 8-block Q8_0 target (conftest: SmolLM2's
# first blocks) and its own layer-skip draft, two of its 8 blocks left out.
SHORT_SKIPPED = (3, 5)


@pytest.fixture(scope="module")
def rt_short_target(q8_0_first8: Path) -> Iterator[ModelRuntime]:
    with ModelRuntime(q8_0_first8, TREE_OPTIONS) as rt:
        yield rt


@pytest.fixture(scope="module")
def rt_short_layer_skip(
    q8_0_first8: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ModelRuntime]:
    path = write_layer_skip_model(
        q8_0_first8, tmp_path_factory.mktemp("layerskip") / "short-skip.gguf", SHORT_SKIPPED
    )
    with ModelRuntime(path, TREE_OPTIONS) as rt:
        yield rt


@pytest.mark.parametrize(("gamma", "side"), [(3, 0), (2, 2)])
def test_greedy_layer_skip_is_token_identical(
    rt_target: ModelRuntime, rt_layer_skip: ModelRuntime, gamma: int, side: int
) -> None:
    check_compatible(rt_target, rt_layer_skip)
    spec = SpeculativeDecoder(rt_target, DraftModelDrafter(rt_layer_skip), FixedGamma(gamma, side))
    drafted = accepted = 0
    for text in PROMPTS:
        prompt = _prompt(rt_target, text)
        expected = plain_reply(rt_target, prompt, GREEDY)
        rounds = list(spec.generate(prompt, GREEDY))
        assert [t for r in rounds for t in r.tokens] == expected, text
        drafted += sum(r.n_drafted for r in rounds)
        accepted += sum(r.n_accepted for r in rounds)
    assert 0 < accepted < drafted  # it drafts, and it is often wrong


@pytest.mark.slow
@pytest.mark.parametrize(("gamma", "side"), [(2, 0), (2, 3)])
def test_temperature_one_layer_skip_matches_target_distribution(
    rt_short_target: ModelRuntime, rt_short_layer_skip: ModelRuntime, gamma: int, side: int
) -> None:
    rt_target, rt_layer_skip = rt_short_target, rt_short_layer_skip
    sampling = SamplingParams(temperature=1.0, top_k=3, top_p=1.0, min_p=0.0)
    prompt = _prompt(rt_target, "Say: one two one two one two one two")
    exact = _exact_two_token_distribution(rt_target, prompt, sampling)
    decoder = SpeculativeDecoder(
        rt_target, DraftModelDrafter(rt_layer_skip), FixedGamma(gamma, side)
    )
    samples: list[tuple[int, int]] = []
    drafted = 0
    for seed in range(500):
        config = GenerationConfig(
            max_tokens=3, sampling=SamplingParams(**{**sampling.__dict__, "seed": seed})
        )
        tokens: list[int] = []
        for rnd in decoder.generate(prompt, config):
            tokens.extend(rnd.tokens)
            drafted += rnd.n_drafted
        samples.append((tokens[0], tokens[1] if len(tokens) > 1 else -1))
    assert drafted > 0
    p_value = _goodness_of_fit(samples, exact)
    assert p_value > 1e-3, f"γ={gamma}+{side}: p = {p_value:.2e} over {len(samples)} samples"
