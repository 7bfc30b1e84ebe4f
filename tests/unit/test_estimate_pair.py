"""Which pair the models dialog's memory view estimates for a selected model:
the pure rule in models/pairing.py, on real GGUF headers (no Qt)."""

from __future__ import annotations

from pathlib import Path

from gambit.formats.gguf_info import ModelInfo, inspect_model
from gambit.models.pairing import estimate_pair


def _never() -> ModelInfo | None:
    raise AssertionError("the chosen target is read only when the selection is the draft")


def test_no_draft_chosen_estimates_the_selection_alone(smol_q8_0: Path) -> None:
    selected = inspect_model(smol_q8_0)
    assert estimate_pair(selected, None, _never) == (selected, None)


def test_a_draft_with_the_same_tokenizer_runs_with_the_selection(
    smol_q8_0: Path, smol_q4_1: Path
) -> None:
    selected, draft = inspect_model(smol_q8_0), inspect_model(smol_q4_1)
    assert estimate_pair(selected, draft, _never) == (selected, draft)


def test_a_draft_with_another_tokenizer_is_counted_too(
    smol_q8_0: Path, changed_tokenizer: Path
) -> None:
    # (it drafts through text: it is loaded next to the target all the same)
    selected, draft = inspect_model(smol_q8_0), inspect_model(changed_tokenizer)
    assert estimate_pair(selected, draft, _never) == (selected, draft)


def test_the_selected_draft_runs_under_the_chosen_target(smol_q8_0: Path, smol_q4_1: Path) -> None:
    target, selected = inspect_model(smol_q8_0), inspect_model(smol_q4_1)
    again = inspect_model(smol_q4_1)  # another object for the same file
    assert estimate_pair(selected, again, lambda: target) == (target, selected)
    # No target file yet (the embedded model not fetched): the selection alone.
    assert estimate_pair(selected, again, lambda: None) == (selected, None)
