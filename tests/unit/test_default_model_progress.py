"""How the default model's preparation is described while it runs."""

from __future__ import annotations

from gambit.fsutil import NO_COUNTS
from gambit.models.default_model import describe_progress


def test_stages_with_byte_counts_show_a_percentage() -> None:
    assert describe_progress("extracting", 0, 200) == "extracting 0%"
    assert describe_progress("extracting", 50, 200) == "extracting 25%"
    assert describe_progress("verifying", 0, 0) == "verifying 100%"


def test_a_download_without_byte_counts_says_so_instead_of_a_stuck_zero() -> None:
    text = describe_progress("downloading", 0, NO_COUNTS)
    assert text == "downloading (no progress reported)…"
    assert "0%" not in text
