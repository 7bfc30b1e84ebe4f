"""Token trees on real weights: the KV cache follows the tree, and tree
speculation is lossless (token-identical at temperature 0, the target's exact
distribution at temperature 1)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from test_lossless import (
    GREEDY,
    PROMPTS,
    _exact_two_token_distribution,
    _goodness_of_fit,
    _prompt,
    plain_reply,
)

from gambit.engine.decoder import SpeculativeDecoder
from gambit.engine.drafters.draft_model import DraftModelDrafter
from gambit.engine.drafters.lookup import PromptLookupDrafter
from gambit.engine.gamma.policy import FixedGamma
from gambit.engine.machine.runtime import ModelRuntime, RuntimeOptions
from gambit.engine.text.reply import GenerationConfig, Round
from gambit.engine.verification.sampling import SamplingParams

TREE_OPTIONS = RuntimeOptions(n_ctx=1024, n_threads=2, n_seq_max=8)


@pytest.fixture(scope="module")
def rt_tree(smol_q8_0: Path) -> Iterator[ModelRuntime]:
    """The Q8_0 target with room for 8 tree leaves."""
    with ModelRuntime(smol_q8_0, TREE_OPTIONS) as rt:
        yield rt


@pytest.fixture(scope="module")
def rt_tree_first8(q8_0_first8: Path) -> Iterator[ModelRuntime]:
    """The 8-block Q8_0 target (conftest) with room for 8 tree leaves."""
    with ModelRuntime(q8_0_first8, TREE_OPTIONS) as rt:
        yield rt


# A tree of 7 nodes, 4 leaves: root -> 0 -> 1 -> 2 (main), root -> 3 -> 4,
# 0 -> 5, 3 -> 6.
TOKENS = [260, 1345, 314, 3287, 29, 1130, 12]
PARENTS = [-1, 0, 1, -1, 3, 0, 3]


def _path(node: int) -> list[int]:
    out = []
    while node >= 0:
        out.append(node)
        node = PARENTS[node]
    return out[::-1]


def test_each_tree_node_sees_exactly_its_own_branch(
    rt_tree: ModelRuntime, rt_q8_0: ModelRuntime
) -> None:
    prompt = rt_tree.tokenize("The capital of France is Paris. The capital of Italy is")
    rt_tree.clear()
    rt_tree.decode(prompt[:-1])
    n = rt_tree.decode_tree([prompt[-1]], TOKENS, PARENTS)
    assert n == len(TOKENS) + 1
    rows = rt_tree.logits_rows(n).copy()
    rt_q8_0.sync(prompt)
    assert np.array_equal(rows[0], rt_q8_0.logits(-1))
    for i in range(len(TOKENS)):
        rt_q8_0.sync(prompt + [TOKENS[j] for j in _path(i)])
        assert np.array_equal(rows[i + 1], rt_q8_0.logits(-1)), f"node {i}"


@pytest.mark.parametrize("n_main", [0, 1, 3])
def test_commit_keeps_the_main_chain_prefix_and_decoding_goes_on(
    rt_tree: ModelRuntime, rt_q8_0: ModelRuntime, n_main: int
) -> None:
    prompt = rt_tree.tokenize("Once upon a time, in a small village,")
    rt_tree.clear()
    rt_tree.decode(prompt[:-1])
    rt_tree.decode_tree([prompt[-1]], TOKENS, PARENTS)
    rt_tree.commit_tree(n_main)
    committed = prompt + TOKENS[:n_main]
    assert rt_tree.kv_tokens == committed
    # A side branch that won is decoded again at the front of the next batch:
    # here node 3 and its child 4, then a new tree below them.
    roots = [TOKENS[3], TOKENS[4], 42]
    n = rt_tree.decode_tree(roots, TOKENS, PARENTS)
    rows = rt_tree.logits_rows(n).copy()
    for i in (-1, 2, 5):  # the last root, then nodes 2 and 5
        path = [TOKENS[j] for j in _path(i)] if i >= 0 else []
        rt_q8_0.sync(committed + roots + path)
        assert np.array_equal(rows[i + 1], rt_q8_0.logits(-1)), f"row of node {i}"
    rt_tree.commit_tree(2)
    rt_tree.decode([99])
    expected = committed + roots + TOKENS[:2] + [99]
    assert rt_tree.kv_tokens == expected
    rt_q8_0.sync(expected)
    assert np.array_equal(rt_tree.logits(-1), rt_q8_0.logits(-1))


def test_many_random_tree_rounds_match_linear_decoding(
    rt_tree: ModelRuntime, rt_q8_0: ModelRuntime
) -> None:
    """Random trees, random accepted prefixes and catch-up roots, round after
    round: every logits row equals decoding the same branch linearly."""
    rng = np.random.default_rng(7)
    context = rt_tree.tokenize("In the beginning there was a small tree of tokens")
    rt_tree.clear()
    rt_tree.decode(context[:-1])
    pending = [context[-1]]
    for _ in range(12):
        n_main = int(rng.integers(1, 4))
        tokens = [int(t) for t in rng.integers(100, 5000, size=n_main)]
        parents = list(range(-1, n_main - 1))
        for _ in range(int(rng.integers(0, 5))):  # side nodes below main nodes or sides
            parents.append(int(rng.integers(-1, len(tokens))) if len(tokens) > n_main else
                           int(rng.integers(-1, n_main - 1)))  # fmt: skip
            if parents[-1] == n_main - 1:  # never below the main leaf
                parents[-1] = n_main - 2
            tokens.append(int(rng.integers(100, 5000)))
        n = rt_tree.decode_tree(pending, tokens, parents)
        rows = rt_tree.logits_rows(n).copy()
        base = context[:-1] if not rt_tree.kv_tokens else list(rt_tree.kv_tokens)
        for i in range(-1, len(tokens)):
            path: list[int] = []
            node = i
            while node >= 0:
                path.insert(0, tokens[node])
                node = parents[node]
            rt_q8_0.sync(base + path)
            assert np.array_equal(rows[i + 1], rt_q8_0.logits(-1)), f"node {i}"
        keep = int(rng.integers(0, n_main + 1))
        rt_tree.commit_tree(keep)
        extra = [int(t) for t in rng.integers(100, 5000, size=int(rng.integers(1, 3)))]
        pending = extra  # as if a side branch and a bonus token were committed


def _run(decoder: SpeculativeDecoder, prompt: list[int], config: GenerationConfig) -> list[Round]:
    return list(decoder.generate(prompt, config))


@pytest.mark.parametrize(("gamma", "side"), [(3, 1), (2, 3), (4, 4)])
@pytest.mark.parametrize("drafter_kind", ["draft", "lookup"])
def test_greedy_tree_is_token_identical(
    rt_tree: ModelRuntime, rt_q4_1: ModelRuntime, drafter_kind: str, gamma: int, side: int
) -> None:
    # 1-token matches too: they give the lookup trie its side branches
    drafter = (
        DraftModelDrafter(rt_q4_1) if drafter_kind == "draft" else PromptLookupDrafter(ngram_min=1)
    )
    spec = SpeculativeDecoder(rt_tree, drafter, FixedGamma(gamma, side))
    n_side = 0
    for text in PROMPTS:
        prompt = _prompt(rt_tree, text)
        expected = plain_reply(rt_tree, prompt, GREEDY)
        rounds = _run(spec, prompt, GREEDY)
        assert [t for r in rounds for t in r.tokens] == expected, text
        n_side += sum(r.n_side for r in rounds)
        for r in rounds:
            assert r.n_side <= side
            assert r.n_drafted - r.n_side <= gamma
    assert n_side > 0  # trees were really verified


@pytest.mark.slow
@pytest.mark.parametrize("drafter_kind", ["draft", "poor-draft", "lookup"])
def test_temperature_one_tree_matches_target_distribution(
    rt_tree_first8: ModelRuntime,
    rt_q4_1_first8: ModelRuntime,
    rt_q4_1_first4: ModelRuntime,
    drafter_kind: str,
) -> None:
    # The short models (conftest): the same trees over real weights, cheaper passes.
    rt_tree = rt_tree_first8
    sampling = SamplingParams(temperature=1.0, top_k=3, top_p=1.0, min_p=0.0)
    prompt = _prompt(rt_tree, "Say: one two one two one two one two")
    exact = _exact_two_token_distribution(rt_tree, prompt, sampling)
    drafter = {
        "draft": DraftModelDrafter(rt_q4_1_first8),
        # A poor draft, hot and wide: the main candidate is often rejected, so
        # siblings drawn without replacement and the residual path both run.
        "poor-draft": DraftModelDrafter(
            rt_q4_1_first4, sampling=SamplingParams(temperature=2.5, top_k=6, top_p=1.0, min_p=0.0)
        ),
        "lookup": PromptLookupDrafter(ngram_min=1),
    }[drafter_kind]
    decoder = SpeculativeDecoder(rt_tree, drafter, FixedGamma(2, 3))
    samples: list[tuple[int, int]] = []
    n_side = side_gain = 0
    for seed in range(500):
        config = GenerationConfig(
            max_tokens=3, sampling=SamplingParams(**{**sampling.__dict__, "seed": seed})
        )
        rounds = _run(decoder, prompt, config)
        tokens = [t for r in rounds for t in r.tokens]
        n_side += sum(r.n_side for r in rounds)
        side_gain += sum(r.side_gain for r in rounds)
        samples.append((tokens[0], tokens[1] if len(tokens) > 1 else -1))
    if drafter_kind != "lookup":
        assert n_side > 0
    if drafter_kind == "poor-draft":
        assert side_gain > 0  # side candidates were accepted where the main one was not
    p_value = _goodness_of_fit(samples, exact)
    assert p_value > 1e-3, f"{drafter_kind}: p = {p_value:.2e} over {len(samples)} samples"
