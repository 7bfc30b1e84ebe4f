"""What the per-message actions do to the store, on real SQLite files:
Branch from here, deleting one message, and what Continue reads of a reply."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gambit.engine.text.continuation import KeptTokens
from gambit.storage.chat_store.conversations import ConversationStore
from gambit.storage.chat_store.store_errors import MessageNotFoundError
from gambit.storage.prompts.continuing import can_continue, kept_record, kept_tokens, was_cut


@pytest.fixture
def store(tmp_path: Path) -> Iterator[ConversationStore]:
    with ConversationStore(tmp_path / "conversations.sqlite3") as s:
        yield s


def test_branch_copies_the_conversation_up_to_the_message(store: ConversationStore) -> None:
    conv = store.create("Trip")
    store.add_message(conv, "user", "Plan a day in Lyon.")
    reply = store.add_message(conv, "assistant", "Morning: the old town.", stats={"tokens": 6})
    store.add_message(conv, "user", "And the evening?")
    other = store.create("Later")  # listed first until the branch is made
    branch = store.branch(reply)
    assert [c.id for c in store.list()] == [branch, other, conv]
    assert store.get(branch).title == "Trip (branch)"
    copied, source = store.messages(branch), store.messages(conv)
    assert [(m.role, m.content, m.complete, m.stats, m.created_at) for m in copied] == [
        (m.role, m.content, m.complete, m.stats, m.created_at) for m in source[:2]
    ]
    assert {m.id for m in copied}.isdisjoint(m.id for m in source)  # copies, not moves
    assert len(store.messages(conv)) == 3  # the original is unchanged
    with pytest.raises(MessageNotFoundError):
        store.branch(10_000)


def test_delete_message_removes_that_one_only(store: ConversationStore) -> None:
    conv = store.create()
    first = store.add_message(conv, "user", "one")
    middle = store.add_message(conv, "assistant", "two")
    store.add_message(conv, "user", "three")
    store.delete_message(middle)
    assert [m.content for m in store.messages(conv)] == ["one", "three"]
    store.add_message(conv, "assistant", "four")  # appended after the rest, in order
    assert [m.content for m in store.messages(conv)] == ["one", "three", "four"]
    store.delete_message(first)
    assert [m.content for m in store.messages(conv)] == ["three", "four"]
    with pytest.raises(MessageNotFoundError):
        store.delete_message(first)


def test_which_replies_may_be_continued(store: ConversationStore) -> None:
    conv = store.create()
    store.add_message(conv, "user", "Tell me a story.")
    reply = store.add_message(conv, "assistant", "Once upon", complete=False)
    assert can_continue(store.messages(conv))  # stored incomplete (Stop, a crash)
    for stop, cut in [("max tokens", True), ("error", True), ("end of text", False)]:
        store.update_message(reply, "Once upon a time.", True, {"stop": stop})
        assert can_continue(store.messages(conv)) is cut, stop
    store.update_message(reply, "", False, {"stop": "error"})
    assert not can_continue(store.messages(conv))  # nothing to continue from
    store.update_message(reply, "Once upon", False)
    store.add_message(conv, "user", "Go on.")
    messages = store.messages(conv)
    assert was_cut(messages[1]) and not can_continue(messages)  # only the last one


def test_a_cut_reply_whose_question_was_deleted_is_not_continued(
    store: ConversationStore,
) -> None:
    """The prompt leaves such a reply out, or joins it to the reply before it:
    continuing it would go on from another text than its own."""
    conv = store.create()
    question = store.add_message(conv, "user", "Tell me a story.")
    store.add_message(conv, "assistant", "Once upon", complete=False)
    assert can_continue(store.messages(conv))
    store.delete_message(question)  # a reply first
    assert not can_continue(store.messages(conv))

    conv = store.create()
    store.add_message(conv, "user", "Hello.")
    store.add_message(conv, "assistant", "Hi!")
    second = store.add_message(conv, "user", "Tell me a story.")
    store.add_message(conv, "assistant", "Once upon", complete=False)
    store.delete_message(second)  # two replies in a row
    assert not can_continue(store.messages(conv))


def test_kept_tokens_round_trip_and_damaged_records_read_as_none(
    store: ConversationStore,
) -> None:
    kept = KeptTokens("v49152-abc", (1, 2, 30000))
    conv = store.create()
    reply = store.add_message(conv, "assistant", "Hi", False, {"kept_tokens": kept_record(kept)})
    [stored] = store.messages(conv)
    assert stored.id == reply and kept_tokens(stored.stats) == kept
    for damaged in [
        None,
        {},
        {"kept_tokens": [1, 2]},
        {"kept_tokens": {"tokenizer": 7, "ids": [1]}},
        {"kept_tokens": {"tokenizer": "t", "ids": [1, "2"]}},
        {"kept_tokens": {"tokenizer": "t", "ids": [1, True]}},
        {"kept_tokens": {"tokenizer": "t", "ids": [-1]}},
    ]:
        assert kept_tokens(damaged) is None, damaged
