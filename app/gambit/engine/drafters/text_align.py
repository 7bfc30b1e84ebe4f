"""Text between two tokenizers: the committed text in the draft's tokens, and
drafted text in the target's.

A draft model whose vocabulary differs from the target's drafts through text
(``gambit.engine.drafters.text_draft``). Two conversions happen every round,
and both must get the joins right, because text tokenized alone is not the
same text tokenized in context: a byte-level BPE attaches a space to the word
after it, "\\n\\n" may be one token or two, a SentencePiece vocabulary may add a
space in front of text that starts a tokenization, and a byte-fallback token
may stop in the middle of a UTF-8 character.

- The committed text in the draft's tokens (``DraftContext``) is kept in step
  by re-tokenizing only its changed tail: from a few tokens before the change,
  spliced where the old and new tokenizations share a token boundary.
- Drafted text in the target's tokens (``target_spans``): tokenized
  together with an overlap of committed text, and only the tokens after the
  committed text's end are proposed, where the two tokenizations agree that a
  token starts there. The committed tokens themselves are never re-tokenized,
  and the draft's last token is a lookahead: a target token that reaches into
  it may be the start of a longer one, so it is not proposed (unless the
  draft ended its text).

Everything here is bytes: tokens' pieces are bytes, and a piece may hold part
of a character.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt


class Vocabulary(Protocol):
    """The part of ``ModelRuntime`` that turns text into tokens and back."""

    @property
    def add_bos(self) -> bool: ...

    @property
    def bos_token(self) -> int: ...

    def tokenize(
        self, text: str | bytes, *, add_special: bool = True, parse_special: bool = True
    ) -> list[int]: ...

    def token_piece(self, token: int) -> bytes: ...

    def token_text(self, token: int) -> str: ...


# Tokens re-tokenized before a change, so that a merge across the old end is
# redone (a space, a newline run, a word cut by a byte token), and the most
# committed tokens a proposal is tokenized together with.
RETOKENIZE_BACK = 6
OVERLAP_TOKENS = 6


def complete_utf8(data: bytes) -> int:
    """The length of the longest prefix of ``data`` that does not end inside a
    UTF-8 character (bytes that can never start or continue one count as whole)."""
    n = len(data)
    for back in range(1, min(4, n) + 1):
        lead = data[n - back]
        if lead & 0xC0 == 0x80:  # a continuation byte: look further back
            continue
        need = (
            2
            if lead >> 5 == 0b110
            else 3
            if lead >> 4 == 0b1110
            else 4
            if lead >> 3 == 0b11110
            else 1
        )
        return n if back >= need else n - back
    return n


def token_ends(
    vocab: Vocabulary, tokens: Sequence[int], data: bytes, start: int
) -> list[int] | None:
    """Each token's end offset in ``data``, the tokens being the tokenization
    of ``data[start:]``; None where their pieces do not spell that text (a
    tokenizer that normalised it, or replaced invalid bytes).

    A tokenizer that put a space in front (SentencePiece's space prefix) is
    allowed: its first token then ends one byte earlier than its piece."""
    pieces = [vocab.token_piece(t) for t in tokens]
    spelled = b"".join(pieces)
    text = data[start:]
    shift = 0
    if spelled != text:
        if spelled[:1] != b" " or spelled[1:] != text:
            return None
        shift = 1
    ends: list[int] = []
    at = start - shift
    for piece in pieces:
        at += len(piece)
        ends.append(max(at, start))
    return ends


@dataclass(frozen=True, slots=True)
class DraftView:
    """The committed text as the draft model reads it: all of it in
    ``tokens`` (``DraftContext.sync``), or with its last token held back
    (``healed``), which the draft writes again under ``PieceIndex.heal``'s
    constraint."""

    tokens: list[int]  # the draft's tokens (its BOS first where it adds one)
    n_text: int  # bytes of the committed text they cover: a character cut short waits
    withheld: bytes = b""  # committed text the draft must write first (a held-back token)

    def healed(self, draft: Vocabulary) -> DraftView:
        """The view without its last token, whose text becomes ``withheld``.

        Token healing: the committed text was cut where the *target's*
        tokens end, which is often inside what the draft's tokenizer would
        make one token ("\\n    " before "with" is "\\n   " + " with" in
        SmolLM2's). A draft shown a token it would never have produced there
        guesses badly (measured: a second newline, 0 of 16 landing); shown
        the text before it, and made to write it again first, it continues
        as it would have.
        """
        head = 1 if self.tokens and draft.add_bos and self.tokens[0] == draft.bos_token else 0
        if len(self.tokens) <= max(1, head):
            return self  # nothing to hold back (the draft needs a token to read)
        piece = draft.token_piece(self.tokens[-1])
        if not piece:
            return self  # a control token: nothing to write again
        return DraftView(self.tokens[:-1], self.n_text - len(piece), piece + self.withheld)


class DraftContext:
    """The committed target tokens as text, in the draft model's tokens.

    The target's control tokens (a chat template's turn markers) are written
    as their text, which a draft that knows them reads as its own and any
    other reads as plain text; the target's BOS is left out and the draft's
    own BOS rule applies instead.
    """

    def __init__(self, target: Vocabulary, draft: Vocabulary) -> None:
        self.target = target
        self.draft = draft
        self._tgt: list[int] = []  # target tokens written so far
        self._tgt_ends: list[int] = []  # end offset of each in _text
        self._text = bytearray()
        self._dft: list[int] = []  # draft tokens of _text[:_dft_end] (no BOS)
        self._dft_ends: list[int] = []
        self._head = [draft.bos_token] if draft.add_bos and draft.bos_token >= 0 else []
        self.n_retokenized = 0  # bytes of text tokenized again so far (a cost counter)

    @property
    def text(self) -> bytes:
        return bytes(self._text)

    def piece(self, token: int) -> bytes:
        """The target token's text as the draft is shown it."""
        piece = self.target.token_piece(token)
        if piece or (token == self.target.bos_token and self.target.add_bos):
            return piece  # (a BOS the target adds on its own is not text)
        return self.target.token_text(token).encode("utf-8")  # a control token: its name

    def sync(self, context: Sequence[int]) -> DraftView:
        """The draft's tokens for ``context`` (the target's committed tokens)."""
        keep = _common_prefix(self._tgt, context)
        unchanged = len(self._text)  # bytes of text the draft's tokens were made from, still there
        if keep < len(self._tgt):
            unchanged = self._tgt_ends[keep - 1] if keep else 0
            del self._tgt[keep:], self._tgt_ends[keep:], self._text[unchanged:]
        for tok in context[keep:]:
            self._text += self.piece(tok)
            self._tgt.append(tok)
            self._tgt_ends.append(len(self._text))
        self._retokenize(unchanged)
        n_text = self._dft_ends[-1] if self._dft_ends else 0
        return DraftView(self._head + self._dft, n_text, bytes(self._text[n_text:]))

    def _retokenize(self, unchanged: int) -> None:
        """Bring the draft's tokens to the text, whose first ``unchanged`` bytes
        are those they were made from: keep the tokens that end well before
        that, re-tokenize from there, and splice where both agree."""
        text = bytes(self._text)
        end = complete_utf8(text)
        ends = self._dft_ends
        if ends and ends[-1] == end and unchanged >= end:
            return
        if not ends and end == 0:
            return
        # Redo RETOKENIZE_BACK tokens before the change: they may merge with
        # what follows (a space, a run of newlines, a word cut by a byte token).
        i = max(0, _count_ending_by(ends, unchanged) - RETOKENIZE_BACK)
        start = ends[i - 1] if i else 0
        new = self.draft.tokenize(text[start:end], add_special=False, parse_special=True)
        new_ends = token_ends(self.draft, new, text[:end], start)
        if new_ends is None and start > 0:
            i, start = 0, 0  # all of it again, with nothing to splice onto
            new = self.draft.tokenize(text[:end], add_special=False, parse_special=True)
            new_ends = token_ends(self.draft, new, text[:end], 0)
        if new_ends is None:
            # Pieces that do not spell the text (a normalising tokenizer): the
            # tokens as they are, ends spread evenly; still a context to draft from.
            n = max(1, len(new))
            new_ends = [start + (end - start) * (k + 1) // n for k in range(len(new))]
        self.n_retokenized += end - start
        # Keep the old tokens up to the last boundary both tokenizations share
        # in the unchanged text: they were made with more context before them.
        old_at = {e: k for k, e in enumerate(ends[i:], i) if e <= unchanged}
        for j in range(len(new_ends) - 1, -1, -1):
            k = old_at.get(new_ends[j])
            if k is not None:
                i, new, new_ends = k + 1, new[j + 1 :], new_ends[j + 1 :]
                break
        self._dft[i:] = new
        self._dft_ends[i:] = new_ends

    def drafted_text(self, view: DraftView, tokens: Sequence[int]) -> Drafted:
        """The text the draft's ``tokens`` add to the committed text (what
        follows its end, not what follows ``view.n_text``)."""
        out = bytearray()
        settled = 0
        ended = False
        for tok in tokens:
            piece = self.draft.token_piece(tok)
            if not piece:  # an end of generation, or another control token: no text after
                ended = True
                break
            settled = len(out)
            out += piece
        written = self._text[view.n_text :]
        if not out.startswith(written):
            return Drafted(b"", 0, False)  # it did not finish the character it was shown part of
        if ended:
            settled = len(out)
        skip = len(written)
        return Drafted(bytes(out[skip:]), max(0, settled - skip), ended)


@dataclass(frozen=True, slots=True)
class Drafted:
    """Text a draft wrote after the committed text."""

    text: bytes
    # Bytes of it that are settled: those before its last token (a lookahead:
    # a target token that reaches into it may be the start of a longer one),
    # or all of it where the draft ended its text.
    settled: int
    ended: bool


class PieceIndex:
    """A vocabulary's tokens by their text, for token healing: which tokens
    can write the start of some bytes (their piece begins with them, or is a
    part of their beginning)."""

    def __init__(self, vocab: Vocabulary, n_vocab: int) -> None:
        pieces = [vocab.token_piece(t) for t in range(n_vocab)]
        order = sorted((t for t in range(n_vocab) if pieces[t]), key=pieces.__getitem__)
        self._sorted = [pieces[t] for t in order]
        self._ids = np.array(order, dtype=np.int64)
        self._pieces = pieces
        self._by_piece: dict[bytes, list[int]] = {}
        for t in order:
            self._by_piece.setdefault(pieces[t], []).append(t)
        self._cache: dict[bytes, npt.NDArray[np.int64]] = {}

    def piece(self, token: int) -> bytes:
        return self._pieces[token]

    def writing(self, text: bytes) -> npt.NDArray[np.int64]:
        """Tokens whose piece starts with ``text``, or is a non-empty start of it."""
        found = self._cache.get(text)
        if found is None:
            lo = bisect.bisect_left(self._sorted, text)
            hi = lo
            while hi < len(self._sorted) and self._sorted[hi].startswith(text):
                hi += 1
            shorter = [t for k in range(1, len(text)) for t in self._by_piece.get(text[:k], ())]
            found = np.concatenate([self._ids[lo:hi], np.array(shorter, dtype=np.int64)])
            if len(self._cache) > 4096:
                self._cache.clear()
            self._cache[text] = found
        return found

    def heal(self, withheld: bytes) -> HealingPick:
        """A greedy pick that writes ``withheld`` first (``HealingPick``)."""
        return HealingPick(self, withheld)


def target_spans(
    target: Vocabulary, context: Sequence[int], drafted: Drafted
) -> list[tuple[int, int]]:
    """``drafted`` (text that follows ``context``'s) in the target's tokens,
    each with where it ends in ``drafted.text``.

    Tokenized together with up to ``OVERLAP_TOKENS`` of the committed tokens'
    text (none from before a control token, whose text is not in the pieces),
    the tokens after the committed text are proposed where a token starts
    exactly at its end. Where the join merges (committed "\\n" and drafted
    "\\n" are one token "\\n\\n"), the drafted text is tokenized alone. Only
    tokens within the settled text are proposed: the last may be the first
    part of a longer token otherwise.
    """
    if not drafted.text:
        return []
    start = len(context)
    while start > 0 and len(context) - start < OVERLAP_TOKENS:
        piece = target.token_piece(context[start - 1])
        if not piece:
            break
        start -= 1
    overlap = b"".join(target.token_piece(t) for t in context[start:])
    after = _tokens_after(target, overlap, drafted.text)
    if after is None and overlap:
        after = _tokens_after(target, b"", drafted.text)
    if not after:
        return []
    return [(tok, end) for tok, end in after if end <= drafted.settled]


def _tokens_after(
    target: Vocabulary, overlap: bytes, drafted: bytes
) -> list[tuple[int, int]] | None:
    """The tokens of ``overlap + drafted`` after ``overlap``'s end, with where
    each ends in ``drafted``, where a token starts there (None where none
    does, or the text cannot be written)."""
    data = overlap + drafted
    data = data[: complete_utf8(data)]
    if len(data) <= len(overlap):
        return []
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return None  # invalid text the target could not produce as such
    tokens = target.tokenize(data, add_special=False, parse_special=False)
    ends = token_ends(target, tokens, data, 0)
    if ends is None:
        return None
    first = 0
    if overlap:
        first = next((j + 1 for j, e in enumerate(ends) if e >= len(overlap)), len(ends))
        if first == 0 or ends[first - 1] != len(overlap):
            return None
    return [(tokens[j], ends[j] - len(overlap)) for j in range(first, len(tokens))]


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def _count_ending_by(ends: Sequence[int], offset: int) -> int:
    """How many of the tokens (by their ``ends``) end at or before ``offset``."""
    lo, hi = 0, len(ends)
    while lo < hi:
        mid = (lo + hi) // 2
        if ends[mid] <= offset:
            lo = mid + 1
        else:
            hi = mid
    return lo


class HealingPick:
    """A greedy pick that writes some held-back text first: while some of it
    is left (``healing``), the likeliest token that writes its start; then
    the argmax."""

    def __init__(self, index: PieceIndex, withheld: bytes) -> None:
        self._index = index
        self._rest = withheld

    @property
    def healing(self) -> bool:
        """Whether the next pick still writes held-back text (not the draft's guess)."""
        return bool(self._rest)

    def __call__(self, row: npt.NDArray[np.float32]) -> int:
        if not self._rest:
            return int(np.argmax(row))
        ids = self._index.writing(self._rest)
        if len(ids) == 0:  # nothing writes it (a vocabulary without those bytes)
            self._rest = b""
            return int(np.argmax(row))
        token = int(ids[int(np.argmax(row[ids]))])
        piece = self._index.piece(token)
        self._rest = self._rest[len(piece) :] if self._rest.startswith(piece) else b""
        return token
