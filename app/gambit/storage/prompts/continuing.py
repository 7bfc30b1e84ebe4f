"""What Continue reads from a stored reply: whether it was cut, and its tokens.

A reply is cut when its length limit, Stop, a failure or the end of the
window ended it before the model did; only the last message of a
conversation is continued (an earlier one would need the replies after it
replaced: that is Regenerate), and only while the prompt reads it as the
reply to the question before it (``prompt_messages``: a reply whose question
was deleted is left out of the prompt or joined to the reply before it, and
would not be continued from its own text).

The tokens of a reply that may be continued are kept in its stats under
``"kept_tokens"``: ``{"tokenizer": <Engine.tokenizer_fingerprint>, "ids":
[...]}``, written while it streams (autosave) and when it is cut, and left
out once it ends on its own (a finished reply is not continued: its tokens
would only weigh on the file). A record that does not have that shape (an
edited or damaged file) reads as none: the text is tokenized instead
(``gambit.engine.text.continuation``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gambit.engine.text.chat import Message
from gambit.engine.text.continuation import KeptTokens
from gambit.storage.chat_store.rows import StoredMessage
from gambit.storage.prompts.history import prompt_messages
from gambit.storage.reply_stats import CUT_STOPS, KEPT_TOKENS


def was_cut(message: StoredMessage) -> bool:
    """Whether ``message`` is a reply with text that ended before the model
    ended it (stored incomplete, or stopped by its length or an error)."""
    if message.role != "assistant" or not message.content:
        return False
    stop = message.record.stop
    return not message.complete or stop in CUT_STOPS


def can_continue(messages: Sequence[StoredMessage]) -> bool:
    """Whether the last of a conversation's ``messages`` may be continued: a
    cut reply, which the prompt reads as it is (its question not deleted)."""
    if not messages or not was_cut(messages[-1]):
        return False
    turns = prompt_messages(messages)
    return bool(turns) and turns[-1] == Message("assistant", messages[-1].content)


def kept_tokens(stats: Mapping[str, Any] | None) -> KeptTokens | None:
    """The tokens kept with a reply's ``stats``, if they are there and well formed."""
    record = (stats or {}).get(KEPT_TOKENS)
    if not isinstance(record, dict):
        return None
    tokenizer, ids = record.get("tokenizer"), record.get("ids")
    if not isinstance(tokenizer, str) or not isinstance(ids, list):
        return None
    if not all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in ids):
        return None
    return KeptTokens(tokenizer, tuple(ids))


def kept_record(kept: KeptTokens) -> dict[str, Any]:
    """``kept`` as it is stored in a reply's stats (under ``KEPT_TOKENS``)."""
    return {"tokenizer": kept.tokenizer, "ids": list(kept.ids)}
