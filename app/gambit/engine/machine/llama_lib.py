"""llama.cpp's process-wide start: its log routed to Python logging, the backend
initialised once.

Apart from the runtime so that the modules the runtime imports (the kernel
probe, the device list) can start llama.cpp without importing the runtime.
"""

from __future__ import annotations

import ctypes
import logging
import threading

import llama_cpp as ll

log = logging.getLogger("gambit.llama")

# ggml.h: NONE 0, DEBUG 1, INFO 2, WARN 3, ERROR 4, CONT 5 (continues the last line)
_GGML_LEVELS = {1: logging.DEBUG, 2: logging.INFO, 3: logging.WARNING, 4: logging.ERROR}
_last_level = [logging.DEBUG]
_backend_lock = threading.Lock()
_backend_ready = False


@ll.llama_log_callback  # type: ignore[untyped-decorator]
def _route_llama_log(level: int, text: bytes, _user_data: ctypes.c_void_p) -> None:
    # llama.cpp prints a lot to stderr; send it to Python logging instead, where
    # the CLI keeps it quiet and the app writes it to its log file.
    if level != 5:
        _last_level[0] = _GGML_LEVELS.get(level, logging.DEBUG)
    message = text.decode("utf-8", "replace").rstrip("\n")
    if message:
        log.log(_last_level[0], "%s", message)


def ensure_backend() -> None:
    global _backend_ready
    with _backend_lock:
        if not _backend_ready:
            ll.llama_log_set(_route_llama_log, ctypes.c_void_p(0))
            ll.llama_backend_init()
            _backend_ready = True
