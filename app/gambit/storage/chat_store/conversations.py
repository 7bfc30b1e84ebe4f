"""Chat history: conversations and their messages in one SQLite file.

Why SQLite: a single file that survives a crash mid-write (the journal rolls
an interrupted transaction back on the next open), searchable without loading
everything, and in the standard library.

The store belongs to the Qt UI thread (``check_same_thread=True`` makes any
other use fail loudly). Every write runs in its own ``BEGIN IMMEDIATE``
transaction, so a second Gambit window on the same file waits for the write
lock up front instead of failing half-way through.

Opening checks the file (``PRAGMA quick_check`` and the tables' shape): a
damaged file raises ``DamagedStoreError`` and a file whose write lock another
process keeps raises ``StoreInUseError``, so that the caller
(``storage.chat_store.recovery.open_history``) can start over or work in memory.
"""

from __future__ import annotations

import builtins
import json
import logging
import sqlite3
import time
from collections.abc import Iterator, Sequence
from contextlib import closing, contextmanager
from pathlib import Path
from types import TracebackType
from typing import Any, cast

from gambit.fsutil import make_private_dirs
from gambit.storage import paths
from gambit.storage.chat_store.rows import ConversationSummary, Role, StoredMessage
from gambit.storage.chat_store.schema import (
    MODES,
    READ_CHECKS,
    SCHEMA_VERSION,
    bring_up_to_date,
)
from gambit.storage.chat_store.store_errors import (
    LOCK_TIMEOUT_S,
    ConversationNotFoundError,
    ConversationStoreError,
    DamagedStoreError,
    MessageNotFoundError,
    StoreInUseError,
)
from gambit.storage.documents import split
from gambit.storage.files import touch_private

log = logging.getLogger(__name__)

ROLES: tuple[Role, ...] = ("system", "user", "assistant")
PREVIEW_CHARS = 100

# Shared by list() and get(): one row per conversation with its message count
# and the start of its latest non-system message (cut in SQL so that a long
# reply is not read just to show 100 characters of it).
_SUMMARY_SELECT = """
    SELECT c.id, c.title, c.created_at, c.updated_at, c.mode, c.preset, c.branched_from,
           (SELECT COUNT(*) FROM messages m WHERE m.conversation_id = c.id),
           (SELECT substr(m.content, 1, 4 * ?) FROM messages m
             WHERE m.conversation_id = c.id AND m.role != 'system'
             ORDER BY m.position DESC LIMIT 1)
      FROM conversations c
"""

# Strictly later than the newest updated_at in the file, by at least this much:
# see ConversationStore._stamp.
_TICK = 0.001


def default_store_path() -> Path:
    return paths.data_dir() / "conversations.sqlite3"


def title_from(text: str) -> str:
    """A conversation's title from its first message: one line, at most 48 characters."""
    words = " ".join(text.split())
    return words if len(words) <= 48 else words[:47].rstrip() + "…"


# What a branch's title adds to its conversation's (Branch from here): the
# list shows the branch marked at the front, where a long title cannot cut it.
BRANCH_SUFFIX = " (branch)"


def message_title(content: str) -> str:
    """The title a conversation takes from its first message (``title_from``):
    the typed text, else the first attached document's name."""
    parts = split(content)
    text = " ".join(p for p in parts if isinstance(p, str))
    names = [p.name for p in parts if not isinstance(p, str)]
    return title_from(text or (names[0] if names else ""))


def _check_mode(mode: str) -> None:
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")


def _insert_system(conn: sqlite3.Connection, conv_id: int, text: str, at: float) -> None:
    """``text`` as the conversation's system prompt, at position 0 (kept free)."""
    conn.execute(
        "INSERT INTO messages (conversation_id, position, role, content, created_at)"
        " VALUES (?, 0, 'system', ?, ?)",
        (conv_id, text, at),
    )


def _contains(text: str | None, needle: str | None) -> bool:
    # Search in Python rather than with LIKE: SQLite's LIKE folds case for
    # ASCII only ("Привет" would not find "привет"), and a plain substring
    # test has no wildcards, so "%" and "_" in a search are just characters.
    return text is not None and needle is not None and needle in text.casefold()


def _preview(text: str | None) -> str:
    if not text:
        return ""
    line = " ".join(text.split())  # one line: newlines and runs of spaces collapse
    return line if len(line) <= PREVIEW_CHARS else line[: PREVIEW_CHARS - 1].rstrip() + "…"


def _summary(row: tuple[Any, ...]) -> ConversationSummary:
    conv_id, title, created_at, updated_at, mode, preset, branched_from, n_messages, latest = row
    return ConversationSummary(
        id=conv_id,
        title=title,
        created_at=created_at,
        updated_at=updated_at,
        n_messages=n_messages,
        preview=_preview(latest),
        mode=mode,
        preset=preset,
        branched_from=branched_from,
    )


def _encode_stats(stats: dict[str, Any] | None) -> str | None:
    # Encoded before the transaction starts: a value json cannot write is the
    # caller's bug (TypeError) and should not leave a transaction to roll back.
    return None if stats is None else json.dumps(stats, ensure_ascii=False)


def _decode_stats(text: str | None, msg_id: int) -> dict[str, Any] | None:
    if text is None:
        return None
    try:
        stats = json.loads(text)
    except ValueError:
        log.warning("message %d: unreadable stats ignored", msg_id)
        return None
    return cast(dict[str, Any], stats) if isinstance(stats, dict) else None


def _is_locked(exc: sqlite3.Error) -> bool:
    # SQLITE_BUSY ("database is locked") and SQLITE_LOCKED ("database table is locked")
    return isinstance(exc, sqlite3.OperationalError) and "is locked" in str(exc)


def _memory_copy(path: Path) -> sqlite3.Connection:
    """An in-memory database holding a copy of the file at ``path`` (readers are
    not blocked by another process's write lock), or an empty one when the
    file cannot be read, is damaged or is from a newer Gambit."""
    conn = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=True)
    if not path.is_file():
        return conn
    try:
        uri = f"{path.resolve().as_uri()}?mode=ro"
        with closing(sqlite3.connect(uri, uri=True, timeout=1.0)) as src:
            src.backup(conn)
        (version,) = conn.execute("PRAGMA user_version").fetchone()
        (check,) = conn.execute("PRAGMA quick_check(1)").fetchone()
        if version <= SCHEMA_VERSION and check == "ok":
            return conn
        log.warning("%s: its copy in memory is unusable (format %s, %s)", path, version, check)
    except sqlite3.Error as exc:
        log.warning("%s: could not copy it into memory: %s", path, exc)
    conn.close()
    return sqlite3.connect(":memory:", isolation_level=None, check_same_thread=True)


class ConversationStore:
    """Conversations and messages in the SQLite file at ``path`` (created if missing).

    With ``in_memory``, the file is only read: the store lives in memory,
    starting as a copy of ``path`` where it can be read, and nothing written
    to it reaches the file (for when the file is locked or cannot be written).
    """

    def __init__(self, path: Path, *, in_memory: bool = False) -> None:
        self.path = Path(path)
        self.in_memory = in_memory
        try:
            if in_memory:
                self._conn = _memory_copy(self.path)
            else:
                make_private_dirs(self.path.parent)
                touch_private(self.path)  # SQLite gives its journals the file's mode
                # isolation_level=None: no implicit transactions; _write() opens them.
                self._conn = sqlite3.connect(
                    self.path, timeout=LOCK_TIMEOUT_S, isolation_level=None, check_same_thread=True
                )
        except (OSError, sqlite3.Error) as exc:  # a folder that cannot be created or opened
            raise ConversationStoreError(
                f"Cannot open the chat history {self.path}: {exc}."
            ) from exc
        try:
            self._open()
        except sqlite3.DatabaseError as exc:
            self._conn.close()
            if _is_locked(exc):
                raise StoreInUseError(self.path) from exc
            if type(exc) is sqlite3.DatabaseError:  # SQLITE_CORRUPT, SQLITE_NOTADB
                raise DamagedStoreError(self.path, str(exc)) from exc
            raise ConversationStoreError(
                f"Cannot open the chat history {self.path}: {exc}."
            ) from exc
        except BaseException:
            self._conn.close()
            raise

    def _open(self) -> None:
        conn = self._conn
        # Every page read once before anything is written, so that a damaged
        # file is reported rather than half-used (milliseconds per MB).
        (check,) = conn.execute("PRAGMA quick_check(1)").fetchone()
        if check != "ok":  # "*** in database main ***\nPage 24: ..."
            lines = [line for line in str(check).splitlines() if not line.startswith("***")]
            detail = lines[0] if lines else str(check)
            raise DamagedStoreError(self.path, f"fails SQLite's integrity check: {detail}")
        # WAL: readers never block the writer and a crash cannot corrupt the file.
        # Some file systems (network shares) refuse it; SQLite then keeps its
        # rollback journal, which is just as safe, so the answer is not checked.
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA foreign_keys=ON")  # per connection: needed for ON DELETE CASCADE
        conn.create_function("gambit_contains", 2, _contains, deterministic=True)
        with self._write():
            # Read the version inside the write lock: two windows opening a
            # new file at once must not both create the schema.
            (version,) = conn.execute("PRAGMA user_version").fetchone()
            if version > SCHEMA_VERSION:
                raise ConversationStoreError(
                    f"The chat history {self.path} was written by a newer Gambit "
                    f"(format {version}; this version reads up to {SCHEMA_VERSION}). "
                    "Update Gambit to open it."
                )
            if version < SCHEMA_VERSION:
                bring_up_to_date(conn)
        try:
            for check in READ_CHECKS:
                conn.execute(check)
        except sqlite3.OperationalError as exc:
            raise DamagedStoreError(self.path, str(exc)) from exc

    # ---------------------------------------------------------------- lifecycle
    def close(self) -> None:
        """Close the file (idempotent). In WAL mode this also folds the log back in."""
        self._conn.close()

    def __enter__(self) -> ConversationStore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One transaction: committed if the block completes, rolled back otherwise."""
        conn = self._conn
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                # SQLite may already have rolled back on its own (disk full, I/O error).
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
        except sqlite3.OperationalError as exc:
            if _is_locked(exc):
                raise StoreInUseError(self.path) from exc
            # Disk full, read-only folder, file locked by another program for
            # too long: the user can do something about these, so say which file.
            raise ConversationStoreError(
                f"Could not save to the chat history {self.path}: {exc}."
            ) from exc

    def _stamp(self, conn: sqlite3.Connection) -> float:
        """The time to record as a conversation's updated_at.

        Strictly after every updated_at already stored, so that the conversation
        just touched is listed first even when the clock has not advanced since
        the last write (Windows' clock ticks every ~16 ms) or was set back.
        """
        (latest,) = conn.execute("SELECT MAX(updated_at) FROM conversations").fetchone()
        now = time.time()
        return now if latest is None or now > latest else float(latest) + _TICK

    @staticmethod
    def _require_conversation(conn: sqlite3.Connection, conv_id: int) -> None:
        if conn.execute("SELECT 1 FROM conversations WHERE id = ?", (conv_id,)).fetchone() is None:
            raise ConversationNotFoundError(conv_id)

    def _touch(self, conn: sqlite3.Connection, conv_id: int) -> None:
        conn.execute(
            "UPDATE conversations SET updated_at = ? WHERE id = ?", (self._stamp(conn), conv_id)
        )

    @staticmethod
    def _message_conversation(conn: sqlite3.Connection, msg_id: int) -> tuple[int, int]:
        """(conversation id, position) of a message."""
        row = conn.execute(
            "SELECT conversation_id, position FROM messages WHERE id = ?", (msg_id,)
        ).fetchone()
        if row is None:
            raise MessageNotFoundError(msg_id)
        return int(row[0]), int(row[1])

    # ------------------------------------------------------------ conversations
    def create(
        self, title: str = "New chat", mode: str = "chat", preset: str = "", system_prompt: str = ""
    ) -> int:
        """A new conversation, empty but for ``system_prompt`` (if not blank) as
        its first message; returns its id. It is listed first."""
        title = title.strip() or "New chat"
        _check_mode(mode)
        with self._write() as conn:
            stamp = self._stamp(conn)
            cur = conn.execute(
                "INSERT INTO conversations (title, created_at, updated_at, mode, preset)"
                " VALUES (?, ?, ?, ?, ?)",
                (title, stamp, stamp, mode, preset),
            )
            assert cur.lastrowid is not None
            if system_prompt.strip():
                _insert_system(conn, cur.lastrowid, system_prompt.strip(), stamp)
            return cur.lastrowid

    def set_system_prompt(self, conv_id: int, text: str) -> None:
        """Make ``text`` the conversation's system prompt, its first message
        (blank: it has none); the other messages stay in their order."""
        text = text.strip()
        with self._write() as conn:
            self._require_conversation(conn, conv_id)
            first = conn.execute(
                "SELECT id, role FROM messages WHERE conversation_id = ? ORDER BY position LIMIT 1",
                (conv_id,),
            ).fetchone()
            if first is not None and first[1] == "system":
                if text:
                    conn.execute("UPDATE messages SET content = ? WHERE id = ?", (text, first[0]))
                else:
                    conn.execute("DELETE FROM messages WHERE id = ?", (first[0],))
            elif text:
                # Every position one up, through negatives: positions stay unique throughout.
                for step in ("-position - 1", "-position"):
                    conn.execute(
                        f"UPDATE messages SET position = {step} WHERE conversation_id = ?",
                        (conv_id,),
                    )
                _insert_system(conn, conv_id, text, time.time())

    def set_mode(self, conv_id: int, mode: str) -> None:
        """Write the conversation as chat turns or as one text ("completion");
        its messages stay as they are, and it stays where it is in the list."""
        _check_mode(mode)
        self._set(conv_id, "mode", mode)

    def set_preset(self, conv_id: int, preset: str) -> None:
        """Name the preset the conversation's replies are sampled with."""
        self._set(conv_id, "preset", preset)

    def _set(self, conv_id: int, column: str, value: str) -> None:
        with self._write() as conn:
            cur = conn.execute(
                f"UPDATE conversations SET {column} = ? WHERE id = ?", (value, conv_id)
            )
            if cur.rowcount == 0:
                raise ConversationNotFoundError(conv_id)

    def list(self, search: str = "") -> builtins.list[ConversationSummary]:
        """Conversations, most recently updated first.

        With ``search``, only those whose title or any message contains it,
        ignoring case (Unicode case folding); it is matched as plain text.
        """
        needle = search.strip().casefold()
        sql = _SUMMARY_SELECT
        params: tuple[object, ...] = (PREVIEW_CHARS,)
        if needle:
            sql += """
             WHERE gambit_contains(c.title, ?)
                OR EXISTS (SELECT 1 FROM messages m
                            WHERE m.conversation_id = c.id
                              AND gambit_contains(m.content, ?))
            """
            params += (needle, needle)
        sql += " ORDER BY c.updated_at DESC, c.id DESC"
        return [_summary(row) for row in self._conn.execute(sql, params)]

    def get(self, conv_id: int) -> ConversationSummary:
        row = self._conn.execute(
            _SUMMARY_SELECT + " WHERE c.id = ?", (PREVIEW_CHARS, conv_id)
        ).fetchone()
        if row is None:
            raise ConversationNotFoundError(conv_id)
        return _summary(row)

    def rename(self, conv_id: int, title: str) -> None:
        """Set the title (stripped). Does not move the conversation up the list:
        renaming is not new activity, and the entry jumping away under the
        pointer would be disorienting."""
        title = title.strip()
        if not title:
            raise ValueError("A conversation title cannot be empty.")
        with self._write() as conn:
            cur = conn.execute("UPDATE conversations SET title = ? WHERE id = ?", (title, conv_id))
            if cur.rowcount == 0:
                raise ConversationNotFoundError(conv_id)

    def delete(self, conv_id: int) -> None:
        """Delete the conversation and (by cascade) its messages."""
        with self._write() as conn:
            cur = conn.execute("DELETE FROM conversations WHERE id = ?", (conv_id,))
            if cur.rowcount == 0:
                raise ConversationNotFoundError(conv_id)

    # ----------------------------------------------------------------- messages
    def messages(self, conv_id: int) -> builtins.list[StoredMessage]:
        """The conversation's messages in order."""
        rows = self._conn.execute(
            "SELECT id, conversation_id, role, content, complete, stats, created_at"
            "  FROM messages WHERE conversation_id = ? ORDER BY position",
            (conv_id,),
        ).fetchall()
        if not rows:
            self._require_conversation(self._conn, conv_id)
        return [
            StoredMessage(
                id=msg_id,
                conversation_id=cid,
                role=role,
                content=content,
                complete=bool(complete),
                stats=_decode_stats(stats, msg_id),
                created_at=created_at,
            )
            for msg_id, cid, role, content, complete, stats, created_at in rows
        ]

    def add_message(
        self,
        conv_id: int,
        role: Role,
        content: str,
        complete: bool = True,
        stats: dict[str, Any] | None = None,
    ) -> int:
        """Append a message; returns its id. The conversation moves to the top."""
        if role not in ROLES:
            raise ValueError(f"role must be one of {', '.join(ROLES)}, not {role!r}")
        stats_json = _encode_stats(stats)
        with self._write() as conn:
            self._require_conversation(conn, conv_id)
            cur = conn.execute(
                "INSERT INTO messages"
                " (conversation_id, position, role, content, complete, stats, created_at)"
                " VALUES (?, (SELECT COALESCE(MAX(position), -1) + 1 FROM messages"
                "             WHERE conversation_id = ?), ?, ?, ?, ?, ?)",
                (conv_id, conv_id, role, content, int(complete), stats_json, time.time()),
            )
            self._touch(conn, conv_id)
            assert cur.lastrowid is not None
            return cur.lastrowid

    def update_message(
        self,
        msg_id: int,
        content: str,
        complete: bool,
        stats: dict[str, Any] | None = None,
    ) -> None:
        """Replace a message's text, completeness and stats (a partial reply
        saved while streaming, then its final form)."""
        stats_json = _encode_stats(stats)
        with self._write() as conn:
            conv_id, _ = self._message_conversation(conn, msg_id)
            conn.execute(
                "UPDATE messages SET content = ?, complete = ?, stats = ? WHERE id = ?",
                (content, int(complete), stats_json, msg_id),
            )
            self._touch(conn, conv_id)

    def import_conversations(
        self, conversations: Sequence[tuple[ConversationSummary, Sequence[StoredMessage]]]
    ) -> builtins.list[int]:
        """Add conversations read from elsewhere (what could be salvaged from a
        damaged file), keeping their titles and times; ids, conversation ids
        and counts in the arguments are ignored. Returns the new ids."""
        new_ids: builtins.list[int] = []
        with self._write() as conn:
            for conv, messages in conversations:
                _check_mode(conv.mode)
                cur = conn.execute(
                    "INSERT INTO conversations"
                    " (title, created_at, updated_at, mode, preset, branched_from)"
                    " VALUES (?, ?, ?, ?, ?, ?)",
                    (conv.title, conv.created_at, conv.updated_at, conv.mode, conv.preset,
                     conv.branched_from),
                )  # fmt: skip
                assert cur.lastrowid is not None
                new_ids.append(cur.lastrowid)
                conn.executemany(
                    "INSERT INTO messages"
                    " (conversation_id, position, role, content, complete, stats, created_at)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?)",
                    [
                        (cur.lastrowid, pos, m.role, m.content, int(m.complete),
                         _encode_stats(m.stats), m.created_at)
                        for pos, m in enumerate(messages)
                    ],
                )  # fmt: skip
        return new_ids

    def branch(self, msg_id: int) -> int:
        """A new conversation holding copies of this message and every earlier
        one of its conversation (Branch from here), titled after it; returns
        its id. It is listed first; the conversation branched from is unchanged.
        The branch keeps its mode and preset, and the start of that message."""
        with self._write() as conn:
            conv_id, position = self._message_conversation(conn, msg_id)
            title, mode, preset = conn.execute(
                "SELECT title, mode, preset FROM conversations WHERE id = ?", (conv_id,)
            ).fetchone()
            (content,) = conn.execute(
                "SELECT content FROM messages WHERE id = ?", (msg_id,)
            ).fetchone()
            stamp = self._stamp(conn)
            cur = conn.execute(
                "INSERT INTO conversations"
                " (title, created_at, updated_at, mode, preset, branched_from)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (f"{title}{BRANCH_SUFFIX}", stamp, stamp, mode, preset, message_title(content)),
            )
            conn.execute(
                "INSERT INTO messages"
                " (conversation_id, position, role, content, complete, stats, created_at)"
                " SELECT ?, position, role, content, complete, stats, created_at FROM messages"
                "  WHERE conversation_id = ? AND position <= ?",
                (cur.lastrowid, conv_id, position),
            )
            assert cur.lastrowid is not None
            return cur.lastrowid

    def delete_message(self, msg_id: int) -> None:
        """Delete this one message; the others keep their order."""
        with self._write() as conn:
            conv_id, _ = self._message_conversation(conn, msg_id)
            conn.execute("DELETE FROM messages WHERE id = ?", (msg_id,))
            self._touch(conn, conv_id)

    def titled_after(self, msg_id: int) -> bool:
        """Whether the conversation's title was made from this message: it is
        the first user message, and the title reads as ``message_title`` of it
        (a title the user gave, or one a branch added to, is theirs to keep)."""
        conv_id, position = self._message_conversation(self._conn, msg_id)
        first = self._conn.execute(
            "SELECT m.position, m.content, c.title FROM messages m"
            " JOIN conversations c ON c.id = m.conversation_id"
            " WHERE m.conversation_id = ? AND m.role = 'user' ORDER BY m.position LIMIT 1",
            (conv_id,),
        ).fetchone()
        return first is not None and first[0] == position and first[2] == message_title(first[1])

    def delete_from(self, msg_id: int) -> int:
        """Delete this message and every later one in its conversation (Regenerate,
        editing an earlier message). Returns how many were deleted."""
        with self._write() as conn:
            conv_id, position = self._message_conversation(conn, msg_id)
            cur = conn.execute(
                "DELETE FROM messages WHERE conversation_id = ? AND position >= ?",
                (conv_id, position),
            )
            self._touch(conn, conv_id)
            return cur.rowcount
