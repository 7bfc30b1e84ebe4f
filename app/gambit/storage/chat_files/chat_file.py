"""A chat file being imported: the limits it must keep, the checks its values
pass, and what it holds once read (``ChatFile``). The readers of each format
(``chat_import`` for Gambit's, ``chat_openai`` for OpenAI-style messages)
share them, so that both say a wrong value the same way.

The limits are generous for a person's chats and bound what a damaged or
hostile file can cost (memory, time, a window that cannot show it): past any
of them the file is refused, with the reason, rather than imported in part.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

from gambit.storage.chat_store.rows import ConversationSummary, StoredMessage
from gambit.storage.json_values import shown
from gambit.words import counted

MAX_FILE_BYTES = 64 * 1024 * 1024  # 64 MiB
MAX_CONVERSATIONS = 10_000
MAX_MESSAGES = 100_000  # in the whole file
# One message: more than the largest context Gambit runs (131,072 tokens) can
# hold at 7 characters a token. A conversation: what the window renders when
# the import opens it, in ~3 s on a slow machine (the chat view is linear).
MAX_TEXT_CHARS = 1_000_000
MAX_CONVERSATION_CHARS = 4_000_000
MAX_TITLE_CHARS = 1_000
MAX_DEPTH = 32  # JSON arrays and objects inside one another
# A file's times may run ahead of this machine's clock by this much (another
# machine's clock); later ones would list the conversation above every new one.
FUTURE_SLACK_S = 24 * 3600.0

Conversation = tuple[ConversationSummary, tuple[StoredMessage, ...]]


class RefusedError(Exception):
    """Why a file is refused ("conversations[0].title must be text, not 3"); the
    caller names the file (``chat_import.ChatImportError``)."""


def refuse(reason: str) -> NoReturn:
    raise RefusedError(reason)


@dataclass(frozen=True)
class ChatFile:
    """A file's conversations, checked and ready to add, and what of it Gambit
    leaves out (counted by kind: "image_url part", "tool message")."""

    kind: str  # "a Gambit export", "OpenAI-style messages"
    conversations: tuple[Conversation, ...]
    left_out: tuple[tuple[str, int], ...] = ()

    @property
    def n_messages(self) -> int:
        return sum(len(messages) for _, messages in self.conversations)

    def describe(self) -> str:
        n_conv, n_msg = len(self.conversations), self.n_messages
        return f"{counted(n_conv, 'conversation')} with {counted(n_msg, 'message')}"

    def left_out_text(self) -> str:
        """ "Left out (Gambit keeps text only): 2 image_url parts, 1 tool message.", or ""."""
        if not self.left_out:
            return ""
        items = ", ".join(counted(n, what) for what, n in self.left_out)
        return f"Left out (Gambit keeps text only): {items}."


# ------------------------------------------------------------ checked values
def text_value(value: object, where: str, limit: int = MAX_TEXT_CHARS) -> str:
    """``value`` if it is text Gambit can store: a string of at most ``limit``
    characters that UTF-8 can write (a JSON "\\ud800" escape alone cannot be)."""
    if not isinstance(value, str):
        refuse(f"{where} must be text, not {shown(value)}")
    if len(value) > limit:
        refuse(f"{where} is longer than {limit:,} characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        code = ord(value[exc.start])
        refuse(f"{where} holds an unpaired surrogate (\\u{code:04x}), which is not text")
    return value


def line_value(value: object, where: str) -> str:
    """Short text on one line (a title, a preset's name); may be blank."""
    return " ".join(text_value(value, where, MAX_TITLE_CHARS).split())


def title_value(value: object, where: str) -> str:
    """A title on one line; "New chat" (as a new conversation is called) if blank."""
    return line_value(value, where) or "New chat"


def list_value(parent: dict[str, Any], key: str, where: str) -> list[Any]:
    """``parent[key]``, which must be a list (``where``: the path to ``parent``, with its dot)."""
    value = parent.get(key)
    if not isinstance(value, list):
        refuse(f"{where}{key} must be a list, not {shown(value)}")
    return value


def time_value(parent: dict[str, Any], key: str, where: str, default: float, now: float) -> float:
    """``parent[key]`` as seconds since 1970 (``default`` when missing)."""
    if key not in parent:
        return default
    value = parent[key]
    words = f"{where}.{key} must be a time in seconds since 1970, not {shown(value)}"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        refuse(words)
    try:
        t = float(value)
    except OverflowError:  # an integer too large for a float
        refuse(words)
    if not 0 <= t <= now + FUTURE_SLACK_S:
        refuse(f"{words} (it is before 1970, or more than a day ahead of this machine's clock)")
    return t


def check_conversations(n: int) -> None:
    if n > MAX_CONVERSATIONS:
        refuse(
            f"it holds {n:,} conversations, more than the {MAX_CONVERSATIONS:,} Gambit "
            "imports from one file"
        )


def check_conversation_text(messages: Sequence[StoredMessage], where: str) -> None:
    total = sum(len(m.content) for m in messages)
    if total > MAX_CONVERSATION_CHARS:
        refuse(
            f"{where} holds {total:,} characters of text, more than the "
            f"{MAX_CONVERSATION_CHARS:,} Gambit imports in one conversation"
        )


class MessageCount:
    """The messages met so far in a file, against MAX_MESSAGES."""

    def __init__(self) -> None:
        self.n = 0

    def add(self, n: int) -> None:
        self.n += n
        if self.n > MAX_MESSAGES:
            refuse(
                f"it holds more than {MAX_MESSAGES:,} messages, the most Gambit imports "
                "from one file"
            )
