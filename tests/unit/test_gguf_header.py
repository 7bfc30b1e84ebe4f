"""Damaged GGUF headers, written byte by byte: each is refused with one line
that says what is wrong, never a Python exception or a crash in llama.cpp.

Each file is complete (its data section is all there), so what is wrong is
what its header says: the reader must check counts against the file before
allocating, and value types before using them.
"""

from __future__ import annotations

import struct
import time
from pathlib import Path

import pytest

from gambit.engine.machine.runtime import ModelRuntime
from gambit.errors import DamagedModelError, ModelFileError, TruncatedModelError
from gambit.formats.gguf_file import check_model_file
from gambit.formats.gguf_info import inspect_model
from gguf_fixtures import (
    ARRAY,
    BASE_KVS,
    BASE_TENSORS,
    BOOL,
    F32,
    STRING,
    U8,
    U32,
    gguf_str,
    kv,
    kv_array,
    kv_text,
    kv_u32,
    tensor_info,
    write_raw_gguf,
)


def _runtime(path: Path) -> None:
    ModelRuntime(path).close()


LOADERS = {
    "check_model_file": check_model_file,
    "inspect_model": inspect_model,
    "runtime": _runtime,
}

# name -> (fields, tensor infos, what the message must say)
DAMAGED: dict[str, tuple[tuple[bytes, ...], tuple[bytes, ...], str]] = {
    "alignment-0": (
        (*BASE_KVS, kv_u32("general.alignment", 0)),
        BASE_TENSORS,
        "general.alignment is 0, not a power of 2",
    ),
    "alignment-48": (
        (*BASE_KVS, kv_u32("general.alignment", 48)),
        BASE_TENSORS,
        "general.alignment is 48, not a power of 2",
    ),
    "alignment-text": (
        (*BASE_KVS, kv_text("general.alignment", "32")),
        BASE_TENSORS,
        "general.alignment should be a uint32, not string",
    ),
    "alignment-float": (
        (*BASE_KVS, kv("general.alignment", F32, struct.pack("<f", 32.0))),
        BASE_TENSORS,
        "general.alignment should be a uint32, not float32",
    ),
    "alignment-list": (
        (*BASE_KVS, kv_array("general.alignment", U32, 1, struct.pack("<I", 32))),
        BASE_TENSORS,
        "general.alignment should be a uint32, not a list of uint32",
    ),
    "array-2^61": (
        (*BASE_KVS, kv_array("tokenizer.ggml.scores", F32, 1 << 61)),
        BASE_TENSORS,
        "the list tokenizer.ggml.scores claims 2,305,843,009,213,693,952 elements",
    ),
    "array-2^62-texts": (
        (*BASE_KVS, kv_array("tokenizer.ggml.tokens", STRING, 1 << 62)),
        BASE_TENSORS,
        "the list tokenizer.ggml.tokens claims 4,611,686,018,427,387,904 elements",
    ),
    "text-2^62": (
        (*BASE_KVS, kv("general.license", STRING, struct.pack("<Q", 1 << 62))),
        BASE_TENSORS,
        "a text claims to be 4,611,686,018,427,387,904 bytes long",
    ),
    "nested-array": (
        (*BASE_KVS, kv_array("general.tags", ARRAY, 1, struct.pack("<IQ", U8, 0))),
        BASE_TENSORS,
        "the list general.tags has elements of an unknown type 9",
    ),
    "unknown-value-type": (
        (*BASE_KVS, kv("general.mystery", 99, b"")),
        BASE_TENSORS,
        "general.mystery has an unknown value type 99",
    ),
    "unknown-tensor-type": (
        BASE_KVS,
        (tensor_info("token_embd.weight", (16, 4), 99),),
        "the tensor token_embd.weight has the unknown weight type 99 (a newer version of "
        "llama.cpp may know it)",
    ),
    "five-dimensions": (
        BASE_KVS,
        (tensor_info("token_embd.weight", (4, 2, 2, 2, 2), 0),),
        "the tensor token_embd.weight has 5 dimensions (at most 4)",
    ),
    "rows-not-whole-blocks": (
        BASE_KVS,
        (tensor_info("token_embd.weight", (20, 4), 2),),  # Q4_0 blocks hold 32 values
        "the tensor token_embd.weight has rows of 20 values, not a whole number of Q4_0 "
        "blocks of 32",
    ),
    "tensor-2^64-elements": (
        BASE_KVS,
        (tensor_info("token_embd.weight", (1 << 32, 1 << 32), 0),),
        "the tensor token_embd.weight claims 18,446,744,073,709,551,616 elements",
    ),
    "tensor-twice": (
        BASE_KVS,
        (*BASE_TENSORS, *BASE_TENSORS),
        "the tensor token_embd.weight is listed twice",
    ),
    "key-twice": (
        (*BASE_KVS, kv_u32("llama.block_count", 2)),
        BASE_TENSORS,
        "the key llama.block_count is listed twice",
    ),
    "block-count-text": (
        (*BASE_KVS[:2], kv_text("llama.block_count", "twelve"), *BASE_KVS[3:]),
        BASE_TENSORS,
        "llama.block_count should be a whole number (or one per block), not string",
    ),
    "context-length-float": (
        (*BASE_KVS, kv("llama.context_length", F32, struct.pack("<f", 2048.0))),
        BASE_TENSORS,
        "llama.context_length should be a whole number (or one per block), not float32",
    ),
    "bos-id-text": (
        (*BASE_KVS, kv_text("tokenizer.ggml.bos_token_id", "1")),
        BASE_TENSORS,
        "tokenizer.ggml.bos_token_id should be a whole number, not string",
    ),
    "add-bos-text": (
        (*BASE_KVS, kv_text("tokenizer.ggml.add_bos_token", "false")),
        BASE_TENSORS,
        "tokenizer.ggml.add_bos_token should be true or false, not string",
    ),
    "architecture-number": (
        (kv_u32("general.architecture", 7), *BASE_KVS[1:]),
        BASE_TENSORS,
        "general.architecture should be text, not uint32",
    ),
    "tokens-of-numbers": (
        (*BASE_KVS, kv_array("tokenizer.ggml.tokens", U32, 2, bytes(8))),
        BASE_TENSORS,
        "tokenizer.ggml.tokens should be a list of texts, not a list of uint32",
    ),
    "head-count-list-of-bools": (
        (*BASE_KVS, kv_array("llama.attention.head_count", BOOL, 1, b"\x01")),
        BASE_TENSORS,
        "llama.attention.head_count should be a whole number (or one per block), "
        "not a list of bool",
    ),
}


def test_the_base_file_is_a_good_model(tmp_path: Path) -> None:
    # The control: the fields and tensor every damaged file is built from.
    info = inspect_model(write_raw_gguf(tmp_path / "good.gguf"))
    assert (info.name, info.architecture, info.block_count) == ("byte-built", "llama", 1)
    assert (info.n_params, info.tensor_bytes, info.quantization) == (64, 256, "F32")


@pytest.mark.parametrize("loader", list(LOADERS))
@pytest.mark.parametrize("name", list(DAMAGED))
def test_damaged_header_is_refused_in_one_line(tmp_path: Path, name: str, loader: str) -> None:
    kvs, tensors, says = DAMAGED[name]
    path = write_raw_gguf(tmp_path / f"{name}.gguf", kvs, tensors)
    t0 = time.perf_counter()
    with pytest.raises(DamagedModelError) as info:
        LOADERS[loader](path)
    assert time.perf_counter() - t0 < 60  # a hang guard: a loop over 2^61 elements never ends
    message = str(info.value)
    assert message == f"the GGUF header is damaged: {says}: {path}"
    assert "\n" not in message
    assert info.value.path == str(path)


def test_a_claim_the_file_could_hold_but_does_not_is_truncation(tmp_path: Path) -> None:
    # 2^30 uint32s: under the sanity bound, but not in a file of a few hundred
    # bytes; the reader must say so before it allocates 4 GiB for them.
    kvs = (*BASE_KVS, kv_array("tokenizer.ggml.token_type", U32, 1 << 30))
    path = write_raw_gguf(tmp_path / "short.gguf", kvs)
    with pytest.raises(TruncatedModelError, match=r"truncated: it ends at [\d,]+ bytes"):
        check_model_file(path)


def test_every_damaged_file_is_a_model_file_error(tmp_path: Path) -> None:
    # What the library and the CLI catch: nothing else may escape the reader.
    for name, (kvs, tensors, _) in DAMAGED.items():
        path = write_raw_gguf(tmp_path / f"{name}.gguf", kvs, tensors)
        with pytest.raises(ModelFileError):
            inspect_model(path)


def test_undecodable_text_is_replaced_not_raised(tmp_path: Path) -> None:
    name = b"general.\xff\xfe"
    bad_kv = struct.pack("<Q", len(name)) + name + struct.pack("<I", STRING) + gguf_str("x")
    latin1 = b"caf\xe9 \xff"  # not UTF-8
    bad_value = kv("general.description", STRING, struct.pack("<Q", len(latin1)) + latin1)
    path = write_raw_gguf(tmp_path / "utf8.gguf", (*BASE_KVS, bad_kv, bad_value))
    meta = check_model_file(path).metadata
    # Each undecodable byte becomes U+FFFD; the text around it is kept.
    assert meta["general.\ufffd\ufffd"] == "x"
    assert meta["general.description"] == "caf\ufffd \ufffd"


NOT_GGUF: dict[str, tuple[bytes, str]] = {
    "readme.gguf": ("# Gambit\n\nLocal chat — fast.\n".encode(), "it holds text (“# Gambit Local"),
    "page.gguf": (b"<!DOCTYPE html><html><body>404</body></html>", "a web page"),
    "lfs.gguf": (b"version https://git-lfs.github.com/spec/v1\noid sha256:ab\n", "Git LFS"),
    "model.zip.gguf": (b"PK\x03\x04" + bytes(60), "zip archive"),
    "noise.gguf": (bytes(range(200, 256)) * 4, "first bytes are c8 c9 ca cb"),
}


@pytest.mark.parametrize("name", list(NOT_GGUF))
def test_a_file_named_gguf_is_told_what_it_holds(tmp_path: Path, name: str) -> None:
    blob, expected = NOT_GGUF[name]
    path = tmp_path / name
    path.write_bytes(blob)
    with pytest.raises(ModelFileError) as info:
        check_model_file(path)
    message = str(info.value)
    assert message.startswith("not a GGUF model file: it is named .gguf, but ")
    assert expected in message and str(path) in message
    assert "needs .gguf" not in message and "convert other formats" not in message


def test_a_file_of_another_name_is_told_that_llama_cpp_needs_gguf(tmp_path: Path) -> None:
    path = tmp_path / "README.md"
    path.write_text("# Gambit\n")
    with pytest.raises(ModelFileError, match=r"not a GGUF model file \(llama.cpp needs .gguf"):
        check_model_file(path)
