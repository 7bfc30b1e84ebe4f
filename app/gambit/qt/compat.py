"""Work around PySide6 6.12.0: its lost references to None, True and False, and
widgets it leaves owned by Python and by their Qt parent at once.

PySide6 6.12.0 (its ``cp310-abi3`` wheels) returns ``None`` from every method
without a result (``setText``, ``show``, ``QTimer.start``...) and ``True`` from
``SignalInstance.emit``/``disconnect`` without taking a reference to it: built
as if these objects were immortal, as they are from Python 3.12 (PEP 683). On
Python 3.10 and 3.11 they are not, so every such call drops a reference the
caller never got. A short reply costs ``None`` a few hundred; after a few dozen
replies more were lost than it has, and the interpreter frees it - "Fatal
Python error: none_dealloc" (or "bool_dealloc") - mostly while collecting
garbage at exit (6.11.2 keeps its references).

No wrapper could give back a reference for every method of every class, so
``install()`` does what Python 3.12 does: it measures whether the installed
binding loses references and, only then, gives ``None``, ``True`` and
``False`` a reference count no session can wear down. On a binding that keeps
its references, or on Python 3.12 and later, it changes nothing.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import sys
from collections.abc import Callable

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QWidget

log = logging.getLogger(__name__)

_PROBES = 16
# Far beyond what a process can lose (at a million calls a second, a 64-bit
# count lasts thousands of years) and far below an overflow on the way up.
IMMORTAL_SHARE = sys.maxsize // 4
_SINGLETONS = (None, True, False)
_installed = False


class _Probe(QObject):
    fired = Signal()


def references_lost(obj: object, call: Callable[[], object]) -> int:
    """How many references to ``obj`` ``_PROBES`` calls of ``call`` lose."""
    before = sys.getrefcount(obj)
    for _ in range(_PROBES):
        call()
    return max(0, before - sys.getrefcount(obj))


@functools.cache
def binding_loses_references() -> bool:
    """Whether this PySide6 returns None (from a method without a result) or
    True (from ``emit``) without a reference (measured, once)."""
    probe = _Probe()
    lost_none = references_lost(None, lambda: probe.setObjectName("probe"))
    lost_true = references_lost(True, probe.fired.emit)
    return max(lost_none, lost_true) >= _PROBES // 2


def _reference_count(obj: object) -> ctypes.c_ssize_t:
    """``obj``'s ``ob_refcnt`` field, where CPython keeps it (first in the object)."""
    return ctypes.c_ssize_t.from_address(id(obj))


def install() -> None:
    """Make None, True and False outlast any number of lost references if this
    PySide6 loses them (once; call it before starting other threads)."""
    global _installed
    if _installed:
        return
    _installed = True
    if not binding_loses_references():
        return
    if sys.implementation.name != "cpython" or sys.version_info >= (3, 12):
        return  # (immortal there already: a lost reference costs nothing)
    for obj in _SINGLETONS:
        count = _reference_count(obj)
        # Only where the field is where we read it: getrefcount adds its argument.
        if abs(count.value + 1 - sys.getrefcount(obj)) > 2:
            log.warning("cannot repair the reference count of %r: unknown object layout", obj)
            return
    for obj in _SINGLETONS:
        _reference_count(obj).value += IMMORTAL_SHARE


def give_to_qt_parents(root: QWidget) -> None:
    """Leave the widgets under ``root`` to their Qt parents alone.

    A widget added to a layout before that layout is nested in another one
    (``row.addWidget(b)``, then ``column.addLayout(row)`` or
    ``form.addRow(label, row)``) becomes a Qt child of the column's widget,
    but PySide6 6.12's ``addLayout`` glue no longer hands it over in the
    binding's own table: Python still owns it too. At exit PySide deletes what
    Python owns, and when that releases the last reference to an owner above
    the widget, the owner deletes the widget a second time ("QObject: shared
    QObject was deleted directly", then SIGSEGV). ``findChildren`` records
    every widget it returns as a child of ``root`` (PySide's rule for objects
    found), which leaves one owner: Qt. Call it once a widget tree is built.
    """
    root.findChildren(QWidget)
