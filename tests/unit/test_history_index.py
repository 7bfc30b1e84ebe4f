"""HistoryIndex (prompt lookup's memory of earlier chats) against a brute-force reference."""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np
import pytest

from gambit.engine.drafters.base import Option
from gambit.engine.drafters.history import (
    AGREEMENT_MAX,
    BYTES_PER_TOKEN,
    ORDER,
    HistoryIndex,
    HistoryIndexError,
    HistoryMatch,
)
from gambit.engine.drafters.lookup import PromptLookupDrafter
from gambit.engine.verification.sampling import SamplingParams


def reference(docs: list[list[int]], context: list[int]) -> tuple[int, tuple[int, ...]] | None:
    """Of every place in one document where the context's last ORDER tokens
    occur with a follower: the one agreeing furthest back (at most
    AGREEMENT_MAX; the latest on ties), as (agreement, what follows)."""
    best: tuple[int, int, int] | None = None  # (agreement, doc, end)
    tail = context[-AGREEMENT_MAX:]
    for d, doc in enumerate(docs):
        for end in range(ORDER, len(doc)):  # doc[end] is the follower
            if doc[end - ORDER : end] != context[-ORDER:]:
                continue
            m = 0
            while m < len(tail) and m < end and doc[end - 1 - m] == tail[-1 - m]:
                m += 1
            if best is None or m >= best[0]:  # later documents and places come later
                best = (m, d, end)
    if best is None:
        return None
    m, d, end = best
    return m, tuple(docs[d][end:])


def found(index: HistoryIndex, context: list[int]) -> tuple[int, tuple[int, ...]] | None:
    match = index.match(context)
    if match is None:
        return None
    return match.length, index.continuation(match.start, 10_000)


def random_docs(rng: np.random.Generator, n: int, vocab: int = 6) -> list[list[int]]:
    # A small vocabulary: many repeated 4-grams, ties and long agreements.
    return [rng.integers(0, vocab, rng.integers(0, 40)).tolist() for _ in range(n)]


def test_matches_equal_the_reference_built_one_by_one_or_at_once() -> None:
    rng = np.random.default_rng(7)
    for trial in range(30):
        docs = random_docs(rng, 12)
        one_by_one, at_once = HistoryIndex(), HistoryIndex()
        for i, doc in enumerate(docs):
            one_by_one.add(i, doc)
        at_once.add_many((i, doc, 0) for i, doc in enumerate(docs))
        for _ in range(20):
            context = rng.integers(0, 6, rng.integers(0, 24)).tolist()
            expected = reference(docs, context)
            assert found(one_by_one, context) == expected, (trial, context)
            assert found(at_once, context) == expected, (trial, context)


def test_the_recent_run_merges_into_the_large_one_without_losing_matches() -> None:
    # Enough tokens that adds overflow the recent run and merge (65,536 keys).
    rng = np.random.default_rng(3)
    docs = [rng.integers(0, 50_000, 2_000).tolist() for _ in range(60)]
    index = HistoryIndex()
    for i, doc in enumerate(docs):
        index.add(i, doc)
    for i in (0, 31, 59):
        context = [9, 9, *docs[i][100:120]]
        assert found(index, context) == (AGREEMENT_MAX, tuple(docs[i][120:]))


def test_a_match_never_crosses_into_the_next_document() -> None:
    index = HistoryIndex()
    index.add(1, [1, 2, 3, 4])  # ends with the match: nothing follows inside it
    index.add(2, [5, 6, 7, 8])
    assert index.match([1, 2, 3, 4]) is None
    assert index.match([4, 5, 6, 7]) is None  # (4 | 5 6 7 spans two documents)
    assert found(index, [5, 6, 7]) is None  # shorter than ORDER
    assert found(index, [0, 5, 6, 7]) is None


def test_forgotten_documents_no_longer_match() -> None:
    index = HistoryIndex()
    index.add(1, [1, 2, 3, 4, 5, 6])
    index.add(2, [7, 1, 2, 3, 4, 9])
    assert found(index, [1, 2, 3, 4]) == (4, (9,))
    index.remove([2])
    assert found(index, [1, 2, 3, 4]) == (4, (5, 6))
    assert index.documents() == {1: 0}
    index.remove([1])
    assert index.match([1, 2, 3, 4]) is None
    assert len(index) == 0


def test_memory_is_bounded_by_dropping_the_oldest_documents() -> None:
    index = HistoryIndex(max_tokens=10_000)
    rng = np.random.default_rng(1)
    docs = [rng.integers(0, 30_000, 400).tolist() for _ in range(100)]
    for i, doc in enumerate(docs):
        index.add(i, doc, tag=i)
    assert len(index) <= 10_000
    assert index.dropped
    kept = index.documents()
    assert 99 in kept and 0 not in kept
    assert list(kept) == sorted(kept)  # the newest are kept, in order
    assert found(index, docs[99][:30]) == (AGREEMENT_MAX, tuple(docs[99][30:]))
    assert index.match(docs[0][:30]) is None


def test_ten_thousand_conversations_fit_in_64_mb() -> None:
    # 10,000 conversations of four 250-token messages: 10 M tokens, more than
    # the default bound holds; the newest 4 M or so stay.
    rng = np.random.default_rng(5)
    index = HistoryIndex()
    index.add_many((i, rng.integers(0, 32_000, 250, np.int32), 250) for i in range(40_000))
    assert index.n_documents > 10_000
    assert index.nbytes <= 64 * 2**20, index.nbytes
    assert len(index) * BYTES_PER_TOKEN <= 64 * 2**20


def test_saved_index_loads_equal(tmp_path: Path) -> None:
    rng = np.random.default_rng(11)
    docs = random_docs(rng, 20)
    index = HistoryIndex()
    index.add_many((i * 10, doc, len(doc)) for i, doc in enumerate(docs))
    path = tmp_path / "memory" / "tok.npz"
    index.save(path, "tok")
    loaded = HistoryIndex.load(path, "tok", n_vocab=6)
    assert loaded.documents() == index.documents()
    for _ in range(50):
        context = rng.integers(0, 6, 12).tolist()
        assert found(loaded, context) == found(index, context)
    assert not list(path.parent.glob("*.tmp"))  # written through a temporary file


def _saved(tmp_path: Path) -> Path:
    index = HistoryIndex()
    index.add(1, [1, 2, 3, 4, 5, 6])
    index.add(2, [2, 3, 4, 5, 7])
    path = tmp_path / "tok.npz"
    index.save(path, "tok")
    return path


def _rewrite(path: Path, **arrays: np.ndarray) -> None:
    with np.load(path) as data:
        content = {k: data[k] for k in data.files}
    content.update(arrays)
    with path.open("wb") as f:
        np.savez(f, **content)


@pytest.mark.parametrize(
    "damage",
    [
        "truncated",
        "garbage",
        "empty",
        "tokens beyond the vocabulary",
        "overlapping documents",
        "a separator missing",
        "an array missing",
        "a pickled object",
        "another version",
    ],
)
def test_a_damaged_file_is_refused_with_a_reason(tmp_path: Path, damage: str) -> None:
    path = _saved(tmp_path)
    raw = path.read_bytes()
    if damage == "truncated":
        path.write_bytes(raw[: len(raw) // 2])
    elif damage == "garbage":
        path.write_bytes(bytes(range(256)) * 10)
    elif damage == "empty":
        path.write_bytes(b"")
    elif damage == "tokens beyond the vocabulary":
        _rewrite(path, tokens=np.array([1, 2, 3, 4, 5, 900, -1, 2, 3, 4, 5, 7, -1], np.int32))
    elif damage == "overlapping documents":
        _rewrite(path, doc_starts=np.array([0, 0], np.int64))
    elif damage == "a separator missing":
        _rewrite(path, tokens=np.array([1, 2, 3, 4, 5, 6, 0, 2, 3, 4, 5, 7, -1], np.int32))
    elif damage == "an array missing":
        with np.load(path) as data:
            content = {k: data[k] for k in data.files if k != "doc_tags"}
        with path.open("wb") as f:
            np.savez(f, **content)
    elif damage == "a pickled object":
        _rewrite(path, tokens=np.array([{"x": 1}], dtype=object))
    elif damage == "another version":
        _rewrite(path, version=np.array(99))
    with pytest.raises(HistoryIndexError):
        HistoryIndex.load(path, "tok", n_vocab=100)


def test_another_tokenizers_file_is_refused(tmp_path: Path) -> None:
    path = _saved(tmp_path)
    with pytest.raises(HistoryIndexError, match="another tokenizer"):
        HistoryIndex.load(path, "other", n_vocab=100)
    assert zipfile.is_zipfile(path)  # (refused, not damaged)


# ------------------------------------------------------------ prompt lookup


def draft(drafter: PromptLookupDrafter, context: list[int], n: int) -> tuple[int, ...]:
    return drafter.draft(context, n, SamplingParams(), np.random.default_rng(0)).tokens


def test_lookup_copies_from_the_history_where_the_conversation_has_no_match() -> None:
    history = HistoryIndex()
    history.add(1, [40, 41, 42, 43, 44, 45, 46, 47])
    lookup = PromptLookupDrafter()
    context = [1, 2, 3, 41, 42, 43, 44]
    assert lookup.option(context) is None  # the conversation alone: nothing
    lookup.set_history(history)
    assert lookup.option(context) == Option("earlier chats", 1)  # 4 tokens agree
    assert draft(lookup, context, 3) == (45, 46, 47)
    lookup.set_history(None)
    assert lookup.option(context) is None and draft(lookup, context, 3) == ()


def test_the_conversations_match_wins_unless_the_history_agrees_further_back() -> None:
    history = HistoryIndex()
    history.add(1, [9, 8, 7, 1, 2, 3, 4, 50, 51])
    lookup = PromptLookupDrafter(history=history)
    # In the conversation, (3, 4) was followed by 60; it agrees 2 tokens back,
    # the history 4 (1 2 3 4) or 7 (9 8 7 1 2 3 4).
    assert draft(lookup, [3, 4, 60, 1, 2, 3, 4], 2) == (50, 51)
    assert lookup.option([3, 4, 60, 1, 2, 3, 4]) == Option("earlier chats", 1)
    # The conversation's own copy agrees as far back: it wins.
    context = [9, 8, 7, 1, 2, 3, 4, 61, 9, 8, 7, 1, 2, 3, 4]
    assert draft(lookup, context, 1) == (61,)
    assert lookup.option(context) == Option("prompt lookup", 3)


def test_history_buckets_say_how_far_the_match_agrees() -> None:
    doc = list(range(100, 140))
    history = HistoryIndex()
    history.add(1, doc)
    lookup = PromptLookupDrafter(history=history)
    assert lookup.option([0, *doc[:5]]) == Option("earlier chats", 1)
    assert lookup.option([0, *doc[:9]]) == Option("earlier chats", 2)
    assert lookup.option([0, *doc[:20]]) == Option("earlier chats", 3)
    assert HistoryMatch(AGREEMENT_MAX, 21) == history.match([0, *doc[:21]])


def test_both_sources_are_offered_and_the_selected_one_drafts() -> None:
    # For a policy that chooses (draft model + lookup): the conversation's
    # match and the history's, each its own option, the preferred first.
    history = HistoryIndex()
    history.add(1, [9, 8, 7, 1, 2, 3, 4, 50, 51])
    lookup = PromptLookupDrafter(history=history)
    context = [3, 4, 60, 1, 2, 3, 4]  # conversation: (3, 4) -> 60; history: 1 2 3 4 -> 50
    history_copy, own_copy = Option("earlier chats", 1), Option("prompt lookup", 1)
    assert lookup.sources(context) == (history_copy, own_copy)
    lookup.select(own_copy)
    assert draft(lookup, context, 2) == (60, 1)
    lookup.select(history_copy)
    assert draft(lookup, context, 2) == (50, 51)
    lookup.set_history(None)
    assert lookup.sources(context) == (own_copy,)
