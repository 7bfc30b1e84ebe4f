"""Building modified GGUF files for tests (importable: tests/ is on sys.path)."""

from __future__ import annotations

import functools
import struct
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import gguf
import numpy as np

# A SmolLM2 copy whose token 1000 has another text: it loads, but cannot
# draft for SmolLM2 (llama.cpp's rule: token texts must match from id 5 on).
CHANGED_TOKEN = 1000
CHANGED_TEXT = "<|gambit-test|>"


@functools.cache
def reader_of(path: Path) -> gguf.GGUFReader:
    """``path`` parsed, once per file in the session (seconds for SmolLM2's
    49k vocabulary strings); only read from: ``copy_gguf`` edits copies."""
    return gguf.GGUFReader(path, "r")


def copy_gguf(
    reader: gguf.GGUFReader,
    dst: Path,
    edit: Callable[[str, Any], Any] | None = None,
    add_u32: Mapping[str, int] | None = None,
) -> Path:
    """Copy a model field by field and tensor by tensor with gguf's writer (as
    gguf's own gguf_new_metadata.py script does); ``edit(name, value)`` may
    return a changed value for any metadata field, and ``add_u32`` adds
    whole-number fields it does not have."""
    arch = reader.get_field(gguf.Keys.General.ARCHITECTURE).contents()
    writer = gguf.GGUFWriter(dst, arch)
    for fld in reader.fields.values():
        if fld.name == gguf.Keys.General.ARCHITECTURE or fld.name.startswith("GGUF."):
            continue  # written by GGUFWriter itself
        vtype = fld.types[0]
        sub_type = fld.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        value = fld.contents()
        if edit is not None:
            value = edit(fld.name, value)
        writer.add_key_value(fld.name, value, vtype, sub_type=sub_type)
    for name, number in (add_u32 or {}).items():
        writer.add_uint32(name, number)
    for t in reader.tensors:
        writer.add_tensor_info(t.name, t.data.shape, t.data.dtype, t.data.nbytes, t.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for t in reader.tensors:
        writer.write_tensor_data(t.data, tensor_endianess=reader.endianess)
    writer.close()
    return dst


def change_token(name: str, value: Any) -> Any:
    if name == gguf.Keys.Tokenizer.LIST:
        value = list(value)
        assert value[CHANGED_TOKEN] != CHANGED_TEXT
        value[CHANGED_TOKEN] = CHANGED_TEXT
    return value


# ------------------------------------------------- GGUF files written byte by byte
# For headers gguf's writer refuses to produce: wrong value types, impossible
# counts. Each piece is the bytes the GGUF format lays down for it.

U8, U32, F32, BOOL, STRING, ARRAY = (
    gguf.GGUFValueType.UINT8,
    gguf.GGUFValueType.UINT32,
    gguf.GGUFValueType.FLOAT32,
    gguf.GGUFValueType.BOOL,
    gguf.GGUFValueType.STRING,
    gguf.GGUFValueType.ARRAY,
)


def gguf_str(text: str) -> bytes:
    data = text.encode()
    return struct.pack("<Q", len(data)) + data


def kv(key: str, vtype: int, payload: bytes) -> bytes:
    """One metadata field: its key, value type and the value's bytes."""
    return gguf_str(key) + struct.pack("<I", vtype) + payload


def kv_u32(key: str, value: int) -> bytes:
    return kv(key, U32, struct.pack("<I", value))


def kv_text(key: str, value: str) -> bytes:
    return kv(key, STRING, gguf_str(value))


def kv_array(key: str, etype: int, n: int, body: bytes = b"") -> bytes:
    """An array field claiming ``n`` elements of ``etype``, followed by ``body``."""
    return kv(key, ARRAY, struct.pack("<IQ", etype, n) + body)


def tensor_info(name: str, shape: tuple[int, ...], ggml_type: int, offset: int = 0) -> bytes:
    dims = b"".join(struct.pack("<Q", d) for d in shape)
    return (
        gguf_str(name)
        + struct.pack("<I", len(shape))
        + dims
        + struct.pack("<IQ", ggml_type, offset)
    )


# A tiny but complete model header: one F32 tensor of 16 x 4 (256 bytes of data).
BASE_KVS = (
    kv_text("general.architecture", "llama"),
    kv_text("general.name", "byte-built"),
    kv_u32("llama.block_count", 1),
    kv_text("tokenizer.ggml.model", "llama"),
)
BASE_TENSORS = (tensor_info("token_embd.weight", (16, 4), gguf.GGMLQuantizationType.F32),)


def write_raw_gguf(
    path: Path,
    kvs: Sequence[bytes] = BASE_KVS,
    tensors: Sequence[bytes] = BASE_TENSORS,
    data_bytes: int = 256,
) -> Path:
    """A GGUF v3 file of these fields and tensor infos, padded to 32 bytes, then
    ``data_bytes`` of zeros as the tensor data."""
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs)) + b"".join(kvs)
    head += b"".join(tensors)
    head += bytes(-len(head) % 32)
    path.write_bytes(head + bytes(data_bytes))
    return path


def write_small_model(path: Path, n_vocab: int = 1000) -> Path:
    """A small, valid GGUF with an SPM ("llama") tokenizer (gguf's own writer)."""
    writer = gguf.GGUFWriter(path, "llama")
    writer.add_block_count(1)
    writer.add_embedding_length(16)
    writer.add_head_count(2)
    writer.add_tokenizer_model("llama")
    writer.add_token_list([f"<{i}>" for i in range(n_vocab)])
    writer.add_tensor("token_embd.weight", np.zeros((n_vocab, 16), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
