"""What the installed llama.cpp can run on here: CPU features and the GPUs that exist."""

from __future__ import annotations

from dataclasses import dataclass

import llama_cpp as ll

from gambit.engine.machine.devices import gpu_devices
from gambit.engine.machine.llama_lib import ensure_backend
from gambit.engine.machine.threads import default_threads
from gambit.words import counted


@dataclass(frozen=True)
class BackendInfo:
    # Whether layers can go to a GPU of this machine: one exists and llama.cpp
    # was built for it. (llama.cpp's own "supports GPU offload" is true for any
    # build with a remote backend, RPC included, on a machine without a GPU.)
    gpu_offload: bool
    cpu_features: tuple[str, ...]  # e.g. ("AVX2", "FMA", "F16C")
    system_info: str  # llama.cpp's own one-line summary
    threads: int
    devices: tuple[str, ...] = ()  # the GPUs: "CUDA0 (NVIDIA H200)"

    @property
    def summary(self) -> str:
        accel = "GPU: " + ", ".join(self.devices) if self.devices else "CPU only (no GPU found)"
        feats = ", ".join(self.cpu_features[:4])
        return f"{accel} · {counted(self.threads, 'thread')}" + (f" · {feats}" if feats else "")


def detect_backend() -> BackendInfo:
    ensure_backend()
    raw = ll.llama_print_system_info()
    info = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
    # llama.cpp prints "CPU : SSE3 = 1 | AVX = 1 | AVX2 = 1 | ..."
    wanted = ("AVX512", "AVX2", "AVX", "FMA", "F16C", "NEON", "ARM_FMA", "SVE", "AMX")
    present = [name for name in wanted if f"{name} = 1" in info]
    gpus = tuple(f"{d.name} ({d.description})" for d in gpu_devices())
    return BackendInfo(
        gpu_offload=bool(gpus),
        cpu_features=tuple(present),
        system_info=info.strip(),
        threads=default_threads(),
        devices=gpus,
    )
