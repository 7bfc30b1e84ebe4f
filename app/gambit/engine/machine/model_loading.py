"""Loading a model on the kernels that suit it here: the crash-safe probe's
verdict (``gambit.engine.machine.kernels``), asked before llama.cpp loads the file.

The target runs the kernels its settings ask for (batch-invariant ones by
default); a draft model always runs the fastest that work, since its numerics
cannot change what the target accepts (``load_draft_runtime``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from gambit.engine.machine.devices import gpu_devices
from gambit.engine.machine.kernels import EXACT, KernelChoice, KernelProbe, implied_kernels
from gambit.engine.machine.runtime import ModelRuntime, RuntimeOptions
from gambit.engine.machine.threads import default_threads
from gambit.formats.gguf_file import read_header

Progress = Callable[[str], None]  # what a load is doing now, in a sentence


def choose_kernels(
    probe: KernelProbe,
    model: Path,
    options: RuntimeOptions,
    k_max: int,
    wanted: Literal["exact", "fast"] | None = None,
    progress: Progress | None = None,
) -> tuple[RuntimeOptions, KernelChoice]:
    """``options`` with the kernels the probe found best for ``wanted`` (default:
    what ``strict_batch_invariance`` asks for); options that name their kernels
    already are kept as they are. ``progress`` hears of a probe that must run."""
    wanted = wanted or ("exact" if options.strict_batch_invariance else "fast")
    if options.kernels is not None or not model.is_file():  # (ModelRuntime says what is wrong)
        return options, KernelChoice(options.kernels or EXACT, wanted, None)
    if not options.rpc_workers and all_layers_on_gpu(model, options):
        # CPU kernel configurations cannot matter where no layer runs on this CPU.
        config = implied_kernels(wanted == "exact")
        why = "not probed: no layer runs on this CPU"
        return dataclasses.replace(options, kernels=config), KernelChoice(config, wanted, None, why)
    threads = options.n_threads or default_threads()
    if progress is not None and probe.cached(model, threads, options.n_gpu_layers, k_max) is None:
        progress(f"Checking which llama.cpp kernels run {model.name} here (first load only)…")
    verdict = probe.verdict(model, threads, options.n_gpu_layers, k_max)
    config = verdict.exact() if wanted == "exact" else verdict.fastest()
    return dataclasses.replace(options, kernels=config), KernelChoice(config, wanted, verdict)


def all_layers_on_gpu(model: Path, options: RuntimeOptions) -> bool:
    """Whether every layer of ``model`` is offloaded to a GPU of this machine."""
    if options.n_gpu_layers == 0 or not gpu_devices():
        return False
    if options.n_gpu_layers < 0:
        return True
    header = read_header(model)
    blocks = header.metadata.get(f"{header.architecture}.block_count")
    # llama.cpp counts the output layer as one more to offload.
    return isinstance(blocks, int) and options.n_gpu_layers >= blocks + 1


def load_draft_runtime(
    path: Path,
    options: RuntimeOptions,
    probe: KernelProbe,
    k_max: int,
    progress: Progress | None = None,
) -> tuple[ModelRuntime, KernelChoice]:
    """A draft model's runtime: on this machine (a network pass would cost
    more than it saves), one KV sequence, the fastest kernels that work."""
    draft_options = dataclasses.replace(options, n_seq_max=1, rpc_workers=())
    draft_options, kernels = choose_kernels(probe, path, draft_options, k_max, "fast", progress)
    if progress is not None:
        progress(f"Loading the draft {path.name}…")
    return ModelRuntime(path, draft_options), kernels
