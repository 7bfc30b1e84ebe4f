"""Where a drafter's GGUF comes from, resolved in one place.

The registry says where each kind's file comes from (``DrafterSpec.file``):
it has none, the user chooses it, or it is derived from the target. Deriving
loads models and writes into the model library, so it cannot live in the
engine; it lives here. The command line, the worker and the benchmarks call
``resolve_drafter_file`` and never name a kind that derives: a new derived
kind adds its ``Derivation`` to ``DERIVATIONS`` (a unit test checks that every
``file="derived"`` kind of the registry has one).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from gambit.engine.drafters.registry import DrafterKind, spec

if TYPE_CHECKING:
    from gambit.engine.machine.runtime import RuntimeOptions
    from gambit.formats.layerskip_file import Cancel
    from gambit.fsutil import Progress

__all__ = ["DERIVATIONS", "Derivation", "DraftFile", "resolve_drafter_file"]


@dataclass(frozen=True)
class DraftFile:
    """A drafter's GGUF (None: its kind loads none, or none was chosen) and, for a
    derived one, why drafting with it would not pay (None: it may)."""

    path: Path | None
    refusal: str | None = None


class Derive(Protocol):
    def __call__(
        self,
        target: Path,
        *,
        models_dir: Path | None,
        progress: Progress | None,
        cancel: Cancel | None,
        options: RuntimeOptions | None,
    ) -> DraftFile: ...


@dataclass(frozen=True)
class Derivation:
    """How one kind's file is derived from the target.

    ``activity`` starts every progress line about it ("Finding layers to skip:
    …"); ``cancelled`` says why the drafter is off when the user stopped it.
    With ``cancel`` set, ``derive`` raises ``OperationCancelledError``.
    """

    activity: str
    cancelled: str
    derive: Derive


def _layer_skip(
    target: Path,
    *,
    models_dir: Path | None,
    progress: Progress | None,
    cancel: Cancel | None,
    options: RuntimeOptions | None,
) -> DraftFile:
    # Imported here: the search loads llama.cpp, which a command that never
    # derives a draft should not have to wait for.
    from gambit.models.layerskip import ensure_layer_skip_draft
    from gambit.models.library import ModelLibrary

    # (None: ensure_layer_skip_draft opens the user's library itself)
    library = ModelLibrary(models_dir=models_dir) if models_dir is not None else None
    result = ensure_layer_skip_draft(
        target, library=library, progress=progress, cancel=cancel, options=options
    )
    return DraftFile(result.path, result.plan.refusal())


DERIVATIONS: dict[DrafterKind, Derivation] = {
    "layerskip": Derivation(
        activity="Finding layers to skip",
        cancelled="The search for layers to skip was cancelled, so self-speculation was not "
        "switched on.",
        derive=_layer_skip,
    ),
}


def resolve_drafter_file(
    kind: DrafterKind,
    target: Path,
    *,
    chosen: Path | None = None,
    models_dir: Path | None = None,
    progress: Callable[[str], Progress | None] | None = None,
    cancel: Cancel | None = None,
    options: RuntimeOptions | None = None,
) -> DraftFile:
    """The GGUF that drafter ``kind`` loads next to ``target``: none, ``chosen``
    (the user's file), or derived from ``target`` (found in the library's cache,
    or made now: a minute or more the first time).

    ``progress(activity)`` is called once, only when a file is derived, and
    gives what follows that derivation's steps (or None); ``models_dir``
    (default: the library's) is where derived files are kept; ``options`` how the target is
    run while deriving. ``cancel`` stops a derivation (``OperationCancelledError``).
    """
    source = spec(kind).file
    if source == "none":
        return DraftFile(None)
    if source == "chosen":
        return DraftFile(chosen)
    derivation = DERIVATIONS[kind]
    return derivation.derive(
        target,
        models_dir=models_dir,
        progress=progress(derivation.activity) if progress is not None else None,
        cancel=cancel,
        options=options,
    )
