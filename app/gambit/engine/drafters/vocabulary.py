"""One rule for "the same vocabulary": whether a draft can draft for a target
token for token, or only through text (``gambit.engine.drafters.text_draft``).

llama.cpp's ``common_speculative_are_compatible`` decides it for loaded models:

- the same vocabulary type (BPE, SPM, ...);
- the same begin- and end-of-text tokens, added or not alike;
- vocabulary sizes within 128 tokens of each other (a few added at the end);
- every token from id 5 on (up to the smaller vocabulary) has the same text.

The same rule serves the loaded models (``Vocabulary.of_runtime``: drafting,
deriving) and the files' headers (``Vocabulary.of_info``: the Models dialog,
``gambit-cli models``), so that a pair is never judged two ways. Equal
tokenizer digests (the GGUF headers' token texts) settle the last point
without reading the texts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from gambit.engine.machine.runtime import ModelRuntime
from gambit.formats.gguf_file import read_header
from gambit.formats.gguf_info import ModelInfo

VOCAB_MAX_SIZE_DIFFERENCE: Final = 128
VOCAB_CHECK_START_TOKEN_ID: Final = 5
TOKENS_KEY: Final = "tokenizer.ggml.tokens"


@dataclass(frozen=True)
class Vocabulary:
    """What decides whether two models spell text with the same tokens."""

    kind: int | str  # the vocabulary type, as the source says it
    kind_name: str  # as the user reads it ("BPE 'gpt2'")
    add_bos: bool
    bos: int
    add_eos: bool
    eos: int
    size: int
    digest: str  # "" where not known
    texts: Callable[[], Callable[[int], str]]  # the token texts, read only when needed

    @classmethod
    def of_runtime(cls, rt: ModelRuntime) -> Vocabulary:
        return cls(
            rt.vocab_type, str(rt.vocab_type), rt.add_bos, rt.bos_token, rt.add_eos,
            rt.eos_token, rt.n_vocab, rt.tokenizer_digest, lambda: rt.token_text,
        )  # fmt: skip

    @classmethod
    def of_info(cls, info: ModelInfo) -> Vocabulary:
        def texts() -> Callable[[int], str]:
            value = read_header(info.path, keep_arrays=(TOKENS_KEY,)).metadata.get(TOKENS_KEY)
            tokens = value if isinstance(value, list) else []
            return lambda i: str(tokens[i]) if i < len(tokens) else ""

        return cls(
            info.vocab_type, f"{info.vocab_type_name} '{info.vocab_type}'", info.add_bos,
            info.bos_token_id, info.add_eos, info.eos_token_id, info.vocab_size,
            info.tokenizer_digest, texts,
        )  # fmt: skip


def _special(added: bool, token_id: int) -> str:
    return f"id {token_id}" if added else "not added"


def vocabulary_differences(target: Vocabulary, draft: Vocabulary) -> list[str]:
    """Every reason ``draft`` cannot draft for ``target`` token for token, in
    the order llama.cpp checks them (empty: their vocabularies agree)."""
    reasons: list[str] = []
    if target.kind != draft.kind:
        reasons.append(f"different tokenizer types ({draft.kind_name} vs {target.kind_name})")
    for what, t_add, t_id, d_add, d_id in (
        ("begin", target.add_bos, target.bos, draft.add_bos, draft.bos),
        ("end", target.add_eos, target.eos, draft.add_eos, draft.eos),
    ):
        if t_add != d_add or (t_add and t_id != d_id):
            reasons.append(
                f"different {what}-of-text tokens ({_special(d_add, d_id)} vs "
                f"{_special(t_add, t_id)})"
            )
    diff = abs(target.size - draft.size)
    if diff > VOCAB_MAX_SIZE_DIFFERENCE:
        reasons.append(
            f"vocabulary sizes differ by {diff:,} ({draft.size:,} vs {target.size:,} tokens; "
            f"at most {VOCAB_MAX_SIZE_DIFFERENCE} allowed)"
        )
    if target.kind != draft.kind or (target.digest and target.digest == draft.digest):
        return reasons  # (other types settle it; equal digests, the same texts)
    t_text, d_text = target.texts(), draft.texts()
    for i in range(VOCAB_CHECK_START_TOKEN_ID, min(target.size, draft.size)):
        if t_text(i) != d_text(i):
            reasons.append(f"token {i} differs ({d_text(i)!r} vs {t_text(i)!r})")
            break
    return reasons
