"""Read a GGUF header and check a model file before llama.cpp sees it.

llama.cpp answers an empty, foreign or cut-short file with a NULL model and a
line in its log; reading the header ourselves tells the user which it is.

Why a reader of our own: ``gguf.GGUFReader`` builds a numpy view for every
element of every array (SmolLM2's 49k tokens and 49k merges) and takes ~2 s;
this one skips arrays it is not asked for and reads a header in milliseconds.
The type tables still come from the ``gguf`` package.
"""

from __future__ import annotations

import hashlib
import os
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFValueType

from gambit.errors import (
    EmptyModelFileError,
    ModelNotFoundError,
    NotAFileError,
    NotGGUFError,
    TruncatedModelError,
)

GGUF_MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32

_SCALARS: dict[int, str] = {
    GGUFValueType.UINT8: "<B",
    GGUFValueType.INT8: "<b",
    GGUFValueType.UINT16: "<H",
    GGUFValueType.INT16: "<h",
    GGUFValueType.UINT32: "<I",
    GGUFValueType.INT32: "<i",
    GGUFValueType.FLOAT32: "<f",
    GGUFValueType.BOOL: "<?",
    GGUFValueType.UINT64: "<Q",
    GGUFValueType.INT64: "<q",
    GGUFValueType.FLOAT64: "<d",
}


@dataclass(frozen=True)
class TensorInfo:
    name: str
    shape: tuple[int, ...]
    ggml_type: int
    offset: int  # relative to the data section

    @property
    def n_bytes(self) -> int:
        block, type_size = GGML_QUANT_SIZES[GGMLQuantizationType(self.ggml_type)]
        n = 1
        for d in self.shape:
            n *= d
        return n // block * type_size


@dataclass
class GGUFHeader:
    path: Path
    version: int
    metadata: dict[str, Any] = field(default_factory=dict)
    # Arrays not asked for are summarised as ("array", element type, length).
    tensors: list[TensorInfo] = field(default_factory=list)
    data_offset: int = 0
    tokenizer_digest: str = ""

    @property
    def data_end(self) -> int:
        return max((self.data_offset + t.offset + t.n_bytes for t in self.tensors), default=0)

    @property
    def architecture(self) -> str:
        return str(self.metadata.get("general.architecture", "unknown"))

    @property
    def chat_template(self) -> str | None:
        value = self.metadata.get("tokenizer.chat_template")
        return value if isinstance(value, str) else None


class _Reader:
    def __init__(self, f: BinaryIO, path: Path) -> None:
        self.f = f
        self.path = path

    def read(self, n: int) -> bytes:
        data = self.f.read(n)
        if len(data) != n:
            size = self.path.stat().st_size
            raise TruncatedModelError(
                str(self.path),
                f"the model file is truncated: it ends at {size:,} bytes, inside its "
                "GGUF header (was the download interrupted?)",
            )
        return data

    def unpack(self, fmt: str) -> Any:
        return struct.unpack(fmt, self.read(struct.calcsize(fmt)))[0]

    def string(self) -> bytes:
        n = self.unpack("<Q")
        if n > 1 << 30:
            raise TruncatedModelError(str(self.path), "the GGUF header is damaged")
        return self.read(n)

    def value(self, vtype: int, keep: bool, digest: Any | None) -> Any:
        if vtype == GGUFValueType.STRING:
            return self.string().decode("utf-8", "replace")
        if vtype == GGUFValueType.ARRAY:
            etype = self.unpack("<I")
            n = self.unpack("<Q")
            if etype == GGUFValueType.STRING:
                items = []
                for _ in range(n):
                    s = self.string()
                    if digest is not None:
                        digest.update(len(s).to_bytes(4, "little") + s)
                    if keep:
                        items.append(s.decode("utf-8", "replace"))
                return items if keep else ("array", etype, n)
            fmt = _SCALARS.get(etype)
            if fmt is None:
                raise TruncatedModelError(str(self.path), "the GGUF header is damaged")
            size = struct.calcsize(fmt)
            raw = self.read(size * n)
            if digest is not None:
                digest.update(raw)
            if keep:
                return list(struct.unpack(f"<{n}{fmt[1]}", raw))
            return ("array", etype, n)
        fmt = _SCALARS.get(vtype)
        if fmt is None:
            raise TruncatedModelError(str(self.path), "the GGUF header is damaged")
        return self.unpack(fmt)


# Parts of the tokenizer that decide which text a token id stands for.
_TOKENIZER_KEYS = ("tokenizer.ggml.model", "tokenizer.ggml.pre", "tokenizer.ggml.tokens")


def read_header(path: str | os.PathLike[str], keep_arrays: tuple[str, ...] = ()) -> GGUFHeader:
    """Parse the GGUF header of ``path`` (after ``check_basic_file``)."""
    p = Path(path)
    with p.open("rb") as f:
        r = _Reader(f, p)
        magic = r.read(4)
        if magic != GGUF_MAGIC:
            raise NotGGUFError(str(p), "not a GGUF model file")
        version = r.unpack("<I")
        if version not in (2, 3):
            raise NotGGUFError(str(p), f"unsupported GGUF version {version}")
        n_tensors = r.unpack("<Q")
        n_kv = r.unpack("<Q")
        if n_tensors > 1 << 24 or n_kv > 1 << 24:
            raise TruncatedModelError(str(p), "the GGUF header is damaged")
        header = GGUFHeader(path=p, version=version)
        digest = hashlib.sha256()
        for _ in range(n_kv):
            key = r.string().decode("utf-8", "replace")
            vtype = r.unpack("<I")
            tok = key in _TOKENIZER_KEYS
            value = r.value(vtype, key in keep_arrays, digest if tok else None)
            if tok and isinstance(value, str):
                digest.update(value.encode())
            header.metadata[key] = value
        for _ in range(n_tensors):
            name = r.string().decode("utf-8", "replace")
            n_dims = r.unpack("<I")
            shape = tuple(r.unpack("<Q") for _ in range(n_dims))
            ggml_type = r.unpack("<I")
            offset = r.unpack("<Q")
            header.tensors.append(TensorInfo(name, shape, ggml_type, offset))
        align = int(header.metadata.get("general.alignment", DEFAULT_ALIGNMENT))
        pos = f.tell()
        header.data_offset = (pos + align - 1) // align * align
        header.tokenizer_digest = digest.hexdigest()[:16]
    return header


def check_model_file(path: str | os.PathLike[str]) -> GGUFHeader:
    """Raise a specific ``ModelFileError`` unless ``path`` is a complete GGUF file."""
    p = Path(path)
    name = str(p)
    if not p.exists():
        raise ModelNotFoundError(name, "model file not found")
    if p.is_dir():
        raise NotAFileError(name, "this is a folder, not a model file")
    if not p.is_file():
        raise NotAFileError(name, "this is not a regular file")
    size = p.stat().st_size
    if size == 0:
        raise EmptyModelFileError(name, "the model file is empty (0 bytes)")
    try:
        with p.open("rb") as f:
            head = f.read(4)
    except OSError as exc:
        reason = "permission denied" if isinstance(exc, PermissionError) else exc.strerror
        raise NotAFileError(name, f"the model file cannot be read ({reason})") from exc
    if head != GGUF_MAGIC:
        raise NotGGUFError(
            name, "not a GGUF model file (llama.cpp needs .gguf; convert other formats first)"
        )
    try:
        header = read_header(p)
    except (ValueError, KeyError, struct.error) as exc:
        raise TruncatedModelError(name, f"the GGUF header is damaged ({exc})") from exc
    end = header.data_end
    if end > size:
        raise TruncatedModelError(
            name,
            f"the model file is truncated: {size:,} bytes on disk, {end:,} expected "
            f"({end - size:,} missing; was the download interrupted?)",
        )
    return header
