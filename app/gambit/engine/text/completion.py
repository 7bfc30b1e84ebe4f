"""The prompt of a plain completion: a base model continuing a text as it is."""

from __future__ import annotations


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
