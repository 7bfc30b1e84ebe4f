"""Opening the chat history so that the app always starts.

- A damaged file (not SQLite, truncated, garbled pages, a broken schema) is
  moved aside as ``<name>.corrupt-<timestamp>``, with its ``-wal`` and ``-shm``; what
  can still be read of it is copied into a new, empty history.
- A file whose write lock another process keeps (a second Gambit stuck
  mid-write, a database browser with a transaction open) is not touched: this
  window works on a copy in memory, so the saved chats are there to read,
  and the user is told that nothing this window does will be saved. Quitting
  instead would leave the user with no app over something they may not be
  able to find; waiting would look like a hang.
- Any other failure to open or create the file (a read-only folder, a full
  disk, a file from a newer Gambit) also ends in memory, with the reason.

The caller shows ``OpenedHistory.notice`` to the user when it is not None.
"""

from __future__ import annotations

import logging
import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from gambit.storage import files
from gambit.storage.chat_store.conversations import ConversationStore
from gambit.storage.chat_store.salvage import salvage
from gambit.storage.chat_store.store_errors import (
    ConversationStoreError,
    DamagedStoreError,
    StoreInUseError,
)

log = logging.getLogger(__name__)

SIDE_FILES = ("-wal", "-shm")  # SQLite's write-ahead log and its index, next to the file
NOT_SAVED = (
    "Until Gambit is restarted, new chats and replies in this window are kept in memory "
    "only and will be lost when it closes."
)


@dataclass(frozen=True)
class OpenedHistory:
    store: ConversationStore
    notice: str | None  # what the user needs to know; None when all went well


def open_history(path: Path) -> OpenedHistory:
    """The store for ``path``: the file itself, a new file after damage, or memory."""
    try:
        store = ConversationStore(path)
    except DamagedStoreError as exc:
        return _start_over(path, exc.reason)
    except StoreInUseError as exc:
        return _in_memory(
            path,
            f"{exc} Your saved chats are shown as they were when this window opened. "
            "Close the other Gambit window or program that uses it, then restart Gambit.",
        )
    except ConversationStoreError as exc:
        return _in_memory(path, str(exc))
    try:
        store.list()  # the window's first read, done here where damage is handled
    except sqlite3.DatabaseError as exc:  # quick_check passed, yet a read failed
        store.close()
        return _start_over(path, str(exc))
    return OpenedHistory(store, None)


def _in_memory(path: Path, reason: str) -> OpenedHistory:
    log.warning("chat history not saved: %s", reason)
    return OpenedHistory(ConversationStore(path, in_memory=True), f"{reason}\n\n{NOT_SAVED}")


def _start_over(path: Path, reason: str) -> OpenedHistory:
    log.error("chat history %s is damaged: %s", path, reason)
    try:
        aside = move_aside(path)
    except OSError as exc:
        return _in_memory(
            path,
            f"The chat history {path} is damaged ({reason}), and it could not be moved "
            f"aside to start a new one ({exc.strerror or exc}).",
        )
    found = salvage(aside)
    try:
        store = ConversationStore(path)
        store.import_conversations(found.conversations)
    except ConversationStoreError as exc:
        return _in_memory(
            path,
            f"The chat history was damaged ({reason}) and was moved aside as {aside}, "
            f"but a new one could not be started: {exc}",
        )
    log.info("history: %s salvaged from %s", found.describe(), aside)
    kept = (
        f"{found.describe()} could be read back from it and were kept."
        if found.conversations
        else "Nothing could be read back from it."
    )
    notice = (
        f"The chat history was damaged ({reason}). It was moved aside as {aside} and a new "
        f"history was started. {kept}"
    )
    return OpenedHistory(store, notice)


def move_aside(path: Path) -> Path:
    """Rename ``path`` to ``<name>.corrupt-<timestamp>`` (``files.move_aside``) and
    its side files to that name plus ``-wal``/``-shm``, where SQLite looks for
    them. Returns the new path; raises ``OSError``."""
    aside = files.move_aside(path)
    for suffix in SIDE_FILES:
        side = Path(f"{path}{suffix}")
        if side.exists():
            os.replace(side, f"{aside}{suffix}")
    return aside
