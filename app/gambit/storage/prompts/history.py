"""Stored messages -> the messages a reply is generated from.

Chat templates such as Mistral's and Gemma's raise an error unless user and
assistant turns alternate. A stored conversation can break that: a reply that
failed before its first token is stored empty, and a window killed between
storing the question and its reply row leaves a question with no reply row.

An unanswered question is left out together with its empty reply, rather
than kept with an empty assistant message: the model never said that empty
turn, and a prompt that shows one offers "say nothing" as an example of an
answer. Whoever asked again wrote the next question knowing there was none.
A reply cut off part-way (text, not complete) is kept as it is.

A conversation in completion mode is no turns at all: its messages, the
user's and the model's alike, are one text in order (``rows.completion_text``).

Deleting one message (the chat's per-message Delete) can leave two replies
in a row, or a reply first: two replies in a row become one turn, their
texts joined by a blank line (both stay on screen, so the model reads both),
and a reply with no question before it is left out.
"""

from __future__ import annotations

from collections.abc import Sequence

from gambit.engine.text.chat import Message
from gambit.storage.chat_store.rows import StoredMessage


def prompt_messages(stored: Sequence[StoredMessage], system_prompt: str = "") -> list[Message]:
    """``stored`` as chat messages in which user and assistant turns alternate,
    after ``system_prompt`` (if not blank) as the system message where the
    conversation has none of its own (one started from a preset keeps its
    preset's: ``gambit.storage.presets``)."""
    turns: list[Message] = []
    for m in stored:
        if m.role == "assistant" and not m.content:
            if turns and turns[-1].role == "user":
                turns.pop()  # the question this empty reply never answered
            continue
        if m.role == "user" and turns and turns[-1].role == "user":
            turns.pop()  # an earlier question that got no reply row at all
        if m.role == "assistant" and (not turns or turns[-1].role != "user"):
            if turns and turns[-1].role == "assistant":  # the question between was deleted
                turns[-1] = Message("assistant", f"{turns[-1].content}\n\n{m.content}")
            continue  # (first: the question before it was deleted)
        turns.append(Message(m.role, m.content))
    if system_prompt.strip() and not any(m.role == "system" for m in stored):
        turns.insert(0, Message("system", system_prompt.strip()))
    return turns
