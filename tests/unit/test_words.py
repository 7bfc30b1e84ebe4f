"""How counts read in messages (gambit.words)."""

from __future__ import annotations

from gambit.words import counted


def test_a_count_of_one_is_singular_and_others_plural() -> None:
    assert counted(1, "usable model") == "1 usable model"
    assert counted(0, "usable model") == "0 usable models"
    assert counted(2, "thread") == "2 threads"
    assert counted(1, "reply", "replies") == "1 reply"
    assert counted(3, "reply", "replies") == "3 replies"
    assert counted(12_000, "token") == "12,000 tokens"
