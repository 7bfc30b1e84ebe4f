"""Derive models from a model the user has, with llama.cpp's own quantizer.

Re-quantizing a target to fewer bits gives a draft with the very same
tokenizer (a "quantized self-draft"); re-quantizing up (Q4 -> Q8_0/F16) gives a
larger target for tests and comparisons.
"""

from __future__ import annotations

import os
from pathlib import Path

import llama_cpp as ll

from gambit.engine.runtime import default_threads, ensure_backend
from gambit.errors import GambitError
from gambit.models.gguf_file import check_model_file

# Names users know -> llama_ftype
FTYPES: dict[str, int] = {
    "F16": ll.LLAMA_FTYPE_MOSTLY_F16,
    "Q8_0": ll.LLAMA_FTYPE_MOSTLY_Q8_0,
    "Q4_0": ll.LLAMA_FTYPE_MOSTLY_Q4_0,
    "Q4_1": ll.LLAMA_FTYPE_MOSTLY_Q4_1,
    "Q4_K_M": ll.LLAMA_FTYPE_MOSTLY_Q4_K_M,
    "Q3_K_M": ll.LLAMA_FTYPE_MOSTLY_Q3_K_M,
    "Q2_K": ll.LLAMA_FTYPE_MOSTLY_Q2_K,
}


def requantize(src: str | os.PathLike[str], dst: str | os.PathLike[str], ftype: str) -> Path:
    """Write ``src`` re-quantized to ``ftype`` at ``dst`` (atomically: a partial
    file never appears under ``dst``)."""
    if ftype not in FTYPES:
        raise GambitError(f"unknown quantization {ftype!r}; choose one of {', '.join(FTYPES)}")
    src_path, dst_path = Path(src), Path(dst)
    check_model_file(src_path)
    ensure_backend()
    dst_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst_path.with_name(f".{dst_path.name}.part")
    params = ll.llama_model_quantize_default_params()
    params.ftype = FTYPES[ftype]
    params.allow_requantize = True
    params.nthread = default_threads()
    rc = ll.llama_model_quantize(str(src_path).encode(), str(tmp).encode(), params)
    if rc != 0 or not tmp.is_file():
        tmp.unlink(missing_ok=True)
        raise GambitError(f"llama.cpp could not quantize {src_path.name} to {ftype} (code {rc})")
    os.replace(tmp, dst_path)
    return dst_path
