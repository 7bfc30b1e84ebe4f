"""Where a target split over RPC workers keeps its layers, and what a pass costs.

llama.cpp places the layers itself when the model loads and reports nothing
back through its C API, so ``split_layers`` computes the same placement from
the same inputs: the layer count, ``n_gpu_layers`` and each device's free
memory (``rpc.probe`` asks the workers for it just before the load).

Layers are counted as llama.cpp counts them ("offloaded 15/31 layers"): the
repeating blocks plus the output layer, which is the last one. The input
layer (the token embeddings) always stays on this machine and is not counted.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gambit.engine.estimates import CostModel
from gambit.engine.machine.devices import DeviceMemory
from gambit.engine.machine.rpc import WorkerInfo
from gambit.words import counted


def split_layers(
    n_layer: int, n_gpu_layers: int, devices: Sequence[DeviceMemory], host_free: int = 0
) -> tuple[int, tuple[int, ...]]:
    """(layers on this machine, layers on each device) for a model of
    ``n_layer`` blocks whose ``n_gpu_layers`` last layers (<= 0: all) go to
    ``devices`` (their memory as probed).

    This mirrors llama.cpp's rule (``llama_model::load_tensors`` in
    src/llama-model.cpp, tensor_split all zero): split points are the running
    sums of the devices' free memory over their total, in float32;
    ``i_gpu_start = max(n_layer + 1 - n_gpu_layers, 0)`` and
    ``act = min(n_gpu_layers, n_layer + 1)``; layer ``il`` from there on goes to
    the first device whose split point is above ``(il - i_gpu_start) / act``
    (``std::upper_bound``). A device that reports no memory at all (0 free of
    0) counts with this machine's free memory (``host_free``), as in llama.cpp.
    Checked against llama.cpp's own per-layer log in
    tests/integration/test_rpc_placement.py.
    """
    total = n_layer + 1
    if not devices:
        return total, ()
    # (gambit.engine.machine.runtime passes 999, "all", for n_gpu_layers <= 0 with workers)
    ngl = 999 if n_gpu_layers <= 0 else n_gpu_layers
    free = [host_free if d.free == 0 and d.total == 0 else d.free for d in devices]
    weights = np.array(free, dtype=np.float32)
    if not weights.sum() > 0:  # nothing reported anywhere: llama.cpp would fail; share evenly
        weights[:] = 1.0
    splits = np.cumsum(weights, dtype=np.float32)
    splits = (splits / splits[-1]).astype(np.float32)
    start = max(total - ngl, 0)
    act = min(ngl, total)
    counts = [0] * len(free)
    for il in range(start, start + act):
        x = np.float32(il - start) / np.float32(act)
        device = int(np.searchsorted(splits, x, side="right"))
        counts[min(device, len(free) - 1)] += 1
    return total - act, tuple(counts)


@dataclass(frozen=True)
class WorkerShare:
    """One worker's part of the target."""

    endpoint: str
    layers: int
    free: int  # bytes free when it was probed, before the load
    rtt_s: float  # the link's round-trip time, measured by the probe


@dataclass(frozen=True)
class TargetPlacement:
    """The target's layers: how many stay here and how many each worker holds."""

    local_layers: int
    workers: tuple[WorkerShare, ...]

    @property
    def total_layers(self) -> int:
        return self.local_layers + sum(w.layers for w in self.workers)

    @property
    def network_s(self) -> float:
        """The least each pass of the target waits on the network: one round
        trip per worker holding layers. llama.cpp sends a worker its inputs
        and graph without waiting, then reads the outputs back (and a split
        over two workers hands the activations on through this machine)."""
        return sum(w.rtt_s for w in self.workers if w.layers > 0)

    def describe(self) -> str:
        """``"Target: 16 layers here · 15 on 10.0.0.2:50052 (rtt 0.40 ms) ·
        network ≥ 0.40 ms per pass"``."""
        parts = [f"{counted(self.local_layers, 'layer')} here"]
        parts += [f"{w.layers} on {w.endpoint} (rtt {format_rtt(w.rtt_s)})" for w in self.workers]
        if self.network_s > 0:
            parts.append(f"network ≥ {format_rtt(self.network_s)} per pass")
        return "Target: " + " · ".join(parts)

    def as_dict(self) -> dict[str, object]:
        """For JSON reports."""
        return {
            "local_layers": self.local_layers,
            "total_layers": self.total_layers,
            "network_ms_per_pass": self.network_s * 1e3,
            "workers": [
                {
                    "endpoint": w.endpoint,
                    "layers": w.layers,
                    "free_bytes": w.free,
                    "rtt_ms": w.rtt_s * 1e3,
                }
                for w in self.workers
            ],
        }


def format_rtt(seconds: float) -> str:
    ms = seconds * 1e3
    return f"{ms:.2f} ms" if ms < 1 else f"{ms:.1f} ms"


def placement_for(
    n_layer: int, n_gpu_layers: int, workers: Sequence[WorkerInfo], host_free: int = 0
) -> TargetPlacement:
    """The placement llama.cpp will choose for these probed workers, given in
    the order the target's device list names them."""
    devices = [d for w in workers for d in w.devices]
    local, per_device = split_layers(n_layer, n_gpu_layers, devices, host_free)
    shares, i = [], 0
    for w in workers:
        n = len(w.devices)
        shares.append(WorkerShare(w.endpoint, sum(per_device[i : i + n]), w.free, w.rtt_s))
        i += n
    return TargetPlacement(local, tuple(shares))


def cost_curve(costs: CostModel) -> dict[int, float]:
    """t_target(k) / t_target(1) for every k the calibration or rounds measured."""
    t = costs.t_target
    if costs.t1 <= 0:
        return {}
    return {k: float(t[k] / costs.t1) for k in range(1, len(t)) if t[k] > 0}


def describe_costs(costs: CostModel) -> str:
    """``"Target pass: t(1) 12.3 ms · t(5)/t(1) 1.42"``; "" before anything was measured.

    A ratio near 1 is what makes speculation pay over a link: checking k
    tokens costs one round trip, like checking one."""
    if costs.t1 <= 0:
        return ""
    text = f"Target pass: t(1) {costs.t1 * 1e3:.1f} ms"
    curve = cost_curve(costs)
    k = max(curve)
    if k > 1:
        text += f" · t({k})/t(1) {curve[k]:.2f}"
    return text
