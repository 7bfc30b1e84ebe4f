"""Can one model draft for another, and how? Decided from the two headers, before loading.

Any smaller model can draft: one that shares the target's vocabulary drafts
token for token, any other through text (``gambit.engine.drafters.text_draft``).
Whether the vocabularies agree is the one rule the engine drafts by
(``gambit.engine.drafters.vocabulary``, llama.cpp's
``common_speculative_are_compatible``), applied here to the two headers:
equal tokenizer fingerprints mean equal token lists, and only where they
differ are both token arrays read, to find the first token that differs (or
to see that only the pre-tokenizer differs, which llama.cpp allows).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from gambit.engine.drafters.vocabulary import Vocabulary
from gambit.engine.drafters.vocabulary import vocabulary_differences as differences_of
from gambit.formats.gguf_file import read_header
from gambit.formats.gguf_info import ModelInfo
from gambit.models.memory import MIB, MIN_DRAFT_SAVING, bytes_read_per_token

# A draft through text must read at most this share of the target's bytes per
# token to be offered: another family agrees less often than a sibling does.
TEXT_DRAFT_READ_MAX = 0.4
THROUGH_TEXT_NOTE = (
    "each round the draft's text is tokenized again for the target (well under a "
    "millisecond), and a model of another family agrees less often than a sibling would: "
    "the statistics show what it lands, and speculation turns itself off where it does not pay"
)


@dataclass(frozen=True)
class PairReport:
    compatible: bool
    reasons: list[str] = field(default_factory=list)  # why not (empty when compatible)
    notes: list[str] = field(default_factory=list)  # worth knowing, not blocking
    # The tokenizers differ (the vocabulary rules' findings in ``differences``):
    # the draft drafts through text, not token for token.
    through_text: bool = False
    differences: list[str] = field(default_factory=list)

    def summary(self) -> str:
        if self.compatible:
            how = "drafts through text" if self.through_text else "same tokenizer"
            return f"compatible, {how}" + (f" ({'; '.join(self.notes)})" if self.notes else "")
        return "incompatible: " + "; ".join(self.reasons)


def pair_report(target: ModelInfo, draft: ModelInfo) -> PairReport:
    """Whether ``draft`` can draft for ``target``, how (token for token, or
    through text), and what is worth knowing about the pair."""
    without = [m for m in (draft, target) if m.vocab_type_name == "none"]
    if without:
        # No tokenizer: its tokens cannot be written as text or read from it.
        reasons = [f"{m.path.name} has no tokenizer (vocabulary type none)" for m in without]
        return PairReport(compatible=False, reasons=reasons)
    differences = vocabulary_differences(target, draft)
    notes: list[str] = []
    if differences:
        notes.append(
            f"different tokenizers ({draft.vocab_type_name} with {draft.vocab_size:,} tokens vs "
            f"{target.vocab_type_name} with {target.vocab_size:,}): the draft drafts through "
            f"text; {THROUGH_TEXT_NOTE}"
        )
    elif target.tokenizer_pre != draft.tokenizer_pre and (
        target.tokenizer_digest != draft.tokenizer_digest
    ):
        notes.append(
            f"different pre-tokenizers ('{draft.tokenizer_pre}' vs "
            f"'{target.tokenizer_pre}'): allowed, but text may split differently"
        )
    notes += _cost_notes(target, draft, bool(differences))
    return PairReport(
        compatible=True, notes=notes, through_text=bool(differences), differences=differences
    )


def drafts_through_text(target: ModelInfo, draft: ModelInfo) -> bool:
    """Whether ``draft`` drafts for ``target`` through text (their vocabularies differ)."""
    return bool(vocabulary_differences(target, draft))


def vocabulary_differences(target: ModelInfo, draft: ModelInfo) -> list[str]:
    """Every reason ``draft`` cannot draft for ``target`` token for token
    (empty: their vocabularies agree), by the one rule the engine drafts by."""
    return differences_of(Vocabulary.of_info(target), Vocabulary.of_info(draft))


def _cost_notes(target: ModelInfo, draft: ModelInfo, through_text: bool) -> list[str]:
    """Whether the draft is cheap enough to pay: a step costs about the bytes of
    weights it reads (``memory.bytes_read_per_token``)."""
    t_read, d_read = _read_per_token(target), _read_per_token(draft)
    sizes = f"{d_read / MIB:.0f} vs {t_read / MIB:.0f} MiB of weights read per token"
    if draft.file_size >= target.file_size or d_read >= t_read:
        return [f"the draft is not smaller than the target ({sizes}), so drafting cannot pay off"]
    saving = 1 - d_read / t_read
    if saving < MIN_DRAFT_SAVING:
        return [
            f"the draft reads only {saving * 100:.0f} % fewer bytes per token than the target "
            f"({sizes}): too close in cost to pay for the guesses it gets wrong (a draft "
            f"needs about {MIN_DRAFT_SAVING * 100:.0f} % fewer)"
        ]
    if through_text and d_read > TEXT_DRAFT_READ_MAX * t_read:
        return [
            f"the draft reads {d_read / t_read * 100:.0f} % of the target's bytes per token "
            f"({sizes}): a draft of another family lands fewer guesses, so it pays only "
            f"below about {TEXT_DRAFT_READ_MAX * 100:.0f} %"
        ]
    return []


def much_cheaper(target: ModelInfo, draft: ModelInfo, through_text: bool) -> bool:
    """Whether ``draft`` is cheap enough next to ``target`` to be offered as its
    draft: a smaller file, and for a draft through text at most
    ``TEXT_DRAFT_READ_MAX`` of the target's weight traffic per token."""
    if draft.file_size >= target.file_size:
        return False
    return not through_text or _read_per_token(draft) <= TEXT_DRAFT_READ_MAX * _read_per_token(
        target
    )


def _read_per_token(info: ModelInfo) -> int:
    header = read_header(info.path)
    return bytes_read_per_token({t.name: t.n_bytes for t in header.tensors})


def compatible_drafts(target: ModelInfo, candidates: Iterable[ModelInfo]) -> list[ModelInfo]:
    """The candidates much cheaper than ``target`` (``much_cheaper``), which
    can all draft for it: those of its tokenizer first (token for token, a
    sibling agrees most), then the others (through text), each smallest file
    first. The first one is the suggestion."""
    found: list[tuple[bool, int, str, ModelInfo]] = []
    seen: set[str] = set()
    for cand in candidates:
        key = str(cand.path.resolve())
        if key in seen or cand.path.resolve() == target.path.resolve():
            continue
        seen.add(key)
        if cand.file_size >= target.file_size:
            continue
        through_text = drafts_through_text(target, cand)
        if much_cheaper(target, cand, through_text):
            found.append((through_text, cand.file_size, str(cand.path), cand))
    found.sort(key=lambda f: f[:3])
    return [f[3] for f in found]


def estimate_pair(
    selected: ModelInfo,
    chosen_draft: ModelInfo | None,
    chosen_target: Callable[[], ModelInfo | None],
) -> tuple[ModelInfo, ModelInfo | None]:
    """The (target, draft) a memory estimate for ``selected`` counts.

    The selection runs as the target, with the chosen draft (any draft can
    draft for any target: through text where their tokenizers differ).
    When the selection *is* the chosen draft, the chosen target runs it
    (``chosen_target`` is read only then: it may be a file not yet fetched,
    None, and the selection is estimated alone).
    """
    if chosen_draft is None:
        return selected, None
    if _same_path(chosen_draft, selected):
        target = chosen_target() or selected
        return (target, None) if _same_path(target, selected) else (target, selected)
    return selected, chosen_draft


def _same_path(a: ModelInfo, b: ModelInfo) -> bool:
    return os.path.realpath(a.path) == os.path.realpath(b.path)
