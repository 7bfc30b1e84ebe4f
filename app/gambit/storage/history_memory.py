"""The memory prompt lookup copies from: the user's stored messages as a ``HistoryIndex``.

It reads private text, so it stays beside the conversations file (in the
user's data folder, ``memory_folder``), is never read when the setting is
off, and "Forget" in Settings deletes it. The index is kept in step with the conversations
file before each reply (``HistoryMemory.index``): messages saved since the
last sync are tokenized and added; deleted or edited ones are dropped from
memory and from the saved file. A saved index that is damaged, truncated or
of another tokenizer is rebuilt from the conversations file; a file that
cannot be written (a full disk) leaves the index in memory only.

Every stored message is a document, user turns and replies alike; a reply
being generated is stored empty until it ends, so it is never its own
source.
"""

from __future__ import annotations

import contextlib
import logging
import re
import sqlite3
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gambit.engine.drafters.history import DEFAULT_MAX_TOKENS, HistoryIndex, HistoryIndexError

log = logging.getLogger(__name__)

MEMORY_FOLDER_NAME = "lookup-memory"
_BATCH = 500  # messages read (and tokenized) per query
_STAMP_MOD = 1 << 24  # (see _tag)


def memory_folder(store_path: Path) -> Path:
    """Where the memory of the conversations file ``store_path`` is saved."""
    return Path(store_path).parent / MEMORY_FOLDER_NAME


def forget(folder: Path) -> int:
    """Delete the saved indexes in ``folder``; how many files went. Raises
    ``OSError`` when one cannot be deleted."""
    removed = 0
    if folder.is_dir():
        for path in folder.glob("*.npz"):
            path.unlink(missing_ok=True)
            removed += 1
    return removed


@dataclass(frozen=True)
class Tokenizer:
    """The target's tokenizer as the memory needs it: its name in file names
    (``fingerprint``: equal for models that tokenize alike), its vocabulary
    size, and text -> tokens (no BOS, special tokens as text)."""

    fingerprint: str
    n_vocab: int
    tokenize: Callable[[str], list[int]]


@dataclass(frozen=True)
class SyncReport:
    """What one ``HistoryMemory.index`` call did."""

    added: int = 0
    removed: int = 0
    rebuilt: str | None = None  # why the saved index was not used
    seconds: float = 0.0


class HistoryMemory:
    """The index of the messages in the conversations file ``store_path``,
    saved in ``folder`` (default: ``memory_folder(store_path)``) per
    tokenizer. Used on the engine's thread only."""

    def __init__(
        self, store_path: Path, folder: Path | None = None, max_tokens: int = DEFAULT_MAX_TOKENS
    ) -> None:
        self.store_path = Path(store_path)
        self.folder = folder or memory_folder(self.store_path)
        self.max_tokens = max_tokens
        self._index: HistoryIndex | None = None
        self._fingerprint = ""
        self._signature: tuple[int, int, int, int] | None = None  # the file's, at the last sync
        self._unsaved = False  # added to since last saved
        # Messages read, not yet added: a sync that ran out of time leaves them
        # here (newest first) and the next one goes on, so that tokenizing a
        # long history (~1 MB of text a second) never holds up a reply.
        self._backlog: list[tuple[int, np.ndarray, int]] = []
        self.last_sync = SyncReport()
        self.pending = False  # stored messages remain to be read: ``index`` again goes on

    def path_for(self, fingerprint: str) -> Path:
        return self.folder / f"{re.sub(r'[^A-Za-z0-9_.-]', '_', fingerprint)}.npz"

    def index(self, tokenizer: Tokenizer, budget_s: float | None = None) -> HistoryIndex:
        """The index, in step with the conversations file (saved if it
        changed); within ``budget_s`` of tokenizing, after which ``pending``
        says that more remains (a first build holds nothing until it is whole)."""
        t0 = time.perf_counter()
        rebuilt: str | None = None
        if self._index is None or self._fingerprint != tokenizer.fingerprint:
            self._index, rebuilt = self._load(tokenizer)
            self._fingerprint = tokenizer.fingerprint
            self._signature = None
            self._backlog = []
        index = self._index
        try:
            with self._reader() as conn:
                signature = _signature(conn)
                added = removed = 0
                if signature != self._signature:
                    added, removed, whole = _sync(conn, index, tokenizer, self._backlog, budget_s)
                    self._signature = signature if whole else None
                    self.pending = not whole
        except sqlite3.Error as exc:  # a damaged or vanished file: keep what is known
            log.warning("lookup memory: cannot read %s: %s", self.store_path, exc)
            added = removed = 0
            self.pending = False
        # Deleted text leaves the saved file at once; added messages are saved
        # by ``flush`` after the reply (up to 16 MB, not before its first token).
        if removed or rebuilt:
            self._save(index)
        elif added:
            self._unsaved = True
        self.last_sync = SyncReport(added, removed, rebuilt, time.perf_counter() - t0)
        if added or removed or rebuilt:
            log.info("lookup memory: %s", self.last_sync)
        return index

    def flush(self) -> None:
        """Save what the last syncs added, if anything (the engine's thread,
        after a reply). A kill before it costs nothing: the next sync adds
        the messages again from the conversations file."""
        if self._unsaved and self._index is not None:
            self._save(self._index)

    def forget(self) -> None:
        """Drop the index from memory and delete its saved files."""
        self._index = None
        self._signature = None
        self._unsaved = False
        self._backlog = []
        self.pending = False
        forget(self.folder)

    def _load(self, tokenizer: Tokenizer) -> tuple[HistoryIndex, str | None]:
        path = self.path_for(tokenizer.fingerprint)
        try:
            return (
                HistoryIndex.load(path, tokenizer.fingerprint, tokenizer.n_vocab, self.max_tokens),
                None,
            )
        except FileNotFoundError:
            return HistoryIndex(self.max_tokens), "no saved index yet"
        except HistoryIndexError as exc:
            log.warning("lookup memory: rebuilding: %s", exc)
            return HistoryIndex(self.max_tokens), str(exc)

    def _save(self, index: HistoryIndex) -> None:
        try:
            index.save(self.path_for(self._fingerprint), self._fingerprint)
            self._unsaved = False
        except OSError as exc:  # a full disk, a read-only folder: memory only, tried again later
            log.warning("lookup memory: cannot save the index: %s", exc)

    @contextlib.contextmanager
    def _reader(self) -> Iterator[sqlite3.Connection]:
        if not self.store_path.is_file():
            raise sqlite3.OperationalError("no conversations file")
        conn = sqlite3.connect(f"{self.store_path.resolve().as_uri()}?mode=ro", uri=True)
        try:
            yield conn
        finally:
            conn.close()


# A message's length as the memory compares it: its UTF-8 bytes. (SQLite's
# length() of text counts characters up to the first NUL character, which an
# imported message may hold: such a message would look edited at every sync.)
_LENGTH = "length(CAST(content AS BLOB))"


def _signature(conn: sqlite3.Connection) -> tuple[int, int, int, int]:
    """Changes when messages are added, removed or rewritten (to another
    length, or in a new row that took a deleted row's id)."""
    count, last, total, stamps = conn.execute(
        f"SELECT count(*), coalesce(max(id), 0), coalesce(sum({_LENGTH}), 0),"
        f" coalesce(sum(CAST(created_at * 1000000 AS INTEGER) % {_STAMP_MOD}), 0)"
        " FROM messages WHERE content != ''"
    ).fetchone()
    return int(count), int(last), int(total), int(stamps)


def _tag(length: int, created_at: float) -> int:
    """A message's mark in the index (``HistoryIndex`` tags): its length and
    the microsecond its row was stored (modulo ``_STAMP_MOD``, some 17 s).
    Edit and resend stores the new text in a new row, which SQLite may give
    the deleted row's id: its time tells them apart where the length does not."""
    return (length << 24) | (round(created_at * 1_000_000) % _STAMP_MOD)


def _sync(
    conn: sqlite3.Connection,
    index: HistoryIndex,
    tokenizer: Tokenizer,
    backlog: list[tuple[int, np.ndarray, int]],
    budget_s: float | None,
) -> tuple[int, int, bool]:
    """Bring ``index`` in step with the file's messages, reading new ones
    newest first into ``backlog`` for ``budget_s`` of tokenizing; they join the index
    together, oldest first, once all are read (or the index would be full).
    Returns (added, removed, whether the index is whole)."""
    stored = dict(
        (i, _tag(length, created_at))
        for i, length, created_at in conn.execute(
            f"SELECT id, {_LENGTH}, created_at FROM messages WHERE content != '' ORDER BY id"
        )
    )
    known = index.documents()
    changed = [i for i, tag in known.items() if stored.get(i) != tag]
    index.remove(changed)
    backlog[:] = [doc for doc in backlog if stored.get(doc[0]) == doc[2]]  # (deleted meanwhile)
    # Past the memory bound the oldest messages were dropped to make room:
    # older ones than the oldest kept are not read again.
    floor = min(known.keys() - set(changed), default=0) if index.dropped else 0
    taken = index.documents().keys() | {doc[0] for doc in backlog}
    wanted = [i for i in stored if i not in taken and i >= floor]
    # Newest first, until the index would be full: a long history is not
    # tokenized only to drop its oldest part again.
    room = index.max_tokens - len(index) - sum(len(doc[1]) + 1 for doc in backlog)
    full = room <= 0
    # (from here: the queries above scan the file, and must not eat the budget)
    deadline = None if budget_s is None else time.perf_counter() + budget_s
    out_of_time = False  # (checked after each message: every slice reads one at least)
    for end in range(len(wanted), 0, -_BATCH):
        if full or out_of_time:
            break
        batch = wanted[max(0, end - _BATCH) : end]
        marks = ",".join("?" * len(batch))
        rows = conn.execute(
            f"SELECT id, content, created_at FROM messages WHERE id IN ({marks}) ORDER BY id DESC",
            batch,
        )
        for i, text, created_at in rows:
            tokens = np.asarray(tokenizer.tokenize(text), np.int32)
            backlog.append((i, tokens, _tag(len(text.encode("utf-8")), created_at)))
            room -= len(tokens) + 1
            if room <= 0:
                full = True
                break
            if deadline is not None and time.perf_counter() > deadline:
                out_of_time = True
                break
    if not (full or _all_read(wanted, backlog)):
        return 0, len(changed), False
    if full:
        index.dropped = True  # (the older ones stay out, as if dropped)
    added = len(backlog)
    index.add_many(sorted(backlog, key=lambda doc: doc[0]))
    backlog.clear()
    return added, len(changed), True


def _all_read(wanted: list[int], backlog: list[tuple[int, np.ndarray, int]]) -> bool:
    read = {doc[0] for doc in backlog}
    return all(i in read for i in wanted)
