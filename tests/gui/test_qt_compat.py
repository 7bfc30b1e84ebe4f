"""Signals keep Python's reference counts right, whichever PySide6 is installed.

PySide6 6.12.0's emit() and disconnect() each lose a reference to True; a few
thousand emits later the interpreter aborts ("bool_dealloc"). gambit.qt.compat
repairs that; the app installs it at start-up, the GUI tests' conftest before
any test runs.
"""

from __future__ import annotations

import sys

from PySide6.QtCore import QObject, Signal

from gambit.qt import compat


def setup_module() -> None:
    compat.install()  # as the app's start-up does (the conftest did already: a no-op)


class _Emitter(QObject):
    value = Signal(object)


def _true_references_lost(call: object, n: int = 200) -> int:
    assert callable(call)
    before = sys.getrefcount(True)
    for _ in range(n):
        call()
    return before - sys.getrefcount(True)


def test_emit_keeps_the_reference_count_of_true() -> None:
    emitter = _Emitter()
    received: list[object] = []
    assert _true_references_lost(lambda: emitter.value.emit(1)) == 0
    emitter.value.connect(received.append)
    assert _true_references_lost(lambda: emitter.value.emit(2)) == 0
    assert received == [2] * 200


def test_disconnect_keeps_the_reference_count_of_true() -> None:
    emitter = _Emitter()

    def slot(_value: object) -> None:
        pass

    def reconnect() -> None:
        emitter.value.connect(slot)
        emitter.value.disconnect(slot)

    assert _true_references_lost(reconnect) == 0
