"""This machine's ggml devices (CPU, GPUs) as the installed llama.cpp sees them.

One set of ctypes bindings to ggml's backend registry, for the memory
estimates (``gambit.models.memory``), the devices a worker serves and the RPC
backend (``gambit.engine.machine.rpc``).
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

from gambit.engine.machine.llama_lib import ensure_backend

# ggml-backend.h: enum ggml_backend_dev_type
_DEVICE_TYPE_CPU = 0
_DEVICE_TYPE_GPU = 1
_DEVICE_TYPE_IGPU = 2


@dataclass(frozen=True)
class DeviceMemory:
    free: int
    total: int


@dataclass(frozen=True)
class LocalDevice:
    """A device of this machine."""

    handle: int
    name: str  # llama.cpp's short name, e.g. "CUDA0"
    description: str  # e.g. the GPU's or CPU's model
    memory: DeviceMemory


class Ggml:
    """The few ggml backend functions Gambit calls, from the ggml library
    llama-cpp-python ships (the one llama.cpp itself uses)."""

    def __init__(self) -> None:
        from llama_cpp import _ggml

        lib = _ggml.libggml
        p = ctypes.c_void_p
        self.reg_by_name = lib.ggml_backend_reg_by_name
        self.reg_by_name.argtypes, self.reg_by_name.restype = [ctypes.c_char_p], p
        self.proc_address = lib.ggml_backend_reg_get_proc_address
        self.proc_address.argtypes, self.proc_address.restype = [p, ctypes.c_char_p], p
        self.reg_dev_count = lib.ggml_backend_reg_dev_count
        self.reg_dev_count.argtypes, self.reg_dev_count.restype = [p], ctypes.c_size_t
        self.reg_dev_get = lib.ggml_backend_reg_dev_get
        self.reg_dev_get.argtypes, self.reg_dev_get.restype = [p, ctypes.c_size_t], p
        self.dev_by_type = lib.ggml_backend_dev_by_type
        self.dev_by_type.argtypes, self.dev_by_type.restype = [ctypes.c_int], p
        self.dev_count = lib.ggml_backend_dev_count
        self.dev_count.argtypes, self.dev_count.restype = [], ctypes.c_size_t
        self.dev_get = lib.ggml_backend_dev_get
        self.dev_get.argtypes, self.dev_get.restype = [ctypes.c_size_t], p
        self.dev_type = lib.ggml_backend_dev_type
        self.dev_type.argtypes, self.dev_type.restype = [p], ctypes.c_int
        self.dev_name = lib.ggml_backend_dev_name
        self.dev_name.argtypes, self.dev_name.restype = [p], ctypes.c_char_p
        self.dev_description = lib.ggml_backend_dev_description
        self.dev_description.argtypes, self.dev_description.restype = [p], ctypes.c_char_p
        self.dev_memory = lib.ggml_backend_dev_memory
        self.dev_memory.argtypes = [
            p,
            ctypes.POINTER(ctypes.c_size_t),
            ctypes.POINTER(ctypes.c_size_t),
        ]
        self.dev_memory.restype = None


_ggml: Ggml | None = None


def ggml() -> Ggml:
    global _ggml
    if _ggml is None:
        _ggml = Ggml()
    return _ggml


def cpu_device() -> int:
    return int(ggml().dev_by_type(_DEVICE_TYPE_CPU))


def device_memory(device: int) -> DeviceMemory:
    free, total = ctypes.c_size_t(), ctypes.c_size_t()
    ggml().dev_memory(device, ctypes.byref(free), ctypes.byref(total))
    return DeviceMemory(free.value, total.value)


def _local(handle: int) -> LocalDevice:
    lib = ggml()
    name = (lib.dev_name(handle) or b"?").decode("utf-8", "replace")
    description = (lib.dev_description(handle) or b"?").decode("utf-8", "replace")
    return LocalDevice(handle, name, description, device_memory(handle))


def gpu_devices() -> list[LocalDevice]:
    """Each GPU (or integrated GPU) llama.cpp can use; empty on a CPU-only build."""
    ensure_backend()  # (backends built as loadable modules register here)
    lib = ggml()
    handles = [int(lib.dev_get(i)) for i in range(lib.dev_count())]
    gpu = (_DEVICE_TYPE_GPU, _DEVICE_TYPE_IGPU)
    return [_local(h) for h in handles if lib.dev_type(h) in gpu]


def served_devices() -> list[LocalDevice]:
    """What a worker serves: this machine's GPUs when llama.cpp was built with
    one (CUDA, Metal, Vulkan: the layers run where the worker's memory is
    fastest), else its CPU."""
    return gpu_devices() or [_local(cpu_device())]
