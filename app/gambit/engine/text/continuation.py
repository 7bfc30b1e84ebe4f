"""Continue: more of a reply that was cut, from exactly where it ended.

A reply cut by its length limit, by Stop or by a crash of the window is
continued from the context it left: the prompt it had, the assistant's turn
still open (no end-of-turn marker, no new generation prompt), then the
reply's own tokens (``ChatPromptBuilder.build(reply=...)``). The decoder
then sees what it would have seen had the reply gone on, repetition
penalty's window included, so at temperature 0 the continued reply equals
the one that was never cut, token for token (docs/adr/0024).

The reply's text alone does not say its tokens: a tokenizer spells one text
several ways (the model need not have chosen the spelling tokenizing gives),
and a cut may fall inside a UTF-8 character, whose first bytes are in the
tokens but not in the text. So the tokens are kept with the reply
(``KeptTokens``, stored with the message) and used wherever they spell its
text with this model's tokenizer; elsewhere (a reply from another model, or
stored before tokens were kept) the text is tokenized, and the continuation
is a good one rather than the exact one.
"""

from __future__ import annotations

import codecs
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol


class Vocabulary(Protocol):
    """What choosing the tokens needs of the target (``ModelRuntime``)."""

    @property
    def n_vocab(self) -> int: ...

    def token_piece(self, token: int) -> bytes: ...

    def tokenize(
        self, text: str | bytes, *, add_special: bool = True, parse_special: bool = True
    ) -> list[int]: ...


@dataclass(frozen=True)
class KeptTokens:
    """A reply's tokens as it was generated, kept with it for Continue.

    ``tokenizer``: the fingerprint (``Engine.tokenizer_fingerprint``) of the
    model that generated them: another tokenizer's ids mean other text."""

    tokenizer: str
    ids: tuple[int, ...]


def whole_text(data: bytes) -> str:
    """``data`` as text up to its last whole character: a character its last
    bytes only begin is left out, as a cut reply's text leaves it out
    (``TextStream.finish``)."""
    return codecs.getincrementaldecoder("utf-8")("replace").decode(data)


def spells(vocab: Vocabulary, ids: Sequence[int], text: str) -> bool:
    """Whether the tokens ``ids`` are ``vocab``'s and make exactly ``text``."""
    if not all(isinstance(t, int) and 0 <= t < vocab.n_vocab for t in ids):
        return False
    return whole_text(b"".join(vocab.token_piece(t) for t in ids)) == text


def resume_tokens(
    vocab: Vocabulary, fingerprint: str, text: str, kept: KeptTokens | None
) -> list[int]:
    """The tokens to continue the cut reply ``text`` from: ``kept`` where they
    are of this tokenizer (``fingerprint``) and spell ``text`` (exact), else
    ``text`` tokenized as plain text (close, not always the same)."""
    if kept is not None and kept.tokenizer == fingerprint and spells(vocab, kept.ids, text):
        return list(kept.ids)
    return vocab.tokenize(text, add_special=False, parse_special=False)
