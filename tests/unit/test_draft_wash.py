"""Drafted characters carried from Markdown source to rendered text."""

from __future__ import annotations

from gambit.ui.window.draft_wash import align, washed_runs


def flags(text: str, drafted: str) -> list[bool]:
    """Mark the characters of the first occurrence of ``drafted`` in ``text``."""
    at = text.index(drafted)
    return [at <= i < at + len(drafted) for i in range(len(text))]


def test_syntax_is_skipped_and_text_matched_in_order() -> None:
    assert align("a **b** c", "a b c") == [0, 1, 4, 7, 8]


def test_a_soft_line_break_renders_as_a_space() -> None:
    assert align("one\ntwo", "one two") == [0, 1, 2, 3, 4, 5, 6]


def test_structure_and_unknown_characters_are_not_matched() -> None:
    # a table: cells between frame markers; "1." is list decoration, not text
    assert align("| a | b |", "\ufdd0a\ufdd0b\ufdd1") == [-1, 2, -1, 6, -1]
    assert align("x", "?x") == [-1, 0]


def test_washed_runs_follow_the_drafted_source_characters() -> None:
    source = "Say **hello world** now"
    rendered = "Say hello world now"
    assert washed_runs(source, rendered, flags(source, "world** n")) == [(10, 17)]
    assert rendered[10:17] == "world n"
    assert washed_runs(source, rendered, [False] * len(source)) == []
    assert washed_runs(source, rendered, []) == []


def test_a_link_target_is_not_text() -> None:
    source = "see [the docs](https://example.com/docs) now"
    rendered = "see the docs now"
    assert washed_runs(source, rendered, flags(source, "now")) == [(13, 16)]
