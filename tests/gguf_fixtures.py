"""Building modified GGUF files for tests (importable: tests/ is on sys.path)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import gguf

# A SmolLM2 copy whose token 1000 has another text: it loads, but cannot
# draft for SmolLM2 (llama.cpp's rule: token texts must match from id 5 on).
CHANGED_TOKEN = 1000
CHANGED_TEXT = "<|gambit-test|>"


def copy_gguf(
    reader: gguf.GGUFReader, dst: Path, edit: Callable[[str, Any], Any] | None = None
) -> Path:
    """Copy a model field by field and tensor by tensor with gguf's writer (as
    gguf's own gguf_new_metadata.py script does); ``edit(name, value)`` may
    return a changed value for any metadata field."""
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
