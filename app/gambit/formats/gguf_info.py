"""What a GGUF file holds, read from its header alone (milliseconds, no weights loaded).

``inspect_model`` checks the file first (``check_model_file``), so a bad path
raises the specific ``ModelFileError`` subclass that says what is wrong.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, get_type_hints

import llama_cpp as ll
from gguf.constants import GGMLQuantizationType

from gambit.formats.gguf_file import GGUFHeader, check_model_file, read_header

# tokenizer.ggml.model -> the name of llama.cpp's vocabulary type (llama-vocab.cpp)
VOCAB_TYPES: dict[str, str] = {
    "llama": "SPM",
    "gpt2": "BPE",
    "bert": "WPM",
    "t5": "UGM",
    "rwkv": "RWKV",
    "plamo2": "PLaMo-2",
    "no_vocab": "none",
    "none": "none",
}

# Special-token defaults llama.cpp applies when a file leaves the keys out
# (llama_vocab::impl::load): (add_bos, add_eos, bos id, eos id) per tokenizer model.
_VOCAB_DEFAULTS: dict[str, tuple[bool, bool, int, int]] = {
    "llama": (True, False, 1, 2),
    "gpt2": (False, False, 11, 11),
    "bert": (True, False, 101, -1),
    "t5": (False, True, -1, 1),
    "rwkv": (False, False, -1, -1),
}

_FTYPE_PREFIXES = ("LLAMA_FTYPE_MOSTLY_", "LLAMA_FTYPE_ALL_", "LLAMA_FTYPE_")
_FTYPE_GUESSED = int(getattr(ll, "LLAMA_FTYPE_GUESSED", 1024))


def _ftype_names() -> dict[int, str]:
    names: dict[int, str] = {}
    for attr in dir(ll):
        if not attr.startswith("LLAMA_FTYPE_") or attr == "LLAMA_FTYPE_GUESSED":
            continue
        value = getattr(ll, attr)
        if not isinstance(value, int):
            continue
        for prefix in _FTYPE_PREFIXES:
            if attr.startswith(prefix):
                names.setdefault(value, attr[len(prefix) :])
                break
    return names


FTYPE_NAMES: dict[int, str] = _ftype_names()


@dataclass(frozen=True)
class ModelInfo:
    """A model file's metadata, as shown in the library."""

    path: Path
    name: str  # general.name, else the file name
    architecture: str
    n_params: int  # sum of tensor element counts
    quantization: str  # "Q4_1", "Q8_0", "F16", "Q4_K_M", ...
    file_size: int
    tensor_bytes: int  # weights as stored (the file minus its header)
    header_bytes: int  # where the tensor data starts
    vocab_size: int
    vocab_type: str  # tokenizer.ggml.model: "gpt2", "llama", ...
    tokenizer_pre: str  # tokenizer.ggml.pre ("" when absent)
    n_merges: int
    context_length: int  # the context the model was trained for
    block_count: int
    embedding_length: int
    feed_forward_length: int
    head_count: int
    head_count_kv: int
    key_length: int  # per head
    value_length: int
    has_chat_template: bool
    tokenizer_digest: str  # GGUFHeader.tokenizer_digest: same digest, same tokenizer
    add_bos: bool
    add_eos: bool
    bos_token_id: int
    eos_token_id: int

    @property
    def vocab_type_name(self) -> str:
        """llama.cpp's name for the tokenizer kind (BPE, SPM, ...)."""
        return VOCAB_TYPES.get(self.vocab_type, self.vocab_type)

    @property
    def params_label(self) -> str:
        n = self.n_params
        if n >= 1e9:
            return f"{n / 1e9:.2f}B"
        return f"{n / 1e6:.1f}M"

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["path"] = str(self.path)
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ModelInfo:
        names = {f.name for f in fields(cls)}
        missing = names - data.keys()
        if missing:
            raise ValueError(f"missing fields: {', '.join(sorted(missing))}")
        values = {k: v for k, v in data.items() if k in names}
        for name, tp in _FIELD_TYPES.items():
            value = values[name]
            # bool is an int subclass: true is not a token count, nor 1 a flag
            if not isinstance(value, tp) or (tp is int and isinstance(value, bool)):
                raise ValueError(f"{name} is not {_TYPE_NAMES.get(tp, tp.__name__)}: {value!r}")
        values["path"] = Path(values["path"])
        return cls(**values)


# ModelInfo's fields as JSON holds them (the path as text), for from_json's checks.
_FIELD_TYPES: dict[str, type] = {
    name: str if name == "path" else tp for name, tp in get_type_hints(ModelInfo).items()
}
_TYPE_NAMES = {int: "a whole number", str: "text", bool: "true or false"}


def inspect_model(path: str | os.PathLike[str]) -> ModelInfo:
    """Read ``path``'s header; raise the specific ``ModelFileError`` if it is not a usable GGUF."""
    header = check_model_file(path)
    return info_from_header(header)


def info_from_header(header: GGUFHeader) -> ModelInfo:
    meta = header.metadata
    arch = header.architecture

    def num(key: str, default: int = 0) -> int:
        value = meta.get(f"{arch}.{key}", default)
        if isinstance(value, tuple):  # a per-layer array, summarised by the reader
            return _max_of_array(header, f"{arch}.{key}", default)
        if isinstance(value, list):
            return int(max(value, default=default))
        return int(value)

    tokens = meta.get("tokenizer.ggml.tokens")
    vocab_size = _array_length(tokens)
    if not vocab_size:
        vocab_size = int(meta.get(f"{arch}.vocab_size", 0))
    vocab_type = str(meta.get("tokenizer.ggml.model", "none"))
    d_add_bos, d_add_eos, d_bos, d_eos = _VOCAB_DEFAULTS.get(vocab_type, (False, False, -1, -1))
    n_embd = num("embedding_length")
    n_head = num("attention.head_count")
    head_dim = n_embd // n_head if n_head else 0
    n_params = 0
    for t in header.tensors:
        n = 1
        for d in t.shape:
            n *= d
        n_params += n
    tensor_bytes = sum(t.n_bytes for t in header.tensors)
    name = meta.get("general.name")
    return ModelInfo(
        path=header.path,
        name=str(name) if isinstance(name, str) and name else header.path.name,
        architecture=arch,
        n_params=n_params,
        quantization=quantization_name(header),
        file_size=header.path.stat().st_size,
        tensor_bytes=tensor_bytes,
        header_bytes=header.data_offset,
        vocab_size=vocab_size,
        vocab_type=vocab_type,
        tokenizer_pre=str(meta.get("tokenizer.ggml.pre", "")),
        n_merges=_array_length(meta.get("tokenizer.ggml.merges")),
        context_length=num("context_length"),
        block_count=num("block_count"),
        embedding_length=n_embd,
        feed_forward_length=num("feed_forward_length"),
        head_count=n_head,
        head_count_kv=num("attention.head_count_kv", n_head),
        key_length=num("attention.key_length", head_dim),
        value_length=num("attention.value_length", head_dim),
        has_chat_template=header.chat_template is not None,
        tokenizer_digest=header.tokenizer_digest,
        add_bos=bool(meta.get("tokenizer.ggml.add_bos_token", d_add_bos)),
        add_eos=bool(meta.get("tokenizer.ggml.add_eos_token", d_add_eos)),
        bos_token_id=int(meta.get("tokenizer.ggml.bos_token_id", d_bos)),
        eos_token_id=int(meta.get("tokenizer.ggml.eos_token_id", d_eos)),
    )


def quantization_name(header: GGUFHeader) -> str:
    """llama.cpp's name for ``general.file_type`` ("Q4_K_M"), else the commonest weight type."""
    ftype = header.metadata.get("general.file_type")
    if isinstance(ftype, int):
        name = FTYPE_NAMES.get(ftype & ~_FTYPE_GUESSED)
        if name:
            return name
    counts: dict[int, int] = {}
    for t in header.tensors:
        if len(t.shape) >= 2:
            counts[t.ggml_type] = counts.get(t.ggml_type, 0) + t.n_bytes
    if not counts:
        return "unknown"
    commonest = max(counts, key=lambda k: counts[k])
    try:
        return GGMLQuantizationType(commonest).name
    except ValueError:
        return f"type {commonest}"


def _array_length(value: Any) -> int:
    if isinstance(value, tuple) and len(value) == 3 and value[0] == "array":
        return int(value[2])
    if isinstance(value, list):
        return len(value)
    return 0


def _max_of_array(header: GGUFHeader, key: str, default: int) -> int:
    full = read_header(header.path, keep_arrays=(key,))
    values = full.metadata.get(key)
    if isinstance(values, list) and values:
        return int(max(values))
    return default
