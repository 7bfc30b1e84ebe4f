"""What the installed llama.cpp can run on: CPU features, GPU offload, devices."""

from __future__ import annotations

from dataclasses import dataclass

import llama_cpp as ll

from gambit.engine.runtime import default_threads, ensure_backend


@dataclass(frozen=True)
class BackendInfo:
    gpu_offload: bool  # built with CUDA, Metal, Vulkan, ...
    cpu_features: tuple[str, ...]  # e.g. ("AVX2", "FMA", "F16C")
    system_info: str  # llama.cpp's own one-line summary
    threads: int

    @property
    def summary(self) -> str:
        accel = "GPU offload available" if self.gpu_offload else "CPU only"
        feats = ", ".join(self.cpu_features[:4])
        return f"{accel} · {self.threads} threads" + (f" · {feats}" if feats else "")


def detect_backend() -> BackendInfo:
    ensure_backend()
    raw = ll.llama_print_system_info()
    info = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
    # llama.cpp prints "CPU : SSE3 = 1 | AVX = 1 | AVX2 = 1 | ..."
    wanted = ("AVX512", "AVX2", "AVX", "FMA", "F16C", "NEON", "ARM_FMA", "SVE", "AMX")
    present = [name for name in wanted if f"{name} = 1" in info]
    return BackendInfo(
        gpu_offload=bool(ll.llama_supports_gpu_offload()),
        cpu_features=tuple(present),
        system_info=info.strip(),
        threads=default_threads(),
    )
