"""PromptLookupDrafter against a brute-force reference."""

from __future__ import annotations

import numpy as np
import pytest

from gambit.engine.drafters.base import Draft, Option
from gambit.engine.drafters.lookup import PromptLookupDrafter
from gambit.engine.verification.sampling import SamplingParams


def draft(drafter: PromptLookupDrafter, context: list[int], n_max: int) -> Draft:
    return drafter.draft(context, n_max, SamplingParams(), np.random.default_rng(0))


def agreement(tokens: list[int], end: int) -> int:
    """How many tokens before ``end`` equal the last ones of ``tokens`` (at most 16)."""
    m = 0
    while m < 16 and m < end and tokens[end - 1 - m] == tokens[-1 - m]:
        m += 1
    return m


def reference(tokens: list[int], n_max: int, ngram_max: int = 3, ngram_min: int = 1) -> list[int]:
    """Longest n-gram first; of its latest 4 earlier occurrences that have a
    follower, the one agreeing with the context furthest back (the latest on
    ties); copy on."""
    if n_max <= 0:
        return []
    length = len(tokens)
    for n in range(ngram_max, ngram_min - 1, -1):
        if length < n:
            continue
        suffix = tokens[length - n :]
        # j: end of an earlier occurrence tokens[j - n : j]; it needs a follower, j < length
        ends = [j for j in range(length - 1, n - 1, -1) if tokens[j - n : j] == suffix][:4]
        if ends:
            best = max(ends, key=lambda j: agreement(tokens, j))  # first max: the latest
            return tokens[best : best + n_max]
    return []


# ------------------------------------------------------------------ hand cases


def test_copies_continuation_of_longest_match() -> None:
    #          0  1  2  3  4  5  6  7  8  9
    context = [1, 2, 3, 4, 5, 6, 9, 2, 3]
    # the last 2-gram (2, 3) occurred at 1..2; what followed: 4, 5, 6, ...
    d = draft(PromptLookupDrafter(ngram_min=1), context, 4)
    assert list(d.tokens) == [4, 5, 6, 9]
    assert d.q is None


def test_longer_ngram_wins_over_more_recent_shorter_one() -> None:
    # (7, 8, 3) occurs at 0..2 followed by 11; 3 alone occurs later at 5 followed by 12
    context = [7, 8, 3, 11, 0, 3, 12, 7, 8, 3]
    d = draft(PromptLookupDrafter(ngram_max=3, ngram_min=1), context, 2)
    assert list(d.tokens) == [11, 0]
    # with unigrams only, the 3 whose context agrees furthest back (7, 8, 3)
    # still wins over the latest one (0, 3)
    d = draft(PromptLookupDrafter(ngram_max=1, ngram_min=1), context, 2)
    assert list(d.tokens) == [11, 0]


def test_most_recent_occurrence_wins() -> None:
    context = [5, 6, 1, 5, 6, 2, 5, 6]
    assert list(draft(PromptLookupDrafter(ngram_min=1), context, 1).tokens) == [2]
    assert list(draft(PromptLookupDrafter(ngram_min=1), context, 5).tokens) == [2, 5, 6]


def test_respects_n_max() -> None:
    context = [1, 2, 3, 4, 5, 6, 7, 8, 1, 2]
    for n_max in range(1, 8):
        d = draft(PromptLookupDrafter(ngram_min=1), context, n_max)
        assert list(d.tokens) == [3, 4, 5, 6, 7, 8, 1][:n_max]
        assert len(d) == n_max


@pytest.mark.parametrize("n_max", [0, -1])
def test_no_tokens_asked(n_max: int) -> None:
    d = draft(PromptLookupDrafter(ngram_min=1), [1, 2, 1, 2], n_max)
    assert list(d.tokens) == []
    assert len(d) == 0


def test_no_match_gives_empty_draft() -> None:
    assert list(draft(PromptLookupDrafter(ngram_min=1), [1, 2, 3, 4, 5], 4).tokens) == []
    assert list(draft(PromptLookupDrafter(ngram_min=1), [], 4).tokens) == []
    assert list(draft(PromptLookupDrafter(ngram_min=1), [7], 4).tokens) == []
    # a match of a shorter order than ngram_min does not count
    assert list(draft(PromptLookupDrafter(ngram_max=3, ngram_min=2), [1, 2, 3, 1], 4).tokens) == []
    assert list(draft(PromptLookupDrafter(ngram_max=3, ngram_min=1), [1, 2, 3, 1], 4).tokens) == [
        2,
        3,
        1,
    ]


def test_variable_length_near_the_end() -> None:
    # the match's follower is near the end: fewer than n_max tokens remain to copy
    context = [9, 9, 4, 1, 2, 1, 2]
    d = draft(PromptLookupDrafter(ngram_min=1), context, 8)
    # (2, 1, 2)? no earlier; (1, 2) occurs at 3..4 followed by 1, 2
    assert list(d.tokens) == [1, 2]
    # a repeated token: the latest earlier occurrence overlaps the suffix
    assert list(draft(PromptLookupDrafter(ngram_min=1), [3, 3, 3], 5).tokens) == [3]
    assert list(draft(PromptLookupDrafter(ngram_min=1), [4, 3, 3], 5).tokens) == [3]


def test_deterministic_drafter_has_no_q() -> None:
    rng = np.random.default_rng(1)
    drafter = PromptLookupDrafter(ngram_min=1)
    for _ in range(20):
        context = rng.integers(0, 3, size=int(rng.integers(0, 30))).tolist()
        d = draft(drafter, context, 5)
        assert d.q is None
        assert all(isinstance(t, int) for t in d.tokens)


def test_invalid_orders() -> None:
    with pytest.raises(ValueError):
        PromptLookupDrafter(ngram_max=2, ngram_min=3)
    with pytest.raises(ValueError):
        PromptLookupDrafter(ngram_max=2, ngram_min=0)


def test_reference_agrees_on_hand_cases() -> None:
    assert reference([1, 2, 3, 4, 5, 6, 9, 2, 3], 4) == [4, 5, 6, 9]
    assert reference([7, 8, 3, 11, 0, 3, 12, 7, 8, 3], 2) == [11, 0]
    assert reference([3, 3, 3], 5) == [3]
    assert reference([1, 2, 3], 5) == []


# ------------------------------------------------------------- incremental use


@pytest.mark.parametrize(("ngram_max", "ngram_min"), [(3, 1), (4, 2), (1, 1), (5, 3)])
@pytest.mark.parametrize("alphabet", [2, 3, 5])
def test_incremental_matches_fresh_and_reference(
    ngram_max: int, ngram_min: int, alphabet: int
) -> None:
    rng = np.random.default_rng(100 * ngram_max + 10 * ngram_min + alphabet)
    for _ in range(4):
        full = rng.integers(0, alphabet, size=120).tolist()
        drafter = PromptLookupDrafter(ngram_max, ngram_min)
        length = 0
        while length < len(full):
            length = min(len(full), length + int(rng.integers(1, 4)))
            context = full[:length]
            n_max = int(rng.integers(1, 9))
            got = list(draft(drafter, context, n_max).tokens)
            fresh = list(draft(PromptLookupDrafter(ngram_max, ngram_min), context, n_max).tokens)
            expected = reference(context, n_max, ngram_max, ngram_min)
            assert got == expected, (context, n_max)
            assert fresh == expected, (context, n_max)


def test_same_list_object_growing_in_place() -> None:
    rng = np.random.default_rng(2)
    drafter = PromptLookupDrafter(ngram_min=1)
    context: list[int] = []
    for _ in range(150):
        context.append(int(rng.integers(0, 4)))
        assert list(draft(drafter, context, 4).tokens) == reference(context, 4)
        # a draft is immutable: callers cannot corrupt the drafter's history
        assert isinstance(draft(drafter, context, 4).tokens, tuple)


def test_edited_history_is_rebuilt() -> None:
    rng = np.random.default_rng(3)
    drafter = PromptLookupDrafter(ngram_min=1)
    context = rng.integers(0, 3, size=40).tolist()
    for step in range(200):
        action = rng.integers(4)
        if action == 0 and len(context) > 2:
            # truncate (a regenerated reply)
            context = context[: int(rng.integers(1, len(context)))]
        elif action == 1 and context:
            # edit a token in the middle of the history, keep the length
            context = list(context)
            context[int(rng.integers(len(context)))] = int(rng.integers(0, 3))
        elif action == 2:
            # a different conversation altogether
            context = rng.integers(0, 3, size=int(rng.integers(0, 50))).tolist()
        else:
            context = context + rng.integers(0, 3, size=int(rng.integers(1, 5))).tolist()
        n_max = int(rng.integers(1, 7))
        assert list(draft(drafter, context, n_max).tokens) == reference(context, n_max), step


def test_edit_that_keeps_a_prefix_and_the_length() -> None:
    drafter = PromptLookupDrafter(ngram_min=1)
    a = [1, 2, 3, 9, 1, 2]
    assert list(draft(drafter, a, 3).tokens) == [3, 9, 1]
    b = [1, 2, 4, 9, 1, 2]  # same length, one token changed
    assert list(draft(drafter, b, 3).tokens) == [4, 9, 1]
    c = [1, 2, 4, 9, 1, 2, 4, 9, 1]  # grows again after the edit
    assert list(draft(drafter, c, 3).tokens) == [2, 4, 9]
    d = [1, 2]  # shrinks
    assert list(draft(drafter, d, 3).tokens) == []


def test_by_default_one_matching_token_is_not_enough() -> None:
    # [.., 1] matches only as a 1-gram: no proposal; [.., 1, 2] as a 2-gram: a proposal.
    assert list(draft(PromptLookupDrafter(), [1, 2, 3, 1], 4).tokens) == []
    assert list(draft(PromptLookupDrafter(), [1, 2, 3, 1, 2], 4).tokens) == [3, 1, 2]


def test_options_bucket_the_length_of_the_copied_stretch() -> None:
    lookup = PromptLookupDrafter()
    source = list(range(100, 120))
    assert lookup.option([1, 2, 3, 4]) is None  # nothing to copy from
    assert lookup.option([*source, 5, 6, 107, 108]) == Option("prompt lookup", 1)  # 2 tokens agree
    assert lookup.option([*source, 5, 106, 107, 108]) == Option("prompt lookup", 2)  # 3
    assert lookup.option([*source, 5, *source[2:8]]) == Option("prompt lookup", 3)  # 6
    assert lookup.option([*source, 5, *source[:12]]) == Option("prompt lookup", 4)  # 12
    assert lookup.option([*source, 5, *source[:18]]) == Option("prompt lookup", 5)  # 18: 16+


def test_the_match_agreeing_furthest_back_is_copied() -> None:
    # (1, 2) occurs twice: after 9, 8 (followed by 30) and later after 7 (followed
    # by 40); the context ends 9, 8, 1, 2, so the older one continues its stretch.
    context = [9, 8, 1, 2, 30, 31, 7, 1, 2, 40, 41, 5, 9, 8, 1, 2]
    d = draft(PromptLookupDrafter(ngram_max=2), context, 2)
    assert list(d.tokens) == [30, 31]
    assert reference(context, 2, ngram_max=2, ngram_min=2) == [30, 31]
