"""Layer-skip drafts as files: a GGUF written from a target without some of its blocks.

A transformer's blocks each add a correction to a residual stream, so the
model still runs, less accurately, with some of them gone.
``write_layer_skip_model`` writes such a draft as a GGUF of its own, with
``gguf``'s writer: the target's tensors copied as they are (same weight types,
no re-quantization), minus ``blk.N.*`` for the skipped blocks, the rest
renumbered, and the metadata that counts or lists blocks rewritten. It shares
the target's tokenizer by construction, so the ordinary draft-model drafter
uses it. ``read_layer_skip_info`` tells such a file from an ordinary model.

Which blocks to skip is measured in ``gambit.models.layerskip``.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np

from gambit.errors import NotGGUFError, OperationCancelledError
from gambit.formats.gguf_blocks import BlockLayoutError, BlockModel, Cancel, Field, cancelled
from gambit.formats.gguf_file import check_model_file, read_header
from gambit.fsutil import Progress

__all__ = [
    "Cancel",
    "LayerSkipCancelledError",
    "LayerSkipError",
    "LayerSkipInfo",
    "SourceModel",
    "cancelled",
    "read_layer_skip_info",
    "write_layer_skip_model",
]

KEY_SOURCE = "gambit.layer_skip.source"
# absent when nothing was skipped (gguf writes no empty arrays)
KEY_SKIPPED = "gambit.layer_skip.skipped"
KEY_SOURCE_BLOCKS = "gambit.layer_skip.source_blocks"


class LayerSkipError(BlockLayoutError):
    """A layer-skip draft cannot be made from this model, or with these blocks."""


class LayerSkipCancelledError(OperationCancelledError):
    """The user cancelled the search or the writing; no partial file was left behind."""


@dataclass(frozen=True)
class LayerSkipInfo:
    """What a layer-skip draft's header says about where it came from."""

    skipped: tuple[int, ...]  # block indices of the source model, ascending
    source_blocks: int
    source_name: str  # the source's file name

    @property
    def kept(self) -> int:
        return self.source_blocks - len(self.skipped)

    def describe(self) -> str:
        """For people: "skips blocks 12, 15, 18 of 30"."""
        if not self.skipped:
            return f"skips no block of {self.source_blocks}"
        noun = "block" if len(self.skipped) == 1 else "blocks"
        listed = ", ".join(map(str, self.skipped))
        return f"skips {noun} {listed} of {self.source_blocks}"


def read_layer_skip_info(path: str | os.PathLike[str]) -> LayerSkipInfo | None:
    """The layer-skip metadata of a GGUF file's header (milliseconds), or None
    for an ordinary model."""
    p = Path(path)
    try:
        header = read_header(p, keep_arrays=(KEY_SKIPPED,))
    except (OSError, ValueError, struct.error) as exc:
        check_model_file(p)  # raises the specific error (missing, empty, ...)
        raise NotGGUFError(str(p), f"the GGUF header cannot be read ({exc})") from exc
    meta = header.metadata
    source = meta.get(KEY_SOURCE)
    if not isinstance(source, str):
        return None
    skipped = meta.get(KEY_SKIPPED, [])
    blocks = meta.get(KEY_SOURCE_BLOCKS)
    if not isinstance(skipped, list) or not isinstance(blocks, int):
        raise NotGGUFError(str(p), "the layer-skip metadata of this model is damaged")
    return LayerSkipInfo(tuple(sorted(int(i) for i in skipped)), blocks, source)


class SourceModel(BlockModel):
    """A GGUF read once, ready to write any number of layer-skip copies of it."""

    error = LayerSkipError

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        # A draft made from a draft: skip sets compose, back to the first source.
        self.prior = read_layer_skip_info(path)

    def skipped_share(self, skip: Iterable[int]) -> float:
        """The share of the blocks' weight bytes that ``skip`` leaves out."""
        return sum(self.block_bytes[i] for i in skip) / max(1, sum(self.block_bytes))

    def check_skip(self, skip: Iterable[int]) -> tuple[int, ...]:
        n = self.n_blocks
        blocks: set[int] = set()
        for i in skip:
            if isinstance(i, bool) or not isinstance(i, (int, np.integer)):
                raise LayerSkipError(f"block indices must be whole numbers, not {i!r}")
            if not 0 <= i < n:
                raise LayerSkipError(
                    f"block {i} is out of range: {self.path.name} has blocks 0 to {n - 1}"
                )
            blocks.add(int(i))
        if len(blocks) >= n:
            raise LayerSkipError(
                f"cannot skip all {n} blocks of {self.path.name}: at least one must be kept"
            )
        return tuple(sorted(blocks))

    def write(
        self,
        dst: Path,
        skip: Iterable[int],
        progress: Progress | None = None,
        cancel: Cancel | None = None,
        durable: bool = True,
    ) -> Path:
        skipped = self.check_skip(skip)
        kept = [i for i in range(self.n_blocks) if i not in skipped]
        return self.write_plan(
            dst,
            kept,
            extra=self._provenance(skipped),
            drop_prefix="gambit.layer_skip.",
            progress=progress,
            cancel=cancel,
            durable=durable,
            stage="writing the draft",
            cancelled_error=LayerSkipCancelledError,
        )

    def _provenance(self, skipped: tuple[int, ...]) -> list[Field]:
        """The ``gambit.layer_skip.*`` keys: which blocks of the first source are gone."""
        vt = gguf.GGUFValueType
        if self.prior is not None:  # compose with the source's own skip set
            original = [i for i in range(self.prior.source_blocks) if i not in self.prior.skipped]
            total = sorted({*self.prior.skipped, *(original[i] for i in skipped)})
            source, blocks = self.prior.source_name, self.prior.source_blocks
        else:
            total, source, blocks = list(skipped), self.path.name, self.n_blocks
        fields: list[Field] = [
            (KEY_SOURCE, vt.STRING, None, source),
            (KEY_SOURCE_BLOCKS, vt.UINT32, None, blocks),
        ]
        if total:
            fields.append((KEY_SKIPPED, vt.ARRAY, vt.UINT32, total))
        return fields


def write_layer_skip_model(
    src: str | os.PathLike[str],
    dst: str | os.PathLike[str],
    skip: Sequence[int],
    progress: Progress | None = None,
    *,
    cancel: Cancel | None = None,
) -> Path:
    """Write ``src`` without the blocks in ``skip`` (indices of ``src``) to ``dst``.

    Tensor data is copied byte for byte; kept blocks are renumbered 0..n-1 in
    order; ``{arch}.block_count`` and per-block metadata arrays follow. The
    draft records ``gambit.layer_skip.*`` (see ``read_layer_skip_info``).
    Atomic: a temporary file in ``dst``'s folder, renamed at the end; on any
    error or cancellation no file is left. Raises ``LayerSkipError`` for a
    skip set that keeps no block or names a block the model does not have, or
    a model without a ``blk.N`` layout.
    """
    src_path, dst_path = Path(src).expanduser(), Path(dst).expanduser()
    if dst_path.exists() and src_path.exists() and os.path.samefile(src_path, dst_path):
        raise LayerSkipError(f"the layer-skip draft would overwrite its source: {dst_path}")
    return SourceModel(src_path).write(dst_path, skip, progress, cancel)
