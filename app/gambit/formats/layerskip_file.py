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

import logging
import os
import re
import secrets
import struct
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gguf
import numpy as np
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

from gambit.errors import GambitError, NotGGUFError, OperationCancelledError
from gambit.formats.gguf_file import TensorInfo, check_model_file, read_header
from gambit.fsutil import Progress, check_disk_space, remove_stale

log = logging.getLogger(__name__)

KEY_SOURCE = "gambit.layer_skip.source"
# absent when nothing was skipped (gguf writes no empty arrays)
KEY_SKIPPED = "gambit.layer_skip.skipped"
KEY_SOURCE_BLOCKS = "gambit.layer_skip.source_blocks"

_BLOCK_RE = re.compile(r"^blk\.(\d+)\.(.+)$")

# Architectures whose sliding-window layers follow a pattern over the layer
# index (llama.cpp's ``load_swa_pattern(n, dense_first)`` in models/*.cpp).
# Renumbering the blocks would shift that pattern, so the draft states it per
# layer (``{arch}.attention.sliding_window_pattern`` as an array of bools).
_SWA_PATTERNS: dict[str, tuple[int, bool]] = {
    "gemma2": (2, False),
    "gemma3": (6, False),
    "gemma-embedding": (6, False),
    "cohere2": (4, False),
    "openai-moe": (2, False),
    "exaone4": (4, False),
    "olmo2": (4, False),
    "llama4": (4, False),
    "afmoe": (4, False),
    "mellum": (4, False),
    "plamo3": (8, False),
    "smallthinker": (4, True),
}
# Layers tied to one another by index (shared KV caches, per-layer embeddings):
# dropping one would break the others.
_UNSUPPORTED_ARCHS = frozenset({"gemma3n", "gemma4"})

# Stops a search or a write: an event, or a function saying whether to stop.
Cancel = threading.Event | Callable[[], bool]


class LayerSkipError(GambitError):
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


def cancelled(cancel: Cancel | None) -> bool:
    if cancel is None:
        return False
    return cancel.is_set() if isinstance(cancel, threading.Event) else bool(cancel())


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


@dataclass
class _Field:
    name: str
    vtype: Any  # gguf.GGUFValueType
    sub_type: Any
    value: Any


_FORMATS: dict[int, str] = {  # struct formats; numpy reads arrays with the same codes
    gguf.GGUFValueType.UINT8: "<B",
    gguf.GGUFValueType.INT8: "<b",
    gguf.GGUFValueType.UINT16: "<H",
    gguf.GGUFValueType.INT16: "<h",
    gguf.GGUFValueType.UINT32: "<I",
    gguf.GGUFValueType.INT32: "<i",
    gguf.GGUFValueType.FLOAT32: "<f",
    gguf.GGUFValueType.BOOL: "<?",
    gguf.GGUFValueType.UINT64: "<Q",
    gguf.GGUFValueType.INT64: "<q",
    gguf.GGUFValueType.FLOAT64: "<d",
}


def _read_typed_metadata(path: Path, end: int) -> list[_Field]:
    """Every metadata field with its GGUF value type, strings kept as bytes
    (so they are written back exactly). ``gguf.GGUFReader`` does the same but
    builds a numpy view per array element: 2 s for SmolLM2, 11 s for Gemma-3's
    262k tokens; this takes a fraction of a second."""
    vt = gguf.GGUFValueType
    with path.open("rb") as f:
        buf = f.read(end)
    pos = 24  # magic, version, tensor count, field count
    n_kv = struct.unpack_from("<Q", buf, 16)[0]

    def take(fmt: str) -> Any:
        nonlocal pos
        value = struct.unpack_from(fmt, buf, pos)[0]
        pos += struct.calcsize(fmt)
        return value

    def string() -> bytes:
        nonlocal pos
        n = take("<Q")
        pos += n
        return buf[pos - n : pos]

    fields: list[_Field] = []
    try:
        for _ in range(n_kv):
            name = string().decode("utf-8")
            vtype = vt(take("<I"))
            if vtype != vt.ARRAY:
                value = string() if vtype == vt.STRING else take(_FORMATS[vtype])
                fields.append(_Field(name, vtype, None, value))
                continue
            etype, n = vt(take("<I")), take("<Q")
            if etype == vt.STRING:
                items: list[Any] = [string() for _ in range(n)]
            elif etype == vt.ARRAY:
                raise NotGGUFError(str(path), f"nested metadata arrays ({name}) are not supported")
            else:
                dtype = np.dtype(_FORMATS[etype])
                items = np.frombuffer(buf, dtype, count=n, offset=pos).tolist()
                pos += n * dtype.itemsize
            fields.append(_Field(name, vtype, etype, items))
    except (struct.error, ValueError, KeyError) as exc:
        raise NotGGUFError(str(path), f"the GGUF header is damaged ({exc})") from exc
    return fields


def _byte_shape(t: TensorInfo) -> tuple[int, ...]:
    block, type_size = GGML_QUANT_SIZES[GGMLQuantizationType(t.ggml_type)]
    dims = list(reversed(t.shape)) or [1]
    dims[-1] = dims[-1] // block * type_size
    return tuple(dims)


class SourceModel:
    """A GGUF read once, ready to write any number of layer-skip copies of it
    (with ``gguf.GGUFWriter``: the metadata as read, the tensor bytes as stored)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        header = check_model_file(path)
        self.header = header
        self.arch = header.architecture
        if self.arch in _UNSUPPORTED_ARCHS:
            raise LayerSkipError(
                f"{path.name}: the {self.arch} architecture ties layers to one another "
                "(shared KV caches, per-layer inputs), so blocks cannot be left out of it"
            )
        self.block_key = f"{self.arch}.block_count"
        n_blocks = header.metadata.get(self.block_key)
        if not isinstance(n_blocks, int) or n_blocks < 1:
            raise LayerSkipError(
                f"{path.name}: no {self.block_key} in its metadata: the {self.arch} "
                "architecture has no blk.N layout of repeated blocks to skip"
            )
        self.n_blocks = n_blocks
        indices: set[int] = set()
        sizes: dict[int, int] = {}
        for info in header.tensors:
            if m := _BLOCK_RE.match(info.name):
                block = int(m.group(1))
                indices.add(block)
                sizes[block] = sizes.get(block, 0) + info.n_bytes
        if not indices:
            raise LayerSkipError(
                f"{path.name}: no blk.N tensors: the {self.arch} architecture has no "
                "blk.N layout of repeated blocks to skip"
            )
        if max(indices) >= n_blocks:
            raise LayerSkipError(
                f"{path.name}: tensor blk.{max(indices)}.* is past {self.block_key} = {n_blocks}"
            )
        # A draft made from a draft: skip sets compose, back to the first source.
        self.prior = read_layer_skip_info(path)
        self._fields: list[_Field] | None = None
        self.block_bytes = [sizes.get(i, 0) for i in range(n_blocks)]

    def skipped_share(self, skip: Iterable[int]) -> float:
        """The share of the blocks' weight bytes that ``skip`` leaves out."""
        return sum(self.block_bytes[i] for i in skip) / max(1, sum(self.block_bytes))

    @property
    def fields(self) -> list[_Field]:
        """The metadata with its value types, read on first use."""
        if self._fields is None:
            self._fields = _read_typed_metadata(self.path, self.header.data_offset)
        return self._fields

    def _value(self, name: str) -> Any:
        return next((f.value for f in self.fields if f.name == name), None)

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
        renumber = {old: new for new, old in enumerate(kept)}
        dst.parent.mkdir(parents=True, exist_ok=True)
        size = self.header.data_offset + sum(self.block_bytes[i] for i in kept)
        size += sum(t.n_bytes for t in self.header.tensors if not _BLOCK_RE.match(t.name))
        check_disk_space(dst.parent, int(size * 1.05), dst.name)
        # hidden (library scans skip it), unique, and created with the usual permissions;
        # named by the process, so that one killed mid-write is cleaned up by the next
        stale = re.compile(rf"\.{re.escape(dst.name)}\.(?P<pid>\d+)-[0-9a-f]{{8}}\.part")
        remove_stale(dst.parent, stale)
        tmp = dst.with_name(f".{dst.name}.{os.getpid()}-{secrets.token_hex(4)}.part")
        writer = gguf.GGUFWriter(tmp, self.arch)
        writer.data_alignment = int(self.header.metadata.get("general.alignment", 32))
        try:
            for name, vtype, sub_type, value in self._metadata(skipped, kept):
                writer.add_key_value(name, value, vtype, sub_type=sub_type)
            weights = np.memmap(self.path, dtype=np.uint8, mode="r")
            tensors = []
            for t in self.header.tensors:
                m = _BLOCK_RE.match(t.name)
                name = t.name
                if m:
                    block = int(m.group(1))
                    if block not in renumber:
                        continue
                    name = f"blk.{renumber[block]}.{m.group(2)}"
                # the bytes as they are, shaped as gguf's writer expects them
                # (numpy order, the innermost dimension in bytes)
                start = self.header.data_offset + t.offset
                data = weights[start : start + t.n_bytes].reshape(_byte_shape(t))
                qtype = gguf.GGMLQuantizationType(t.ggml_type)
                writer.add_tensor_info(name, data.shape, data.dtype, data.nbytes, qtype)
                tensors.append(data)
            writer.write_header_to_file()
            writer.write_kv_data_to_file()
            writer.write_ti_data_to_file()
            total = sum(int(d.nbytes) for d in tensors)
            done = 0
            for data in tensors:
                if cancelled(cancel):
                    raise LayerSkipCancelledError(f"cancelled: {dst.name} was not written")
                writer.write_tensor_data(data)
                done += int(data.nbytes)
                if progress:
                    progress("writing the draft", done, total)
            if durable:
                assert writer.fout is not None
                for f in writer.fout:
                    f.flush()
                    os.fsync(f.fileno())
            writer.close()
            check_model_file(tmp)
            os.replace(tmp, dst)
        except BaseException:
            writer.close()
            tmp.unlink(missing_ok=True)
            raise
        return dst

    def _metadata(
        self, skipped: tuple[int, ...], kept: list[int]
    ) -> Iterable[tuple[str, Any, Any, Any]]:
        arch, n = self.arch, self.n_blocks
        vt = gguf.GGUFValueType
        swa_key = f"{arch}.attention.sliding_window_pattern"
        pattern = self._swa_pattern()
        for f in self.fields:
            value = f.value
            if f.name.startswith("gambit.layer_skip.") or f.name == "general.architecture":
                continue  # written below, or by gguf's writer itself
            if f.name == self.block_key:
                value = len(kept)
            elif f.name == f"{arch}.leading_dense_block_count" and isinstance(value, int):
                value = sum(1 for i in kept if i < value)
            elif f.name == f"{arch}.nextn_predict_layers" and isinstance(value, int):
                value = sum(1 for i in kept if i >= n - value)
            elif f.vtype == vt.ARRAY:
                if f.name.startswith(f"{arch}.") and len(value) == n:
                    value = [value[i] for i in kept]  # one entry per block
                if len(value) == 0:
                    log.info("%s: leaving out the empty array %s", self.path.name, f.name)
                    continue  # gguf's writer refuses empty arrays
            elif f.name == swa_key and pattern is not None:
                continue  # a pattern length: written out per layer below
            yield f.name, f.vtype, f.sub_type, value
        if pattern is not None:
            yield swa_key, vt.ARRAY, vt.BOOL, [pattern[i] for i in kept]
        if self.prior is not None:  # compose with the source's own skip set
            original = [i for i in range(self.prior.source_blocks) if i not in self.prior.skipped]
            total = sorted({*self.prior.skipped, *(original[i] for i in skipped)})
            source, blocks = self.prior.source_name, self.prior.source_blocks
        else:
            total, source, blocks = list(skipped), self.path.name, n
        yield KEY_SOURCE, vt.STRING, None, source
        yield KEY_SOURCE_BLOCKS, vt.UINT32, None, blocks
        if total:
            yield KEY_SKIPPED, vt.ARRAY, vt.UINT32, total

    def _swa_pattern(self) -> list[bool] | None:
        """Which layers use the sliding window, when llama.cpp derives it from the
        layer index (it would shift with the renumbering); None otherwise."""
        arch = self.arch
        if arch not in _SWA_PATTERNS:
            return None
        window = self._value(f"{arch}.attention.sliding_window")
        if not isinstance(window, int) or window <= 0:
            return None
        stated = self._value(f"{arch}.attention.sliding_window_pattern")
        if isinstance(stated, list):
            return None  # already per layer: sliced with the other arrays
        n_pattern, dense_first = _SWA_PATTERNS[arch]
        if isinstance(stated, int):
            n_pattern = stated
        if dense_first:  # llama_hparams::set_swa_pattern
            return [n_pattern == 0 or i % n_pattern != 0 for i in range(self.n_blocks)]
        return [n_pattern == 0 or i % n_pattern < n_pattern - 1 for i in range(self.n_blocks)]


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
