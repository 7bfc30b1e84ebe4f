"""What the conversation store hands out: immutable snapshots of rows.

Frozen so that a list shown in the UI cannot drift from the file by being
edited in place; to change something, call the store and read it again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from gambit.storage.reply_stats import ReplyRecord

Role = Literal["system", "user", "assistant"]


@dataclass(frozen=True, slots=True)
class ConversationSummary:
    """One conversation as the sidebar shows it."""

    id: int
    title: str
    created_at: float  # seconds since the epoch (time.time())
    updated_at: float
    n_messages: int
    preview: str  # the latest non-system message, shortened to one line ("" if none)
    # How it is written (storage.chat_store.schema): "chat" or "completion".
    mode: str = "chat"
    preset: str = ""  # the preset it started from ("" none)
    branched_from: str = ""  # a branch's: the start of the message it was branched at

    @property
    def completion(self) -> bool:
        """Whether it is one text the model continues (a base model's), not turns."""
        return self.mode == "completion"


@dataclass(frozen=True, slots=True)
class StoredMessage:
    id: int
    conversation_id: int
    role: Role
    content: str
    # False: a reply that was stopped or cut off by closing the app, kept as far
    # as it got; the UI marks it and may offer to continue or regenerate.
    complete: bool
    stats: dict[str, Any] | None  # a reply's record, as stored (JSON), or None
    created_at: float

    @property
    def record(self) -> ReplyRecord:
        """What is stored with it, typed (``ReplyRecord.of``)."""
        return ReplyRecord.of(self.stats)


def completion_text(messages: Sequence[StoredMessage]) -> str:
    """A completion-mode conversation's text, which the model continues: its
    messages' texts joined as written (a base model has no system role, so a
    system message is not part of it)."""
    return "".join(m.content for m in messages if m.role != "system")
