"""The kernel probe's child: runs kernel configurations on a model, in a
process of its own, because one may crash it (``gambit.engine.machine.kernels``
starts it, reads what it prints and keeps the verdict).

It prints ``start KEY`` before each configuration and ``result {json}``
after it, so that when it dies the configuration that killed it is known.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from gambit.engine.machine.kernels import COMPARED_ROWS, PROBE_CONTEXT, KernelConfig, ProbeResult
from gambit.engine.machine.runtime import ModelRuntime, RuntimeOptions

_FILLER = (
    "Speculative decoding lets a small model propose a few tokens and a large model "
    "check them all at once. When the guesses are good, several tokens come out of "
    "one pass over the weights; when they are bad, the work is wasted. The kernels "
    "that compute a batch must give the same numbers as those that compute one token, "
    "or greedy decoding may pick another word where two candidates nearly tie. "
)


_WEIGHT_BUFFER = re.compile(r"load_tensors:\s+(\S+) model buffer size")


@contextlib.contextmanager
def _weight_buffers() -> Iterator[list[str]]:
    """The buffer types llama.cpp puts a model's weights in while it loads, as
    its log names them ("load_tensors: AMX model buffer size = ..."): the one
    place it says whether a repacking load repacked anything."""
    seen: list[str] = []

    class Catch(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if m := _WEIGHT_BUFFER.search(record.getMessage()):
                seen.append(m.group(1))

    llama_log = logging.getLogger("gambit.llama")
    handler, level = Catch(logging.INFO), llama_log.level
    llama_log.addHandler(handler)
    llama_log.setLevel(min(level or logging.INFO, logging.INFO))
    try:
        yield seen
    finally:
        llama_log.removeHandler(handler)
        llama_log.setLevel(level)


def measure(
    model: Path,
    config: KernelConfig,
    n_threads: int,
    n_gpu_layers: int,
    k_max: int,
    plain: ProbeResult | None = None,
) -> ProbeResult:
    """Run ``config`` through the paths speculation uses (in this process: it may
    crash). ``plain``: the result of the same KV type with plain weights, where
    known; a repacking load whose weights land in the same buffers is that
    configuration again, and is not run twice."""
    options = RuntimeOptions(
        n_ctx=PROBE_CONTEXT + 2 * k_max + 8,
        n_threads=n_threads,
        n_gpu_layers=n_gpu_layers,
        kernels=config,
    )
    with _weight_buffers() as seen, ModelRuntime(model, options) as rt:
        buffers = tuple(sorted(set(seen)))
        if plain is not None and plain.ok and plain.weight_buffers == buffers:
            return plain.standing_for(config)
        tokens = rt.tokenize(_FILLER, add_special=False)
        while len(tokens) < PROBE_CONTEXT + k_max:
            tokens += tokens
        context, batch = tokens[:PROBE_CONTEXT], tokens[PROBE_CONTEXT : PROBE_CONTEXT + k_max]
        rt.decode(context)  # a prefill batch: where broken batched kernels die
        for k in range(2, k_max + 1):  # every verification batch size
            rt.decode(batch[:k], all_logits=True)
            rt.truncate(len(context))
        tk = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            rows = rt.decode(batch, all_logits=True)
            batched = rt.logits_rows(rows).copy()
            tk = min(tk, time.perf_counter() - t0)
            rt.truncate(len(context))
        # The batch's first rows against the same tokens decoded one at a time
        # (a kernel that rounds differently in a batch does so from row 0).
        batched = batched[:COMPARED_ROWS]
        single = np.empty_like(batched)
        t1 = float("inf")
        for i, tok in enumerate(batch[:COMPARED_ROWS]):
            t0 = time.perf_counter()
            rt.decode([tok])
            single[i] = rt.logits(-1)
            t1 = min(t1, time.perf_counter() - t0)
    diff = float(np.abs(batched - single).max())
    flips = int((batched.argmax(axis=1) != single.argmax(axis=1)).sum())
    return ProbeResult(
        config,
        ok=True,
        t1_s=t1,
        tk_s=tk,
        k_max=k_max,
        max_diff=diff,
        argmax_flips=flips,
        weight_buffers=buffers,
    )


def child_main(argv: Sequence[str]) -> int:
    """``python -m gambit.engine.machine.kernel_child MODEL THREADS GPU_LAYERS K_MAX CONFIG...``"""
    logging.getLogger("gambit.llama").setLevel(logging.CRITICAL)
    model, threads, gpu_layers, k_max = Path(argv[0]), int(argv[1]), int(argv[2]), int(argv[3])
    done: dict[KernelConfig, ProbeResult] = {}
    for key in argv[4:]:
        config = KernelConfig.from_key(key)
        print(f"start {key}", flush=True)
        plain = done.get(KernelConfig(repack=False, kv_type=config.kv_type))
        # Whether the weights repack does not depend on the KV type: once one
        # repacking load repacked nothing, the others need not load to know it.
        if plain is not None and config.repack and any(r.same_as for r in done.values()):
            result = plain.standing_for(config)
        else:
            try:
                result = measure(model, config, threads, gpu_layers, k_max, plain)
            except Exception as exc:  # a refusal, not a crash: report it and go on
                result = ProbeResult(config, ok=False, error=f"failed: {exc}")
        done[config] = result
        print("result " + json.dumps(result.to_json()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(child_main(sys.argv[1:]))
