"""The prompt of a plain completion: a base model continuing a text as it
is, or filling in the middle between two texts (a code model's infill)."""

from __future__ import annotations

from gambit.engine.machine.fim import FimTokens, fim_tokens
from gambit.engine.machine.runtime import ModelRuntime
from gambit.errors import NoInfillError


def completion_prompt(tokens: list[int], bos: int, n_ctx: int, max_tokens: int) -> list[int]:
    """``tokens`` (the text, tokenized with the model's special tokens) as the
    prompt to continue. From nothing, the begin-of-text token ``bos`` is where
    it starts (none: -1). A text too long for the context loses its start, the
    begin-of-text token kept, as a chat loses its oldest turns: the reply gets
    room for ``max_tokens`` (at most half the context)."""
    if not tokens and bos >= 0:
        return [bos]
    room = n_ctx - max(1, min(max_tokens, n_ctx // 2))
    if len(tokens) <= room:
        return tokens
    head = tokens[:1] if bos >= 0 and tokens[0] == bos else []
    return head + tokens[len(tokens) - room + len(head) :]


def infill_prompt(
    prefix: list[int], suffix: list[int], fim: FimTokens, bos: int, n_ctx: int, max_tokens: int
) -> list[int]:
    """The prompt that fills in the middle between ``prefix`` and ``suffix``
    (tokenized without special tokens), laid out as llama.cpp's server lays
    out an infill: [begin-of-text] FIM-prefix, the prefix, FIM-suffix, the
    suffix, FIM-middle; the model writes the middle. ``bos`` -1: none. Where
    they do not fit with ``max_tokens`` for the reply (at most half the
    context), the prefix loses its start and the suffix its end, the suffix
    keeping at most a quarter of the room (llama.cpp's split: what is just
    before the gap says most)."""
    head = [bos] if bos >= 0 else []
    room = max(0, n_ctx - max(1, min(max_tokens, n_ctx // 2)) - len(head) - 3)
    n_suffix = min(len(suffix), max(room // 4, room - len(prefix)))
    n_prefix = min(len(prefix), room - n_suffix)
    kept_prefix = prefix[len(prefix) - n_prefix :]
    return [*head, fim.prefix, *kept_prefix, fim.suffix, *suffix[:n_suffix], fim.middle]


def completion_tokens(
    rt: ModelRuntime, text: str, suffix: str | None, max_tokens: int
) -> list[int]:
    """The prompt of a completion of ``text`` by ``rt`` (``completion_prompt``);
    with ``suffix``, of the middle between them (``infill_prompt``), which
    needs the model's fill-in-the-middle tokens (else ``NoInfillError``)."""
    if suffix is None:
        tokens = rt.tokenize(text, add_special=True, parse_special=False)
        return completion_prompt(tokens, rt.bos_token, rt.n_ctx, max_tokens)
    fim = fim_tokens(rt)
    if fim is None:
        raise NoInfillError(
            f"{rt.path.name} declares no fill-in-the-middle tokens, so it cannot fill in "
            "between a prefix and a suffix: a code model trained for infilling can"
        )
    bos = rt.bos_token if rt.add_bos else -1
    prefix = rt.tokenize(text, add_special=False, parse_special=False)
    after = rt.tokenize(suffix, add_special=False, parse_special=False)
    return infill_prompt(prefix, after, fim, bos, rt.n_ctx, max_tokens)
