"""Where a target's layers land on real ``gambit-worker`` processes (127.0.0.1).

``engine.machine.placement.split_layers`` computes llama.cpp's placement without
asking llama.cpp; here llama.cpp's own per-layer log ("layer N assigned to
device RPC1") is the judge.
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from pathlib import Path

import pytest

from gambit.engine.machine import devices, rpc
from gambit.engine.machine.kernels import EXACT
from gambit.engine.machine.placement import placement_for
from gambit.engine.machine.runtime import ModelRuntime, RuntimeOptions
from gambit.engine.session import Engine, EngineConfig
from gambit.formats.gguf_file import check_model_file
from worker_process import workers

_ASSIGNED = re.compile(r"layer\s+\d+ assigned to device (\S+?),")


def _options(**kwargs: object) -> RuntimeOptions:
    # Kernels named: no kernel probe.
    return RuntimeOptions(n_ctx=256, n_threads=1, kernels=EXACT, **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize("n_gpu_layers", [-1, 15, 7])
def test_the_computed_split_is_the_one_llama_cpp_makes(
    tmp_path: Path, smol_q4_1: Path, caplog: pytest.LogCaptureFixture, n_gpu_layers: int
) -> None:
    n_layer = check_model_file(smol_q4_1).metadata["llama.block_count"]
    with workers(tmp_path, 2) as (w1, w2):
        probed = [rpc.probe(w.endpoint) for w in (w1, w2)]
        expected = placement_for(
            n_layer, n_gpu_layers, probed, devices.device_memory(devices.cpu_device()).free
        )
        caplog.set_level(logging.DEBUG, logger="gambit.llama")
        # In this process (as the target host's child does it), to read llama.cpp's log.
        rt = ModelRuntime(
            smol_q4_1, _options(rpc_workers=(w1.endpoint, w2.endpoint), n_gpu_layers=n_gpu_layers)
        )
        rt.close()
    names = [m.group(1) for r in caplog.records if (m := _ASSIGNED.search(r.getMessage()))]
    # (RPC devices are numbered across the process's loads: compare them in order)
    per_device = Counter(n for n in names if n != "CPU")
    in_order = [per_device[n] for n in sorted(per_device, key=lambda n: int(n[3:]))]
    assert names.count("CPU") == expected.local_layers
    assert in_order == [w.layers for w in expected.workers if w.layers]
    assert expected.total_layers == n_layer + 1
    assert all(w.rtt_s > 0 for w in probed)


def test_the_engine_says_where_the_targets_layers_are(tmp_path: Path, smol_q4_1: Path) -> None:
    with workers(tmp_path, 1) as (w1,):
        engine = Engine(
            EngineConfig(
                target=smol_q4_1,
                target_options=_options(rpc_workers=(w1.endpoint,), n_gpu_layers=15),
            )
        )
        try:
            placement = engine.placement
            assert placement is not None
            assert placement.local_layers == 16  # 30 blocks and the output layer, 15 sent
            ((share,),) = (placement.workers,)
            assert share.endpoint == w1.endpoint and share.layers == 15 and share.rtt_s > 0
            assert placement.describe().startswith(
                f"Target: 16 layers here · 15 on {w1.endpoint} (rtt "
            )
        finally:
            engine.close()
    local = Engine(EngineConfig(target=smol_q4_1, target_options=_options()))
    try:
        assert local.placement is None
    finally:
        local.close()
