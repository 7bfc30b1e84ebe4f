"""Multi-token-prediction (MTP) heads: does a model carry them, and can Gambit draft with them?

Some models are trained with extra "next-n" layers that predict the tokens after
the next one (GLM-4.5, Qwen3.5, MiMo, DeepSeek-V3); their GGUF files say how many
in ``{arch}.nextn_predict_layers``. Those heads are a nearly free drafter: they
reuse the target's last hidden state.

Drafting with them needs llama.cpp's MTP context type (``LLAMA_CONTEXT_TYPE_MTP``,
``llama_context_params.ctx_other``) and its staging API from ``src/llama-ext.h``
(``llama_set_embeddings_nextn``, ``llama_get_embeddings_nextn_ith``,
``llama_batch_ext_set_embd_state``), which the shared library exports only under
C++-mangled names. llama-cpp-python 0.3.36 does bind them: the context type and
the batch API in ``llama_cpp``, the mangled functions in its experimental,
non-public ``llama_cpp.llama_cpp_ext`` module. Gambit has no MTP drafter yet (and
no model with MTP heads small enough to test one here), so MTP is never offered;
:func:`mtp_availability` says why for a given model, from its GGUF header alone
(no weights are loaded), and checks the binding at run time, so that a build
without the API gets the right sentence too.
"""

from __future__ import annotations

import importlib
import importlib.metadata
from dataclasses import dataclass
from pathlib import Path

from gambit.errors import GambitError
from gambit.formats.gguf_file import check_model_file
from gambit.words import counted

# What a Python binding must expose before MTP heads can draft.
MTP_BINDING_API = (
    "llama_set_embeddings_nextn",
    "llama_get_embeddings_nextn_ith",
    "llama_batch_ext_set_embd_state",
)
MTP_MODELS_HINT = "only models trained with them carry them, e.g. GLM-4.5, Qwen3.5, MiMo"


@dataclass(frozen=True)
class MtpAvailability:
    available: bool
    reason: str  # one sentence for the user: why (not), naming the model
    n_heads: int  # next-n prediction layers in the file (0: none)


def binding_has_mtp() -> bool:
    """True when the installed llama-cpp-python wraps llama.cpp's MTP drafting API."""
    import llama_cpp

    try:  # binds the mangled symbols on import; raises when the library lacks them
        llama_cpp_ext = importlib.import_module("llama_cpp.llama_cpp_ext")
    except (ImportError, AttributeError, OSError):
        return False
    return hasattr(llama_cpp, "LLAMA_CONTEXT_TYPE_MTP") and all(
        hasattr(llama_cpp, name) or hasattr(llama_cpp_ext, name) for name in MTP_BINDING_API
    )


def binding_version() -> str:
    try:
        return importlib.metadata.version("llama_cpp_python")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover - a source tree
        return "unknown"


def without_heads(model: str) -> MtpAvailability:
    """The answer for a model known to have no MTP heads (``model``: how to name it)."""
    return MtpAvailability(
        False, f"{model} has no multi-token-prediction heads ({MTP_MODELS_HINT}).", 0
    )


def mtp_availability(path: Path) -> MtpAvailability:
    """Whether Gambit can draft with ``path``'s MTP heads, and why not, from its header."""
    name = path.name
    try:
        header = check_model_file(path)
    except (GambitError, OSError) as exc:
        return MtpAvailability(False, f"{name} could not be read: {exc}", 0)
    value = header.metadata.get(f"{header.architecture}.nextn_predict_layers", 0)
    n_heads = value if isinstance(value, int) and not isinstance(value, bool) else 0
    if n_heads <= 0:
        return without_heads(name)
    heads = counted(n_heads, "MTP head")
    if not binding_has_mtp():
        return MtpAvailability(
            False,
            f"{name} has {heads}, but llama-cpp-python {binding_version()} does not expose "
            "llama.cpp's MTP drafting API (llama-ext.h); Gambit will offer it when the "
            "binding does.",
            n_heads,
        )
    return MtpAvailability(
        False,
        f"{name} has {heads}, and llama-cpp-python {binding_version()} binds llama.cpp's "
        "experimental MTP drafting API (llama-ext.h), but Gambit has no MTP drafter yet.",
        n_heads,
    )
