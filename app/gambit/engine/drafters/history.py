"""A memory of the user's earlier text for prompt lookup.

Prompt lookup copies from the current conversation; this index lets it copy
from earlier ones too: code pasted yesterday, the boilerplate of a usual
request. Documents (stored messages, as the target's tokens) lie end to end
in one int32 array, each followed by ``SEPARATOR``. Every position whose
``ORDER`` tokens before it lie in one document is keyed by a hash of those
tokens; the keys are kept sorted (``np.searchsorted``: microseconds per query
at millions of tokens) in two runs, a large one and a recent one re-sorted on
every add and merged into the large one once it outgrows a share of it, so an
added message costs about its own size, not the history's.

Memory is bounded: past ``max_tokens`` the oldest documents are dropped
(``BYTES_PER_TOKEN``: the token, its key and its position).

A hash collision never drafts wrong text: every candidate is checked
against the context's tokens.
"""

from __future__ import annotations

import os
import tempfile
import zipfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gambit.fsutil import make_private_dirs

SEPARATOR = -1
# A match needs this many tokens: in millions of tokens of history, matches of
# two or three are mostly chance (prompt lookup in one conversation takes 2).
ORDER = 4
AGREEMENT_MAX = 16  # how far back a match's agreement with the context is measured
CANDIDATES = 8  # latest occurrences of a key checked per run
BYTES_PER_TOKEN = 4 + 8 + 4  # token (int32), key (uint64), position (int32)
# 4 M tokens, ~64 MB: some 10,000 conversations of 400 tokens.
DEFAULT_MAX_TOKENS = 4_000_000
FORMAT_VERSION = 1

_MULTIPLIER = np.uint64(0x9E3779B97F4A7C15)  # odd: the 64-bit golden-ratio constant
_MASK = (1 << 64) - 1


Tokens = Sequence[int] | np.ndarray


class HistoryIndexError(Exception):
    """A stored index that cannot be used (damaged, truncated, another format)."""


@dataclass(frozen=True, slots=True)
class HistoryMatch:
    """The context's tail found in the history: ``length`` tokens agree
    (``ORDER`` to ``AGREEMENT_MAX``), and the history goes on at ``start``."""

    length: int
    start: int


@dataclass
class _Run:
    keys: np.ndarray  # uint64, sorted
    positions: np.ndarray  # int32: the follower's index in the token array; latest last per key

    @classmethod
    def empty(cls) -> _Run:
        return cls(np.empty(0, np.uint64), np.empty(0, np.int32))

    def __len__(self) -> int:
        return len(self.keys)


def _sorted_run(keys: np.ndarray, positions: np.ndarray) -> _Run:
    # Stable: equal keys keep their positions' order, so the latest is last.
    order = np.argsort(keys, kind="stable")
    return _Run(keys[order], positions[order])


def _key_of(tokens: Sequence[int]) -> int:
    """The key of ``ORDER`` tokens, as ``HistoryIndex._keys`` computes it."""
    h = 0
    for tok in tokens:
        h = (h * int(_MULTIPLIER) + tok + 2) & _MASK
    return h


class HistoryIndex:
    """Token documents, searchable by the last ``ORDER`` tokens of a context."""

    def __init__(self, max_tokens: int = DEFAULT_MAX_TOKENS) -> None:
        if max_tokens < 1:
            raise ValueError("max_tokens must be positive")
        self.max_tokens = max_tokens
        self._buf = np.empty(1024, np.int32)
        self._n = 0  # tokens used in _buf, separators included
        self._doc_ids: list[int] = []
        self._doc_tags: list[int] = []
        self._doc_starts: list[int] = []
        self._big = _Run.empty()
        self._recent = _Run.empty()
        # Whether documents were ever dropped to stay within max_tokens (the
        # caller then knows not to offer documents older than the oldest kept).
        self.dropped = False

    # ------------------------------------------------------------------ content
    def __len__(self) -> int:
        """Tokens held, separators included."""
        return self._n

    @property
    def n_documents(self) -> int:
        return len(self._doc_ids)

    def documents(self) -> dict[int, int]:
        """Each document's id -> its tag (whatever the caller stored with it)."""
        return dict(zip(self._doc_ids, self._doc_tags, strict=True))

    @property
    def nbytes(self) -> int:
        """Memory held by the arrays (the token buffer's spare room included)."""
        runs = (self._big, self._recent)
        return self._buf.nbytes + sum(r.keys.nbytes + r.positions.nbytes for r in runs)

    def add(self, doc_id: int, tokens: Tokens, tag: int = 0) -> None:
        """Append a document (dropping the oldest ones past ``max_tokens``)."""
        self.add_many([(doc_id, tokens, tag)])

    def add_many(self, docs: Iterable[tuple[int, Tokens, int]]) -> None:
        """Append documents ``(id, tokens, tag)`` in order; keyed once at the end."""
        first = self._n
        for doc_id, tokens, tag in docs:
            arr = np.asarray(tokens, dtype=np.int64)
            if arr.size and (arr.min() < 0 or arr.max() > np.iinfo(np.int32).max):
                raise ValueError("token ids must be non-negative int32 values")
            self._reserve(self._n + arr.size + 1)
            self._doc_ids.append(doc_id)
            self._doc_tags.append(tag)
            self._doc_starts.append(self._n)
            self._buf[self._n : self._n + arr.size] = arr
            self._n += arr.size
            self._buf[self._n] = SEPARATOR
            self._n += 1
        if self._n == first:
            return
        if self._n > self.max_tokens:
            self._drop_oldest()
            return
        keys, positions = self._keys(first, self._n)
        recent = _Run(
            np.concatenate([self._recent.keys, keys]),
            np.concatenate([self._recent.positions, positions]),
        )
        if len(recent) > max(65_536, len(self._big) // 4):
            both = _Run(
                np.concatenate([self._big.keys, recent.keys]),
                np.concatenate([self._big.positions, recent.positions]),
            )
            self._big, self._recent = _sorted_run(both.keys, both.positions), _Run.empty()
        else:
            self._recent = _sorted_run(recent.keys, recent.positions)

    def remove(self, doc_ids: Iterable[int]) -> None:
        """Forget these documents (their tokens leave memory now)."""
        gone = set(doc_ids)
        if not gone.intersection(self._doc_ids):
            return
        kept = [
            (doc_id, self._document(i), tag)
            for i, (doc_id, tag) in enumerate(zip(self._doc_ids, self._doc_tags, strict=True))
            if doc_id not in gone
        ]
        self._reset()
        self.add_many(kept)

    def _document(self, i: int) -> np.ndarray:
        start = self._doc_starts[i]
        end = self._doc_starts[i + 1] - 1 if i + 1 < len(self._doc_starts) else self._n - 1
        document: np.ndarray = self._buf[start:end].copy()
        return document

    def _reset(self) -> None:
        self._buf = np.empty(1024, np.int32)
        self._n = 0
        self._doc_ids, self._doc_tags, self._doc_starts = [], [], []
        self._big, self._recent = _Run.empty(), _Run.empty()

    def _reserve(self, n: int) -> None:
        if n > len(self._buf):
            grown = np.empty(max(n, 2 * len(self._buf)), np.int32)
            grown[: self._n] = self._buf[: self._n]
            self._buf = grown

    def _drop_oldest(self) -> None:
        """Keep the newest documents within 90 % of ``max_tokens`` (room for
        the next ones before the next drop), then key everything afresh."""
        self.dropped = True
        budget = int(self.max_tokens * 0.9)
        starts = self._doc_starts
        first = 0
        while first < len(starts) and self._n - starts[first] > budget:
            first += 1
        offset = starts[first] if first < len(starts) else self._n
        tokens = self._buf[offset : self._n].copy()
        ids, tags = self._doc_ids[first:], self._doc_tags[first:]
        new_starts = [s - offset for s in starts[first:]]
        self._buf = np.empty(max(1024, len(tokens)), np.int32)
        self._buf[: len(tokens)] = tokens
        self._n = len(tokens)
        self._doc_ids, self._doc_tags, self._doc_starts = ids, tags, new_starts
        keys, positions = self._keys(0, self._n)
        self._big, self._recent = _sorted_run(keys, positions), _Run.empty()

    def _keys(self, start: int, end: int) -> tuple[np.ndarray, np.ndarray]:
        """Keys and positions of the followers in ``[start, end)`` whose
        ``ORDER`` tokens before them lie in one document (``start`` is a
        document's start)."""
        tokens = self._buf[start:end]
        n_keys = len(tokens) - ORDER
        if n_keys <= 0:
            return np.empty(0, np.uint64), np.empty(0, np.int32)
        t = tokens.astype(np.uint64) + np.uint64(2)  # (SEPARATOR becomes 1; never 0)
        h = np.zeros(n_keys, np.uint64)
        with np.errstate(over="ignore"):
            for j in range(ORDER):
                h = h * _MULTIPLIER + t[j : j + n_keys]
        # A key is valid when none of its ORDER tokens nor the follower is a separator.
        seps = np.concatenate([[0], np.cumsum(tokens == SEPARATOR)])
        valid = seps[ORDER + 1 : ORDER + 1 + n_keys] == seps[:n_keys]
        positions = np.arange(start + ORDER, end, dtype=np.int32)
        return h[valid], positions[valid]

    # ------------------------------------------------------------------ queries
    def match(self, context: Sequence[int]) -> HistoryMatch | None:
        """The occurrence of the context's last ``ORDER`` tokens that agrees
        with it furthest back (up to ``AGREEMENT_MAX``; on a tie, the latest)."""
        if len(context) < ORDER or self._n == 0:
            return None
        tail = [int(t) for t in context[-AGREEMENT_MAX:]]
        key = np.uint64(_key_of(tail[-ORDER:]))
        buf = self._buf
        best: HistoryMatch | None = None
        for run in (self._recent, self._big):  # latest first
            lo = int(np.searchsorted(run.keys, key, "left"))
            hi = int(np.searchsorted(run.keys, key, "right"))
            for pos in run.positions[max(lo, hi - CANDIDATES) : hi][::-1].tolist():
                before = buf[max(0, pos - len(tail)) : pos].tolist()
                m = 0
                while m < len(before) and before[-1 - m] == tail[-1 - m]:
                    m += 1
                if m >= ORDER and (best is None or m > best.length):
                    best = HistoryMatch(m, pos)
        return best

    def continuation(self, start: int, n: int) -> tuple[int, ...]:
        """Up to ``n`` tokens from ``start``, within its document."""
        window = self._buf[start : min(start + n, self._n)]
        ends = np.flatnonzero(window == SEPARATOR)
        if ends.size:
            window = window[: ends[0]]
        return tuple(window.tolist())

    # ------------------------------------------------------------------ storage
    def save(self, path: Path, fingerprint: str) -> None:
        """Write the documents to ``path`` (atomically; the keys are rebuilt on
        load). ``fingerprint`` names the tokenizer the tokens belong to.
        Raises ``OSError`` (a full disk, a read-only folder)."""
        make_private_dirs(path.parent)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                np.savez(
                    f,
                    version=np.array(FORMAT_VERSION),
                    fingerprint=np.array(fingerprint),
                    tokens=self._buf[: self._n],
                    doc_ids=np.array(self._doc_ids, np.int64),
                    doc_tags=np.array(self._doc_tags, np.int64),
                    doc_starts=np.array(self._doc_starts, np.int64),
                    dropped=np.array(self.dropped),
                )
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    @classmethod
    def load(
        cls, path: Path, fingerprint: str, n_vocab: int, max_tokens: int = DEFAULT_MAX_TOKENS
    ) -> HistoryIndex:
        """The index saved at ``path`` for the tokenizer ``fingerprint``.
        Raises ``FileNotFoundError``, or ``HistoryIndexError`` for a file that
        is damaged, of another version or tokenizer, or holds token ids
        outside ``[0, n_vocab)``."""
        try:
            # (opened here: np.load leaves a file it could not read open)
            with path.open("rb") as f, np.load(f, allow_pickle=False) as data:
                version = int(data["version"])
                found = str(data["fingerprint"])
                tokens = np.asarray(data["tokens"])
                ids = np.asarray(data["doc_ids"])
                tags = np.asarray(data["doc_tags"])
                starts = np.asarray(data["doc_starts"])
                dropped = bool(data["dropped"])
        except FileNotFoundError:
            raise
        except (OSError, ValueError, KeyError, TypeError, EOFError, zipfile.BadZipFile) as exc:
            raise HistoryIndexError(f"{path} cannot be read: {exc}") from exc
        if version != FORMAT_VERSION:
            raise HistoryIndexError(f"{path} is format {version}, not {FORMAT_VERSION}")
        if found != fingerprint:
            raise HistoryIndexError(f"{path} holds another tokenizer's tokens")
        _check_layout(path, tokens, ids, tags, starts, n_vocab)
        index = cls(max_tokens)
        n = len(tokens)
        index._buf = np.empty(max(1024, n), np.int32)
        index._buf[:n] = tokens
        index._n = n
        index._doc_ids = ids.tolist()
        index._doc_tags = tags.tolist()
        index._doc_starts = starts.tolist()
        index.dropped = dropped
        if n > max_tokens:
            index._drop_oldest()
        else:
            keys, positions = index._keys(0, n)
            index._big = _sorted_run(keys, positions)
        return index


def _check_layout(
    path: Path,
    tokens: np.ndarray,
    ids: np.ndarray,
    tags: np.ndarray,
    starts: np.ndarray,
    n_vocab: int,
) -> None:
    """Raise ``HistoryIndexError`` unless the arrays are documents as ``save`` writes them."""

    def bad(why: str) -> HistoryIndexError:
        return HistoryIndexError(f"{path} is damaged: {why}")

    if tokens.dtype != np.int32 or tokens.ndim != 1:
        raise bad("its tokens are not a list of int32")
    for name, arr in (("ids", ids), ("tags", tags), ("starts", starts)):
        if arr.dtype != np.int64 or arr.ndim != 1 or len(arr) != len(ids):
            raise bad(f"its document {name} do not match")
    if len(tokens) and (tokens.min() < SEPARATOR or tokens.max() >= n_vocab):
        raise bad("it holds token ids this model does not have")
    if len(ids) == 0:
        if len(tokens):
            raise bad("tokens without documents")
        return
    if len(np.unique(ids)) != len(ids):
        raise bad("a document appears twice")
    if starts[0] != 0 or np.any(np.diff(starts) < 1) or starts[-1] >= len(tokens):
        raise bad("its documents overlap or lie outside the tokens")
    ends = np.append(starts[1:], len(tokens)) - 1
    if not np.all(tokens[ends] == SEPARATOR):
        raise bad("a document does not end where it says")
    if int(np.count_nonzero(tokens == SEPARATOR)) != len(ids):
        raise bad("a separator inside a document")
