"""What goes wrong with the chat history, as the store raises it."""

from __future__ import annotations

from pathlib import Path

from gambit.errors import GambitError

LOCK_TIMEOUT_S = 5.0  # how long a write waits for another process's write lock


class ConversationStoreError(GambitError):
    """The history file cannot be opened or written."""


class DamagedStoreError(ConversationStoreError):
    """The history file is not a readable SQLite database with Gambit's tables."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"Cannot open the chat history {path}: it is damaged ({reason}).")
        self.reason = reason


class StoreInUseError(ConversationStoreError):
    """Another process has held the history file's write lock for LOCK_TIMEOUT_S."""

    def __init__(self, path: Path) -> None:
        super().__init__(
            f"The conversation database {path} is in use by another Gambit window or "
            f"process, which has kept it locked for more than {LOCK_TIMEOUT_S:g} seconds."
        )


class ConversationNotFoundError(ConversationStoreError):
    def __init__(self, conv_id: int) -> None:
        super().__init__(f"Conversation {conv_id} does not exist (it may have been deleted).")
        self.conv_id = conv_id


class MessageNotFoundError(ConversationStoreError):
    def __init__(self, msg_id: int) -> None:
        super().__init__(f"Message {msg_id} does not exist (it may have been deleted).")
        self.msg_id = msg_id
