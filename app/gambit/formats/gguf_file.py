"""Read a GGUF header and check a model file before llama.cpp sees it.

llama.cpp answers an empty, foreign or cut-short file with a NULL model and a
line in its log; reading the header ourselves tells the user which it is.

Why a reader of our own: ``gguf.GGUFReader`` builds a numpy view for every
element of every array (SmolLM2's 49k tokens and 49k merges) and takes ~2 s;
this one skips arrays it is not asked for and reads a header in milliseconds.
The type tables still come from the ``gguf`` package.
"""

from __future__ import annotations

import contextlib
import hashlib
import mmap
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFValueType

from gambit.errors import (
    DamagedModelError,
    EmptyModelFileError,
    ModelNotFoundError,
    NotAFileError,
    NotGGUFError,
    TruncatedModelError,
)

GGUF_MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32
GGML_MAX_DIMS = 4  # llama.cpp refuses tensors of more dimensions
_INT64_MAX = (1 << 63) - 1
# Sanity bounds, far above any real header (SmolLM2's largest list: 49k texts).
_MAX_STRING = 1 << 30
_MAX_ARRAY = 1 << 31

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


_U64 = struct.Struct("<Q")


class _Reader:
    """Reads the header from a memory map of the file, checking every count
    against the file before using it: a damaged count must cost an error
    message, not memory or a hang."""

    def __init__(self, buf: bytes | mmap.mmap, path: Path, size: int) -> None:
        self.buf = buf
        self.path = path
        self.size = size
        self.pos = 0

    def damaged(self, what: str) -> DamagedModelError:
        return DamagedModelError(str(self.path), f"the GGUF header is damaged: {what}")

    def truncated(self) -> TruncatedModelError:
        return TruncatedModelError(
            str(self.path),
            f"the model file is truncated: it ends at {self.size:,} bytes, inside its "
            "GGUF header (was the download interrupted?)",
        )

    def read(self, n: int) -> bytes:
        if n > self.size - self.pos:
            raise self.truncated()
        data = self.buf[self.pos : self.pos + n]
        self.pos += n
        return data

    def unpack(self, fmt: str) -> Any:
        n = struct.calcsize(fmt)
        if n > self.size - self.pos:
            raise self.truncated()
        value = struct.unpack_from(fmt, self.buf, self.pos)[0]
        self.pos += n
        return value

    def string(self) -> bytes:
        n = self.unpack("<Q")
        if n > _MAX_STRING:
            raise self.damaged(f"a text claims to be {n:,} bytes long")
        return self.read(n)

    def scalar(self, key: str, vtype: int) -> Any:
        if vtype == GGUFValueType.STRING:
            return self.string().decode("utf-8", "replace")
        fmt = _SCALARS.get(vtype)
        if fmt is None:
            raise self.damaged(f"{key} has an unknown value type {vtype}")
        return self.unpack(fmt)

    def array(self, key: str, etype: int, keep: bool, digest: Any | None) -> Any:
        n = self.unpack("<Q")
        if n > _MAX_ARRAY:
            raise self.damaged(f"the list {key} claims {n:,} elements")
        start = self.pos
        if etype == GGUFValueType.STRING:
            items = self._strings(n, keep)
        else:
            fmt = _SCALARS.get(etype)
            if fmt is None:
                raise self.damaged(f"the list {key} has elements of an unknown type {etype}")
            raw = self.read(struct.calcsize(fmt) * n)
            items = list(struct.unpack(f"<{n}{fmt[1]}", raw)) if keep else []
        if digest is not None:  # the array's bytes as stored: lengths and texts
            digest.update(self.buf[start : self.pos])
        return items if keep else ("array", etype, n)

    def _strings(self, n: int, keep: bool) -> list[str]:
        """``n`` texts, decoded where ``keep``; otherwise only stepped over
        (a vocabulary of 49k-262k texts: one tight loop, not a read each)."""
        buf, pos, size = self.buf, self.pos, self.size
        items: list[str] = []
        for _ in range(n):
            if pos + 8 > size:
                raise self.truncated()
            length = _U64.unpack_from(buf, pos)[0]
            if length > _MAX_STRING:
                raise self.damaged(f"a text claims to be {length:,} bytes long")
            end = pos + 8 + length
            if end > size:
                raise self.truncated()
            if keep:
                items.append(buf[pos + 8 : end].decode("utf-8", "replace"))
            pos = end
        self.pos = pos
        return items

    def tensor(self, seen: set[str]) -> TensorInfo:
        name = self.string().decode("utf-8", "replace")
        if name in seen:
            raise self.damaged(f"the tensor {name} is listed twice")
        n_dims = self.unpack("<I")
        if n_dims > GGML_MAX_DIMS:
            raise self.damaged(f"the tensor {name} has {n_dims:,} dimensions (at most 4)")
        shape = tuple(self.unpack("<Q") for _ in range(n_dims))
        ggml_type = self.unpack("<I")
        offset = self.unpack("<Q")
        try:
            block, _ = GGML_QUANT_SIZES[GGMLQuantizationType(ggml_type)]
        except (ValueError, KeyError):
            raise self.damaged(
                f"the tensor {name} has the unknown weight type {ggml_type} "
                "(a newer version of llama.cpp may know it)"
            ) from None
        n = 1
        for d in shape:
            n *= d
        if n > _INT64_MAX:
            raise self.damaged(f"the tensor {name} claims {n:,} elements")
        if shape and shape[0] % block:
            raise self.damaged(
                f"the tensor {name} has rows of {shape[0]:,} values, not a whole number "
                f"of {GGMLQuantizationType(ggml_type).name} blocks of {block}"
            )
        return TensorInfo(name, shape, ggml_type, offset)


@dataclass(frozen=True)
class _Expected:
    what: str  # for the message: "text", "a whole number", ...
    types: frozenset[int]
    elements: frozenset[int] = frozenset()  # of an ARRAY


_INTEGERS = frozenset(
    {
        GGUFValueType.UINT8,
        GGUFValueType.INT8,
        GGUFValueType.UINT16,
        GGUFValueType.INT16,
        GGUFValueType.UINT32,
        GGUFValueType.INT32,
        GGUFValueType.UINT64,
        GGUFValueType.INT64,
    }
)
_TEXT = _Expected("text", frozenset({GGUFValueType.STRING}))
_INTEGER = _Expected("a whole number", _INTEGERS)
_FLAG = _Expected("true or false", frozenset({GGUFValueType.BOOL}))
_TEXTS = _Expected(
    "a list of texts", frozenset({GGUFValueType.ARRAY}), frozenset({GGUFValueType.STRING})
)
_PER_BLOCK = _Expected(
    "a whole number (or one per block)", _INTEGERS | {GGUFValueType.ARRAY}, _INTEGERS
)
# The keys Gambit reads and the value types llama.cpp accepts for them: with
# another type llama.cpp refuses the file ("wrong type"), or for the alignment
# aborts the process, and Gambit's own reading would go wrong.
_KEY_TYPES: dict[str, _Expected] = {
    "general.alignment": _Expected("a uint32", frozenset({GGUFValueType.UINT32})),
    "general.architecture": _TEXT,
    "general.name": _TEXT,
    "general.file_type": _INTEGER,
    "tokenizer.ggml.model": _TEXT,
    "tokenizer.ggml.pre": _TEXT,
    "tokenizer.chat_template": _TEXT,
    "tokenizer.ggml.tokens": _TEXTS,
    "tokenizer.ggml.merges": _TEXTS,
    "tokenizer.ggml.bos_token_id": _INTEGER,
    "tokenizer.ggml.eos_token_id": _INTEGER,
    "tokenizer.ggml.add_bos_token": _FLAG,
    "tokenizer.ggml.add_eos_token": _FLAG,
}
# ... and "{architecture}.<one of these>"
_ARCH_KEY_TYPES: dict[str, _Expected] = {
    "vocab_size": _INTEGER,
    **dict.fromkeys(
        (
            "context_length",
            "block_count",
            "embedding_length",
            "feed_forward_length",
            "attention.head_count",
            "attention.head_count_kv",
            "attention.key_length",
            "attention.value_length",
        ),
        _PER_BLOCK,
    ),
}


def _type_name(vtype: int, etype: int | None) -> str:
    def name(t: int) -> str:
        try:
            return GGUFValueType(t).name.lower()
        except ValueError:
            return f"type {t}"

    return f"a list of {name(etype)}" if etype is not None else name(vtype)


def _check_types(r: _Reader, header: GGUFHeader, types: dict[str, tuple[int, int | None]]) -> None:
    arch = header.metadata.get("general.architecture")
    expected = dict(_KEY_TYPES)
    if isinstance(arch, str):
        expected.update({f"{arch}.{k}": v for k, v in _ARCH_KEY_TYPES.items()})
    for key, (vtype, etype) in types.items():
        want = expected.get(key)
        if want is None:
            continue
        if vtype not in want.types or (etype is not None and etype not in want.elements):
            raise r.damaged(f"{key} should be {want.what}, not {_type_name(vtype, etype)}")
    align = header.metadata.get("general.alignment", DEFAULT_ALIGNMENT)
    if align <= 0 or align & (align - 1):
        raise r.damaged(f"general.alignment is {align:,}, not a power of 2")


# Parts of the tokenizer that decide which text a token id stands for.
_TOKENIZER_KEYS = ("tokenizer.ggml.model", "tokenizer.ggml.pre", "tokenizer.ggml.tokens")


@contextlib.contextmanager
def _mapped(f: BinaryIO) -> Iterator[bytes | mmap.mmap]:
    """The file's bytes, mapped rather than read (a header is read once,
    the weights after it never); an empty file is b"" (it cannot be mapped)."""
    if os.fstat(f.fileno()).st_size == 0:
        yield b""
        return
    with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        yield mm


def read_header(path: str | os.PathLike[str], keep_arrays: tuple[str, ...] = ()) -> GGUFHeader:
    """Parse the GGUF header of ``path`` (after ``check_basic_file``).

    Raises ``TruncatedModelError`` when the file ends inside the header and
    ``DamagedModelError`` for what llama.cpp would refuse in a complete one.
    """
    p = Path(path)
    with p.open("rb") as f, _mapped(f) as buf:
        r = _Reader(buf, p, len(buf))
        magic = r.read(4)
        if magic != GGUF_MAGIC:
            raise NotGGUFError(str(p), "not a GGUF model file")
        version = r.unpack("<I")
        if version not in (2, 3):
            raise NotGGUFError(str(p), f"unsupported GGUF version {version}")
        n_tensors = r.unpack("<Q")
        n_kv = r.unpack("<Q")
        if n_tensors > 1 << 24 or n_kv > 1 << 24:
            raise r.damaged(f"it claims {n_tensors:,} tensors and {n_kv:,} metadata keys")
        header = GGUFHeader(path=p, version=version)
        types: dict[str, tuple[int, int | None]] = {}
        digest = hashlib.sha256()
        for _ in range(n_kv):
            key = r.string().decode("utf-8", "replace")
            if key in types:
                raise r.damaged(f"the key {key} is listed twice")
            vtype = r.unpack("<I")
            tok = key in _TOKENIZER_KEYS
            if vtype == GGUFValueType.ARRAY:
                etype = r.unpack("<I")
                value = r.array(key, etype, key in keep_arrays, digest if tok else None)
                types[key] = (vtype, etype)
            else:
                value = r.scalar(key, vtype)
                types[key] = (vtype, None)
            if tok and isinstance(value, str):
                digest.update(value.encode())
            header.metadata[key] = value
        _check_types(r, header, types)
        seen: set[str] = set()
        for _ in range(n_tensors):
            tensor = r.tensor(seen)
            seen.add(tensor.name)
            header.tensors.append(tensor)
        align = int(header.metadata.get("general.alignment", DEFAULT_ALIGNMENT))
        pos = r.pos
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
            head = f.read(_SNIFF_BYTES)
    except OSError as exc:
        reason = "permission denied" if isinstance(exc, PermissionError) else exc.strerror
        raise NotAFileError(name, f"the model file cannot be read ({reason})") from exc
    if head[:4] != GGUF_MAGIC:
        raise NotGGUFError(name, _not_gguf(p, head))
    try:
        header = read_header(p)
    except (ValueError, KeyError, OverflowError, struct.error) as exc:  # what read_header missed
        raise DamagedModelError(name, f"the GGUF header is damaged ({exc})") from exc
    end = header.data_end
    if end > size:
        raise TruncatedModelError(
            name,
            f"the model file is truncated: {size:,} bytes on disk, {end:,} expected "
            f"({end - size:,} missing; was the download interrupted?)",
        )
    return header


_SNIFF_BYTES = 512  # enough to tell text, a web page or an archive from a model


def _not_gguf(path: Path, head: bytes) -> str:
    """Why a file without the GGUF signature is not a model, from what it holds.

    A file already named .gguf is not told to be converted to .gguf: it is
    told what its content looks like instead."""
    if path.suffix.lower() != ".gguf":
        return "not a GGUF model file (llama.cpp needs .gguf; convert other formats first)"
    return f"not a GGUF model file: it is named .gguf, but {_content(head)}"


def _content(head: bytes) -> str:
    if head.startswith(b"PK\x03\x04"):
        return "it is a zip archive (a PyTorch checkpoint?); convert the model to GGUF first"
    if head.startswith(b"version https://git-lfs"):
        return "it is a Git LFS pointer, not the weights: fetch the real file (git lfs pull)"
    text = _as_text(head)
    if text and all(c.isprintable() or c in "\t\r\n" for c in text):
        if text.lstrip().lower().startswith(("<!doctype html", "<html")):
            return "it holds a web page, not a model (a download saved the page instead)"
        first = " ".join(text.split())[:40]
        return f"it holds text (“{first}…”), not a model"
    return (
        f"it does not start with the GGUF signature (its first bytes are {head[:4].hex(' ')}):"
        " the file is damaged, or another format renamed"
    )


def _as_text(head: bytes) -> str:
    """``head`` as UTF-8 text (it may end inside a character); "" if it is not text."""
    for cut in range(4):
        try:
            return head[: len(head) - cut].decode("utf-8")
        except UnicodeDecodeError:
            continue
    return ""
