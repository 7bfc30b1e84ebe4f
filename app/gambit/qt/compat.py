"""Work around a reference-counting bug in PySide6 6.12.0.

In PySide6 6.12.0, ``SignalInstance.emit()`` and ``SignalInstance.disconnect()``
return ``True`` without taking a reference to it, so every call made from
Python drops one reference to ``True`` (6.11.2 does not). ``True`` is then
freed while still in use - "Fatal Python error: bool_dealloc" - after a few
thousand emits (the worker emits once per decoding round), or at interpreter
exit, once more were leaked than ``True`` has references never released.

``install()`` measures whether the installed binding has the bug and, only
then, wraps both methods to take the reference the binding left out. On a
fixed binding it changes nothing.
"""

from __future__ import annotations

import ctypes
import sys
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QObject, Signal, SignalInstance

_PROBES = 16
_installed = False
_py_incref = ctypes.pythonapi.Py_IncRef
_py_incref.argtypes = [ctypes.py_object]
_py_incref.restype = None


class _Probe(QObject):
    signal = Signal()


def _references_lost(call: Callable[[], object]) -> int:
    """How many references to ``True`` ``_PROBES`` calls of ``call`` lose."""
    before = sys.getrefcount(True)
    for _ in range(_PROBES):
        call()
    return max(0, before - sys.getrefcount(True))


def _take_missing_reference(name: str) -> None:
    method: Callable[..., Any] = getattr(SignalInstance, name)

    def wrapper(self: SignalInstance, *args: Any, **kwargs: Any) -> Any:
        result = method(self, *args, **kwargs)
        if result is True or result is False:
            _py_incref(result)  # the reference the binding returned without owning
        return result

    wrapper.__name__ = name
    wrapper.__doc__ = method.__doc__
    setattr(SignalInstance, name, wrapper)


def install() -> None:
    """Repair ``SignalInstance.emit``/``disconnect`` if this PySide6 needs it (once)."""
    global _installed
    if _installed:
        return
    _installed = True
    probe = _Probe()

    def slot() -> None:
        pass

    def reconnect() -> None:
        probe.signal.connect(slot)
        probe.signal.disconnect(slot)

    for name, call in (("emit", probe.signal.emit), ("disconnect", reconnect)):
        lost = _references_lost(call)
        for _ in range(lost):  # give back what the probe itself lost
            _py_incref(True)
        if lost >= _PROBES // 2:
            _take_missing_reference(name)
