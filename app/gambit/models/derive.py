"""Derive models from a model the user has, with llama.cpp's own quantizer.

Re-quantizing a target to fewer bits gives a draft with the very same
tokenizer (a "quantized self-draft"); re-quantizing up (Q4 -> Q8_0/F16) gives a
larger target for tests and comparisons.

``derive_draft`` runs the quantizer in a child process (``python -I -m
gambit.models.derive SRC DST TYPE``, which ends when its parent does), so
that it can be cancelled at any time (the child is terminated and its partial
file removed) and its progress read from the growing output file, without
holding the caller's thread in C code.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import llama_cpp as ll
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

from gambit.engine.acceptance import greedy_acceptance
from gambit.engine.drafters.draft_model import check_compatible
from gambit.engine.machine.llama_lib import ensure_backend
from gambit.engine.machine.runtime import ModelRuntime, RuntimeOptions
from gambit.engine.machine.threads import default_threads
from gambit.errors import GambitError, OperationCancelledError
from gambit.formats.gguf_file import GGUFHeader, check_model_file
from gambit.fsutil import Progress, check_disk_space
from gambit.models.child_process import child_env, exit_with_parent, module_command
from gambit.models.library import ModelLibrary

# Names users know -> llama_ftype
FTYPES: dict[str, int] = {
    "F32": ll.LLAMA_FTYPE_ALL_F32,
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


class DeriveCancelledError(OperationCancelledError):
    """The user cancelled a derivation; no partial file was left behind."""


# The weight type each llama_ftype is mostly made of, and how much its mixes add
# (K-quant "_M" files keep some tensors at Q6_K/Q5_K).
_BASE_TYPES: dict[str, GGMLQuantizationType] = {
    "F32": GGMLQuantizationType.F32,
    "F16": GGMLQuantizationType.F16,
    "Q8_0": GGMLQuantizationType.Q8_0,
    "Q4_0": GGMLQuantizationType.Q4_0,
    "Q4_1": GGMLQuantizationType.Q4_1,
    "Q4_K_M": GGMLQuantizationType.Q4_K,
    "Q3_K_M": GGMLQuantizationType.Q3_K,
    "Q2_K": GGMLQuantizationType.Q2_K,
}
_MIX_FACTOR: dict[str, float] = {"Q4_K_M": 1.05, "Q3_K_M": 1.07, "Q2_K": 1.04}
# llama.cpp's types for rows that do not split into 256-wide super-blocks
_FALLBACK: dict[GGMLQuantizationType, GGMLQuantizationType] = {
    GGMLQuantizationType.Q2_K: GGMLQuantizationType.IQ4_NL,
    GGMLQuantizationType.Q3_K: GGMLQuantizationType.IQ4_NL,
    GGMLQuantizationType.Q4_K: GGMLQuantizationType.Q5_0,
    GGMLQuantizationType.Q5_K: GGMLQuantizationType.Q5_1,
    GGMLQuantizationType.Q6_K: GGMLQuantizationType.Q8_0,
}
DISK_MARGIN = 1.1
POLL_S = 0.05
CALIBRATION_PROMPTS: tuple[str, ...] = (
    "The history of the printing press begins",
    'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n',
    "Here are three tips for staying productive when working from home:",
    "Photosynthesis is the process by which plants",
)


def _tensor_bytes(shape: tuple[int, ...], qtype: GGMLQuantizationType) -> int:
    block, size = GGML_QUANT_SIZES[qtype]
    n = 1
    for d in shape:
        n *= d
    return -(-n // block) * size


def estimate_output_size(header: GGUFHeader, ftype: str) -> int:
    """About how many bytes ``requantize(header.path, ..., ftype)`` will write.

    Like llama.cpp's quantizer (``estimate_tensor_bytes``). An estimate (for
    progress and the disk-space check): exact for F16/Q8_0/Q4_0/Q4_1, within
    ~5 % for the K-quant mixes (measured on SmolLM2 and Gemma-3).
    """
    return header.data_offset + sum(estimate_tensor_bytes(header, ftype).values())


def estimate_tensor_bytes(header: GGUFHeader, ftype: str) -> dict[str, int]:
    """Tensor name -> about how many bytes it takes once re-quantized to ``ftype``.

    Like llama.cpp's quantizer: tensors of one dimension stay as they are, the
    output matrix (or the token embeddings standing in for it) gets at least
    Q6_K, and a matrix whose rows do not split into whole blocks gets
    llama.cpp's fallback type (Q4_K -> Q5_0, Q6_K -> Q8_0, ...).
    """
    if ftype not in _BASE_TYPES:
        raise GambitError(f"unknown quantization {ftype!r}; choose one of {', '.join(FTYPES)}")
    base = _BASE_TYPES[ftype]
    names = {t.name for t in header.tensors}
    output = "output.weight" if "output.weight" in names else "token_embd.weight"
    sizes: dict[str, int] = {}
    for t in header.tensors:
        if len(t.shape) < 2 or not t.name.endswith(".weight"):
            sizes[t.name] = t.n_bytes
            continue
        qtype = base
        if t.name == output and ftype not in ("F16", "Q8_0"):
            qtype = GGMLQuantizationType.Q6_K
        if t.shape[0] % GGML_QUANT_SIZES[qtype][0] != 0:
            qtype = _FALLBACK.get(qtype, GGMLQuantizationType.Q8_0)
        n = _tensor_bytes(t.shape, qtype)
        if t.name != output:
            n = int(n * _MIX_FACTOR.get(ftype, 1.0))
        sizes[t.name] = n
    return sizes


def derived_name(target: Path, ftype: str) -> str:
    """``SmolLM2-135M-Instruct.Q8_0.gguf`` -> ``SmolLM2-135M-Instruct.Q4_0.gguf``."""
    stem = target.name[: -len(".gguf")] if target.name.lower().endswith(".gguf") else target.name
    lowered = stem.lower()
    for name in sorted(FTYPES, key=len, reverse=True):
        for sep in (".", "-", "_"):
            suffix = sep + name.lower()
            if lowered.endswith(suffix):
                return f"{stem[: -len(suffix)]}{sep}{ftype}.gguf"
    return f"{stem}.{ftype}.gguf"


def derive_draft(
    target_path: str | os.PathLike[str],
    ftype: str,
    dest: str | os.PathLike[str] | None = None,
    progress: Progress | None = None,
    cancel: threading.Event | None = None,
    library: ModelLibrary | None = None,
    register: bool = True,
    overwrite: bool = False,
) -> Path:
    """Re-quantize ``target_path`` to ``ftype`` as a draft for it, and register it.

    Checks the disk space first; runs the quantizer in a child process;
    reports ``progress("quantizing", bytes written, bytes expected)``; with
    ``cancel`` set, stops the child, removes its partial file and raises
    ``DeriveCancelledError``. The new file is registered in ``library`` (the
    default library if None) as a draft of the target, unless ``register`` is
    False. An existing file at the destination is replaced only with
    ``overwrite``.
    """
    if ftype not in FTYPES:
        raise GambitError(f"unknown quantization {ftype!r}; choose one of {', '.join(FTYPES)}")
    src = Path(target_path).expanduser()
    header = check_model_file(src)
    if library is None and (register or dest is None):
        library = ModelLibrary()
    if dest is None:
        assert library is not None
        dest_path = library.models_dir / derived_name(src, ftype)
    else:
        dest_path = Path(dest).expanduser()
        if dest_path.is_dir():
            dest_path = dest_path / derived_name(src, ftype)
    if dest_path.exists() and os.path.samefile(dest_path, src):
        raise GambitError(f"the derived model would overwrite its source: {dest_path}")
    if dest_path.exists() and not overwrite:
        raise GambitError(
            f"{dest_path} already exists: choose another destination, or replace it "
            "(--force on the command line)"
        )
    expected = estimate_output_size(header, ftype)
    check_disk_space(dest_path.parent, int(expected * DISK_MARGIN), dest_path.name)
    dest_path.parent.mkdir(parents=True, exist_ok=True)
    _run_quantizer(src, dest_path, ftype, expected, progress, cancel)
    check_model_file(dest_path)
    if register and library is not None:
        library.register_draft(src, dest_path, origin="derived")
    return dest_path


def _partial_path(dest: Path) -> Path:
    return dest.with_name(f".{dest.name}.part")  # as requantize writes it


def _run_quantizer(
    src: Path,
    dest: Path,
    ftype: str,
    expected: int,
    progress: Progress | None,
    cancel: threading.Event | None,
) -> None:
    partial = _partial_path(dest)
    cmd = [*module_command("gambit.models.derive"), str(src), str(dest), ftype]
    with tempfile.TemporaryFile() as errors:
        proc = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=errors, stderr=errors, env=child_env()
        )
        finished = False
        try:
            if progress:
                progress("quantizing", 0, expected)
            last = 0
            while proc.poll() is None:
                if cancel is not None and cancel.wait(POLL_S):
                    raise DeriveCancelledError(f"cancelled: {dest.name} was not written")
                if cancel is None:
                    time.sleep(POLL_S)
                try:
                    done = partial.stat().st_size
                except FileNotFoundError:
                    done = last  # not created yet, or already renamed
                if progress and done > last:
                    progress("quantizing", min(done, expected - 1), expected)
                    last = done
            finished = True
        finally:
            if not finished:
                _stop(proc)
                partial.unlink(missing_ok=True)
        if proc.returncode != 0:
            partial.unlink(missing_ok=True)
            errors.seek(0)
            tail = errors.read().decode("utf-8", "replace").strip().splitlines()[-3:]
            raise GambitError(
                f"could not derive {dest.name} from {src.name} (quantizer exit code "
                f"{proc.returncode}): " + " / ".join(tail)
            )
    if progress:
        size = dest.stat().st_size
        progress("quantizing", size, size)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        proc.terminate()
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def measure_acceptance(
    target: str | os.PathLike[str],
    draft: str | os.PathLike[str],
    prompts: Sequence[str] = CALIBRATION_PROMPTS,
    n_tokens: int = 48,
    options: RuntimeOptions | None = None,
) -> float:
    """Share of drafted tokens the target accepts: greedy, γ = 4, ``n_tokens``
    per prompt, on the real engine (a short calibration, a few seconds for
    small models)."""
    opts = options or RuntimeOptions(n_ctx=512)
    with ModelRuntime(target, opts) as t_rt, ModelRuntime(draft, opts) as d_rt:
        check_compatible(t_rt, d_rt)
        tokens = [t_rt.tokenize(p, add_special=True, parse_special=False) for p in prompts]
        return greedy_acceptance(t_rt, d_rt, tokens, n_tokens, gamma=4)


def quantizer_main(argv: Sequence[str]) -> int:
    """The quantizer child's entry (``python -m gambit.models.derive SRC DST TYPE``)."""
    if len(argv) != 3:
        print("usage: python -m gambit.models.derive SRC DST TYPE", file=sys.stderr)
        return 2
    import logging

    logging.getLogger("gambit.llama").setLevel(logging.ERROR)
    # A killed parent cannot stop or clean up after us: end, and take the partial file along.
    exit_with_parent(lambda: _partial_path(Path(argv[1])).unlink(missing_ok=True))
    try:
        requantize(argv[0], argv[1], argv[2])
    except GambitError as exc:
        print(exc, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(quantizer_main(sys.argv[1:]))
