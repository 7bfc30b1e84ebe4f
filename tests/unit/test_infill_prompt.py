"""Fill-in-the-middle prompts (engine.text.completion.infill_prompt): laid out
as llama.cpp's server lays out an infill, and fitted to the context by
cutting the far ends of the prefix and the suffix."""

from __future__ import annotations

from gambit.engine.machine.fim import FimTokens
from gambit.engine.text.completion import infill_prompt

FIM = FimTokens(prefix=900, suffix=901, middle=902)
BOS = 1


def test_the_prefix_and_suffix_are_laid_out_around_the_fim_tokens() -> None:
    assert infill_prompt([10, 11], [20, 21], FIM, BOS, n_ctx=64, max_tokens=8) == [
        BOS, 900, 10, 11, 901, 20, 21, 902,
    ]  # fmt: skip
    assert infill_prompt([10], [], FIM, -1, n_ctx=64, max_tokens=8) == [900, 10, 901, 902]


def test_what_does_not_fit_goes_from_the_far_ends() -> None:
    prefix, suffix = list(range(100, 200)), list(range(300, 400))
    # 64 tokens, 16 kept for the reply, 4 for BOS and the FIM tokens: 44 of text.
    tokens = infill_prompt(prefix, suffix, FIM, BOS, n_ctx=64, max_tokens=16)
    assert len(tokens) == 64 - 16
    middle = tokens.index(901)
    kept_prefix, kept_suffix = tokens[2:middle], tokens[middle + 1 : -1]
    assert kept_prefix == prefix[-len(kept_prefix) :]  # the text just before the gap
    assert kept_suffix == suffix[: len(kept_suffix)]  # and just after it
    assert len(kept_suffix) == 44 // 4  # the suffix keeps a quarter
    # A short prefix leaves the suffix the rest of the room.
    tokens = infill_prompt([10], suffix, FIM, BOS, n_ctx=64, max_tokens=16)
    assert tokens[:4] == [BOS, 900, 10, 901] and len(tokens) == 48
