"""GGUF files rewritten block by block: a model with some of its blocks, or more.

A transformer is a stack of ``blk.N.*`` blocks of one layout. Three files are
written from a model by choosing which of its blocks make up the new stack,
in order (a *plan* of source block indices), the rest copied byte for byte:

- a layer-skip draft (``gambit.formats.layerskip_file``): some blocks left out;
- a kernel-probe miniature (``gambit.formats.probe_model``): one block of each
  tensor layout, enough to tell which llama.cpp kernels run and agree;
- a cost-scaled target (``gambit.formats.cost_scaled``): blocks appended whose
  output projections are zero, so they add nothing to the residual stream and
  the logits stay the original's, while every token reads their weights.

``BlockModel.write_plan`` keeps the metadata that counts or lists blocks in step
with the plan (``{arch}.block_count``, per-block arrays, sliding-window
patterns derived from the layer index).
"""

from __future__ import annotations

import os
import re
import secrets
import struct
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gguf
import numpy as np
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

from gambit.errors import GambitError, NotGGUFError, OperationCancelledError
from gambit.formats.gguf_file import GGUFHeader, TensorInfo, check_model_file
from gambit.fsutil import Progress, check_disk_space, remove_stale

BLOCK_RE = re.compile(r"^blk\.(\d+)\.(.+)$")

# Architectures whose sliding-window layers follow a pattern over the layer
# index (llama.cpp's ``load_swa_pattern(n, dense_first)`` in models/*.cpp).
# Renumbering the blocks would shift that pattern, so a rewritten file states
# it per layer (``{arch}.attention.sliding_window_pattern`` as an array of bools).
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
# another stack of blocks would break them.
UNSUPPORTED_ARCHS = frozenset({"gemma3n", "gemma4"})

# Stops a write: an event, or a function saying whether to stop.
Cancel = threading.Event | Callable[[], bool]

# (key, GGUF value type, element type of an array or None, value)
Field = tuple[str, Any, Any, Any]


class BlockLayoutError(GambitError):
    """A model has no stack of blocks to rewrite, or the plan does not fit it."""


def cancelled(cancel: Cancel | None) -> bool:
    if cancel is None:
        return False
    return cancel.is_set() if isinstance(cancel, threading.Event) else bool(cancel())


@dataclass
class _Field:
    name: str
    vtype: Any  # gguf.GGUFValueType
    sub_type: Any
    value: Any
    raw: bytes  # the whole entry as the source stores it: written back where unchanged


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
            start = pos
            name = string().decode("utf-8")
            vtype = vt(take("<I"))
            if vtype != vt.ARRAY:
                value = string() if vtype == vt.STRING else take(_FORMATS[vtype])
                fields.append(_Field(name, vtype, None, value, buf[start:pos]))
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
            fields.append(_Field(name, vtype, etype, items, buf[start:pos]))
    except (struct.error, ValueError, KeyError) as exc:
        raise NotGGUFError(str(path), f"the GGUF header is damaged ({exc})") from exc
    return fields


def _encoded_string(text: str | bytes) -> bytes:
    data = text.encode("utf-8") if isinstance(text, str) else text
    return struct.pack("<Q", len(data)) + data


def _encoded_field(name: str, vtype: Any, sub_type: Any, value: Any) -> bytes:
    """One metadata entry as GGUF stores it (the inverse of ``_read_typed_metadata``)."""
    vt = gguf.GGUFValueType
    head = _encoded_string(name) + struct.pack("<I", vtype)
    if vtype == vt.STRING:
        return head + _encoded_string(value)
    if vtype != vt.ARRAY:
        return head + struct.pack(_FORMATS[vtype], value)
    head += struct.pack("<IQ", sub_type, len(value))
    if sub_type == vt.STRING:
        return head + b"".join(_encoded_string(item) for item in value)
    return head + np.asarray(value, dtype=np.dtype(_FORMATS[sub_type])).tobytes()


def _padding(n: int, alignment: int) -> bytes:
    return bytes(-n % alignment)


def _byte_shape(t: TensorInfo) -> tuple[int, ...]:
    block, type_size = GGML_QUANT_SIZES[GGMLQuantizationType(t.ggml_type)]
    dims = list(reversed(t.shape)) or [1]
    dims[-1] = dims[-1] // block * type_size
    return tuple(dims)


class BlockModel:
    """A GGUF read once, ready to write any number of files of other block
    stacks: the metadata entries the plan does not change and the tensors'
    bytes copied as stored (re-encoding a 49k-token vocabulary through
    ``gguf.GGUFWriter`` took most of a miniature's write). ``error`` is the
    error type its refusals raise."""

    error: type[GambitError] = BlockLayoutError

    def __init__(self, path: Path) -> None:
        self.path = path
        header = check_model_file(path)
        self.header: GGUFHeader = header
        self.arch = header.architecture
        if self.arch in UNSUPPORTED_ARCHS:
            raise self.error(
                f"{path.name}: the {self.arch} architecture ties layers to one another "
                "(shared KV caches, per-layer inputs), so its blocks cannot be restacked"
            )
        self.block_key = f"{self.arch}.block_count"
        n_blocks = header.metadata.get(self.block_key)
        if not isinstance(n_blocks, int) or n_blocks < 1:
            raise self.error(
                f"{path.name}: no {self.block_key} in its metadata: the {self.arch} "
                "architecture has no blk.N layout of repeated blocks"
            )
        self.n_blocks = n_blocks
        indices: set[int] = set()
        sizes: dict[int, int] = {}
        for info in header.tensors:
            if m := BLOCK_RE.match(info.name):
                block = int(m.group(1))
                indices.add(block)
                sizes[block] = sizes.get(block, 0) + info.n_bytes
        if not indices:
            raise self.error(
                f"{path.name}: no blk.N tensors: the {self.arch} architecture has no "
                "blk.N layout of repeated blocks"
            )
        if max(indices) >= n_blocks:
            raise self.error(
                f"{path.name}: tensor blk.{max(indices)}.* is past {self.block_key} = {n_blocks}"
            )
        self._fields: list[_Field] | None = None
        self.block_bytes = [sizes.get(i, 0) for i in range(n_blocks)]
        self.other_bytes = sum(t.n_bytes for t in header.tensors if not BLOCK_RE.match(t.name))

    @property
    def fields(self) -> list[_Field]:
        """The metadata with its value types, read on first use."""
        if self._fields is None:
            self._fields = _read_typed_metadata(self.path, self.header.data_offset)
        return self._fields

    def value(self, name: str) -> Any:
        return next((f.value for f in self.fields if f.name == name), None)

    def block_layouts(self) -> dict[int, tuple[tuple[str, int, tuple[int, ...]], ...]]:
        """Each block's tensor layout: (name within the block, weight type, shape)."""
        layouts: dict[int, list[tuple[str, int, tuple[int, ...]]]] = {}
        for t in self.header.tensors:
            if m := BLOCK_RE.match(t.name):
                layouts.setdefault(int(m.group(1)), []).append((m.group(2), t.ggml_type, t.shape))
        return {i: tuple(sorted(v)) for i, v in layouts.items()}

    def write_plan(
        self,
        dst: Path,
        plan: Sequence[int],
        *,
        zeroed: Callable[[int, str], bool] | None = None,
        extra: Iterable[Field] = (),
        drop_prefix: str | None = None,
        progress: Progress | None = None,
        cancel: Cancel | None = None,
        durable: bool = True,
        stage: str = "writing the model",
        cancelled_error: type[OperationCancelledError] = OperationCancelledError,
    ) -> Path:
        """Write the model whose block j is the source's block ``plan[j]``.

        ``zeroed(j, name)``: whether tensor ``name`` (within block j, e.g.
        "ffn_down.weight") is written as zeros instead of its bytes; ``extra``:
        metadata fields added at the end; ``drop_prefix``: source keys left
        out (written anew in ``extra``). Atomic: a temporary file in ``dst``'s
        folder, renamed at the end; on any error or cancellation no file is left.
        """
        if not plan:
            raise self.error(f"no block of {self.path.name} would be kept: at least one must be")
        if any(not 0 <= i < self.n_blocks for i in plan):
            raise self.error(f"a block index is out of range: {self.path.name} has {self.n_blocks}")
        dst.parent.mkdir(parents=True, exist_ok=True)
        size = self.header.data_offset + sum(self.block_bytes[i] for i in plan) + self.other_bytes
        check_disk_space(dst.parent, int(size * 1.05), dst.name)
        # hidden (library scans skip it), unique, and created with the usual permissions;
        # named by the process, so that one killed mid-write is cleaned up by the next
        stale = re.compile(rf"\.{re.escape(dst.name)}\.(?P<pid>\d+)-[0-9a-f]{{8}}\.part")
        remove_stale(dst.parent, stale)
        tmp = dst.with_name(f".{dst.name}.{os.getpid()}-{secrets.token_hex(4)}.part")
        alignment = int(self.header.metadata.get("general.alignment", 32))
        try:
            with tmp.open("xb") as f:
                entries = [*self._metadata(plan, drop_prefix), *(_encoded_field(*e) for e in extra)]
                tensors = self._tensors(plan, zeroed)
                infos, offset = [], 0
                for name, data, t in tensors:
                    dims = len(t.shape)
                    layout = struct.pack(f"<I{dims}QIQ", dims, *t.shape, t.ggml_type, offset)
                    infos.append(_encoded_string(name) + layout)
                    offset += data.nbytes + -data.nbytes % alignment
                f.write(struct.pack("<4sIQQ", b"GGUF", 3, len(tensors), len(entries)))
                f.write(b"".join(entries) + b"".join(infos))
                f.write(_padding(f.tell(), alignment))
                total, done = sum(int(d.nbytes) for _, d, _ in tensors), 0
                for _, data, _ in tensors:
                    if cancelled(cancel):
                        raise cancelled_error(f"cancelled: {dst.name} was not written")
                    data.tofile(f)
                    f.write(_padding(data.nbytes, alignment))
                    done += int(data.nbytes)
                    if progress:
                        progress(stage, done, total)
                if durable:
                    f.flush()
                    os.fsync(f.fileno())
            check_model_file(tmp)
            os.replace(tmp, dst)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        return dst

    def _tensors(
        self, plan: Sequence[int], zeroed: Callable[[int, str], bool] | None
    ) -> list[tuple[str, np.ndarray, TensorInfo]]:
        """(name, bytes, the source tensor: its shape and weight type) in the
        order to write them: the source's order, each block's tensors where its
        plan places them."""
        weights = np.memmap(self.path, dtype=np.uint8, mode="r")
        by_block: dict[int, list[TensorInfo]] = {}
        others: list[tuple[int, TensorInfo]] = []
        first_block_at = None
        for pos, t in enumerate(self.header.tensors):
            if m := BLOCK_RE.match(t.name):
                by_block.setdefault(int(m.group(1)), []).append(t)
                first_block_at = pos if first_block_at is None else first_block_at
            else:
                others.append((pos, t))
        before = [t for pos, t in others if first_block_at is None or pos < first_block_at]
        after = [t for pos, t in others if first_block_at is not None and pos > first_block_at]
        out: list[tuple[str, np.ndarray, TensorInfo]] = []

        def add(name: str, t: TensorInfo, zero: bool) -> None:
            shape = _byte_shape(t)
            if zero:
                # All-zero bytes are 0.0 in every ggml weight type (a block's
                # scales are zero too).
                data: np.ndarray = np.zeros(shape, dtype=np.uint8)
            else:
                start = self.header.data_offset + t.offset
                data = weights[start : start + t.n_bytes].reshape(shape)
            out.append((name, data, t))

        for t in before:
            add(t.name, t, False)
        for j, source in enumerate(plan):
            for t in by_block.get(source, ()):
                m = BLOCK_RE.match(t.name)
                assert m is not None
                inner = m.group(2)
                add(f"blk.{j}.{inner}", t, bool(zeroed and zeroed(j, inner)))
        for t in after:
            add(t.name, t, False)
        return out

    def _metadata(self, plan: Sequence[int], drop_prefix: str | None) -> Iterator[bytes]:
        """The metadata entries of the file ``plan`` makes, encoded: the
        source's bytes where the plan changes nothing."""
        arch, n = self.arch, self.n_blocks
        vt = gguf.GGUFValueType
        swa_key = f"{arch}.attention.sliding_window_pattern"
        pattern = self._swa_pattern()
        for f in self.fields:
            value = f.value
            if drop_prefix and f.name.startswith(drop_prefix):
                continue
            if f.name == self.block_key:
                value = len(plan)
            elif f.name == f"{arch}.leading_dense_block_count" and isinstance(value, int):
                value = sum(1 for i in plan if i < value)
            elif f.name == f"{arch}.nextn_predict_layers" and isinstance(value, int):
                value = sum(1 for i in plan if i >= n - value)
            elif f.vtype == vt.ARRAY:
                if f.name.startswith(f"{arch}.") and len(value) == n:
                    value = [value[i] for i in plan]  # one entry per block
            elif f.name == swa_key and pattern is not None:
                continue  # a pattern length: written out per layer below
            yield f.raw if value is f.value else _encoded_field(f.name, f.vtype, f.sub_type, value)
        if pattern is not None:
            yield _encoded_field(swa_key, vt.ARRAY, vt.BOOL, [pattern[i] for i in plan])

    def _swa_pattern(self) -> list[bool] | None:
        """Which layers use the sliding window, when llama.cpp derives it from the
        layer index (it would shift with the renumbering); None otherwise."""
        arch = self.arch
        if arch not in _SWA_PATTERNS:
            return None
        window = self.value(f"{arch}.attention.sliding_window")
        if not isinstance(window, int) or window <= 0:
            return None
        stated = self.value(f"{arch}.attention.sliding_window_pattern")
        if isinstance(stated, list):
            return None  # already per layer: sliced with the other arrays
        n_pattern, dense_first = _SWA_PATTERNS[arch]
        if isinstance(stated, int):
            n_pattern = stated
        if dense_first:  # llama_hparams::set_swa_pattern
            return [n_pattern == 0 or i % n_pattern != 0 for i in range(self.n_blocks)]
        return [n_pattern == 0 or i % n_pattern < n_pattern - 1 for i in range(self.n_blocks)]
