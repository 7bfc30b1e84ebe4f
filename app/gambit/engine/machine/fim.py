"""The fill-in-the-middle tokens a model's vocabulary declares.

Code models trained for infilling mark the text before the gap, the text
after it and where the middle goes with three special tokens. llama.cpp reads
them from the GGUF metadata (``tokenizer.ggml.fim_pre_token_id`` and its
siblings) or finds them by their usual texts; a model without them cannot
fill in a middle (``gambit.engine.text.completion.infill_prompt``).
"""

from __future__ import annotations

from dataclasses import dataclass

import llama_cpp as ll

from gambit.engine.machine.runtime import ModelRuntime


@dataclass(frozen=True)
class FimTokens:
    prefix: int  # before the text that comes before the gap
    suffix: int  # before the text that comes after it
    middle: int  # where the model writes what goes in between


def fim_tokens(rt: ModelRuntime) -> FimTokens | None:
    """``rt``'s fill-in-the-middle tokens, or None where it declares none."""
    v = rt.vocab
    ids = (ll.llama_vocab_fim_pre(v), ll.llama_vocab_fim_suf(v), ll.llama_vocab_fim_mid(v))
    if any(int(i) < 0 for i in ids):
        return None
    return FimTokens(*(int(i) for i in ids))
