"""Every drafter kind, declared once: what users call it, what it needs, how it is built.

The command line, the settings (validation and dialog), the models dialog,
the measurements and the benchmarks read these records instead of spelling
out the kinds themselves. Adding a drafter is its module under
``engine/drafters/`` plus one entry in ``DRAFTERS`` (and, for ``file="derived"``,
the code that derives its file, which lives above the engine: its entry in
``gambit.models.drafter_files.DERIVATIONS``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from gambit.engine.drafters.base import Drafter
from gambit.engine.drafters.combined import CombinedDrafter
from gambit.engine.drafters.draft_model import (
    DraftModelDrafter,
    check_compatible,
    vocabulary_difference,
)
from gambit.engine.drafters.lookup import PromptLookupDrafter
from gambit.engine.drafters.text_draft import TextDraftDrafter
from gambit.errors import ModelFileError
from gambit.formats.layerskip_file import LayerSkipInfo, read_layer_skip_info

if TYPE_CHECKING:
    from gambit.engine.machine.runtime import ModelRuntime

DrafterKind = Literal["none", "draft", "lookup", "draft+lookup", "layerskip"]
# Where a drafter's GGUF comes from: it has none; the user chooses it; or it is
# derived from the target (found in the cache, or made, before the engine loads).
FileSource = Literal["none", "chosen", "derived"]


@dataclass(frozen=True)
class BuildInput:
    """What a drafter is built from: the loaded target, and the loaded draft
    model for kinds with a file (None otherwise)."""

    target: ModelRuntime
    draft: ModelRuntime | None
    draft_path: Path | None
    lookup_ngram_max: int


@dataclass
class Built:
    """A built drafter and what describes its shape (the skipped blocks)."""

    drafter: Drafter | None
    layer_skip: LayerSkipInfo | None = None


@dataclass(frozen=True)
class DrafterSpec:
    """One drafter kind.

    ``label`` is its name in the settings dialog (the models dialog uses it in
    lower case); ``short`` the name it has in sentences and reports ("prompt
    lookup", also ``Drafter.name``); ``tag`` the shortest, for table columns.
    ``free``: drafting costs nothing next to a target decode, so the γ
    controller is told so instead of measuring it.
    """

    kind: DrafterKind
    label: str
    short: str
    tag: str
    help: str
    file: FileSource
    tree: bool
    free: bool
    build: Callable[[BuildInput], Built]
    cli_flag: str | None = None  # --draft PATH for file="chosen", else a switch
    cli_help: str = ""
    # A drafter made of others: the command line takes it as their flags together.
    combines: tuple[str, ...] = ()

    @property
    def loads_model(self) -> bool:
        """Whether a draft GGUF is loaded next to the target."""
        return self.file != "none"

    @property
    def cli_dest(self) -> str | None:
        """The argparse attribute of ``cli_flag``."""
        return self.cli_flag[2:].replace("-", "_") if self.cli_flag else None


def _build_none(_: BuildInput) -> Built:
    return Built(None)


def _build_lookup(given: BuildInput) -> Built:
    return Built(PromptLookupDrafter(ngram_max=given.lookup_ngram_max))


def _model_drafter(given: BuildInput) -> DraftModelDrafter | TextDraftDrafter:
    """The draft model's drafter: token for token where it shares the target's
    vocabulary, through text where it does not (the two tokenizers decide)."""
    assert given.draft is not None
    if vocabulary_difference(given.target, given.draft) is None:
        return DraftModelDrafter(given.draft)
    return TextDraftDrafter(given.target, given.draft)


def _build_draft(given: BuildInput) -> Built:
    return Built(_model_drafter(given))


def _build_combined(given: BuildInput) -> Built:
    model = _model_drafter(given)
    lookup = PromptLookupDrafter(ngram_max=given.lookup_ngram_max)
    # Copies checked by the draft model need its logits over the target's
    # tokens: a draft through text proposes its own text instead.
    return Built(CombinedDrafter(model, lookup, check_copies=not model.through_text))


def _build_layerskip(given: BuildInput) -> Built:
    assert given.draft is not None and given.draft_path is not None
    check_compatible(given.target, given.draft)  # (derived from the target: always)
    drafter = DraftModelDrafter(given.draft)
    drafter.name = "layer skip"
    built = Built(drafter, read_layer_skip_info(given.draft_path))
    if built.layer_skip is None:
        raise ModelFileError(
            str(given.draft_path),
            "not a layer-skip draft (it has no gambit.layer_skip "
            "metadata); derive one with `gambit-cli models layerskip`",
        )
    return built


LAYERSKIP_HELP = (
    "The target drafts for itself with some of its blocks skipped. The first load measures"
    " which blocks to skip (a minute or more: several for a large model on a slow machine;"
    " its progress shows, and Cancel stops it); on very small models it rarely pays, and the"
    " controller then switches it off."
)

_SPECS = (
    DrafterSpec(
        kind="none",
        label="None",
        short="target only",
        tag="none",
        help="The target model writes every token on its own.",
        file="none",
        tree=False,
        free=False,
        build=_build_none,
    ),
    DrafterSpec(
        kind="lookup",
        label="Prompt lookup",
        short="prompt lookup",
        tag="lookup",
        help="Copies ahead from the conversation: free, strong on rewriting and code edits.",
        file="none",
        tree=True,
        free=True,  # a dictionary look-up: free next to a decode
        build=_build_lookup,
        cli_flag="--lookup",
        cli_help="draft by prompt lookup (n-gram match)",
    ),
    DrafterSpec(
        kind="draft",
        label="Draft model",
        short="draft model",
        tag="draft",
        help="A much smaller model guesses ahead: token for token where it shares the"
        " target's tokenizer, through text where it does not.",
        file="chosen",
        tree=True,
        free=False,
        build=_build_draft,
        cli_flag="--draft",
        cli_help="draft GGUF model: any much smaller model (one with another tokenizer "
        "drafts through text)",
    ),
    DrafterSpec(
        kind="draft+lookup",
        label="Draft model + lookup",
        short="draft model + lookup",
        tag="draft+lookup",
        help="Both at once: each round drafts with whichever is expected to pay more,"
        " lookup where the text repeats, the draft model elsewhere.",
        file="chosen",
        tree=False,
        free=False,
        build=_build_combined,
        combines=("draft", "lookup"),
    ),
    DrafterSpec(
        kind="layerskip",
        label="Self-speculation (skip layers)",
        short="layer skip",
        tag="layer skip",
        help=LAYERSKIP_HELP,
        file="derived",
        tree=True,
        free=False,
        build=_build_layerskip,
        cli_flag="--layer-skip",
        cli_help="self-speculation: the target drafts for itself with some of its blocks "
        "skipped (found by a search on first use, then cached)",
    ),
)

# Every kind, in the order the dialogs list them.
DRAFTERS: dict[DrafterKind, DrafterSpec] = {spec.kind: spec for spec in _SPECS}
# The kinds that actually draft (what the benchmarks and measurements compare).
DRAFTING: tuple[DrafterKind, ...] = tuple(k for k in DRAFTERS if k != "none")
# The drafters that can propose a token tree instead of a chain.
TREE_DRAFTERS: tuple[DrafterKind, ...] = tuple(k for k, s in DRAFTERS.items() if s.tree)
# The drafters that copy text (prompt lookup, alone or with a draft model): a
# memory of earlier conversations helps them (gambit.storage.history_memory).
COPYING_DRAFTERS: tuple[DrafterKind, ...] = tuple(
    k for k, s in DRAFTERS.items() if "lookup" in (k, *s.combines)
)


def combined_kind(kinds: set[str]) -> DrafterSpec | None:
    """The drafter made of exactly ``kinds`` (two or more), if there is one."""
    return next((s for s in _SPECS if s.combines and set(s.combines) == kinds), None)


def spec(kind: str) -> DrafterSpec:
    """The record of ``kind`` (a KeyError names an unknown one)."""
    return DRAFTERS[kind]  # type: ignore[index]


def short_name(kind: str) -> str:
    """``kind``'s name in sentences; an unknown kind (from an old record) as it is."""
    found = DRAFTERS.get(kind)  # type: ignore[call-overload]
    return found.short if found is not None else kind


def tag(kind: str) -> str:
    """``kind``'s name in table columns; an unknown kind as it is."""
    found = DRAFTERS.get(kind)  # type: ignore[call-overload]
    return found.tag if found is not None else kind
