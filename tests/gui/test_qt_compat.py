"""A session may call Qt more often than None, True and False have references.

PySide6 6.12.0 hands out None (from every method without a result) and True
(from emit() and disconnect()) without the reference it owes the caller, as if
they were immortal, which they are only from Python 3.12. On 3.10 and 3.11 each
such call wears their reference count down, and once it reaches zero the
interpreter aborts ("none_dealloc", "bool_dealloc"). gambit.qt.compat repairs
that; the app installs it at start-up, the GUI tests' conftest before any test
runs.
"""

from __future__ import annotations

import subprocess
import sys

from PySide6.QtCore import QObject, Signal

from gambit.qt import compat

# In a fresh interpreter: more void calls than None has references and more
# emits than True has, then a garbage collection (where the abort came at exit).
DRAIN = """
import gc, sys
from PySide6.QtCore import QObject, Signal
n_none, n_true = 3 * sys.getrefcount(None), 3 * sys.getrefcount(True)
if sys.argv[1] == "repaired":
    from gambit.qt import compat
    compat.install()

class Emitter(QObject):
    fired = Signal()

emitter = Emitter()
for _ in range(n_none):
    emitter.setObjectName("x")  # returns None
for _ in range(n_true):
    emitter.fired.emit()  # returns True
gc.collect()
print("survived")
"""


def _drain(mode: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", DRAIN, mode], capture_output=True, text=True, timeout=120
    )


def test_more_calls_than_references_do_not_free_none_or_true() -> None:
    proc = _drain("repaired")
    assert "Fatal Python error" not in proc.stderr, proc.stderr
    assert proc.returncode == 0 and proc.stdout.strip() == "survived", proc.stderr


def test_without_the_repair_the_same_calls_abort_where_the_binding_loses_references() -> None:
    # So the test above drains for real here (on a binding that keeps its
    # references the calls are harmless and the repair does nothing).
    proc = _drain("bare")
    assert (proc.returncode != 0) == compat.binding_loses_references(), proc.stderr[-2000:]
    if proc.returncode != 0:
        assert "Fatal Python error" in proc.stderr and "_dealloc" in proc.stderr


class _Emitter(QObject):
    value = Signal(object)


def test_signals_still_deliver_after_the_repair() -> None:
    compat.install()  # as the app's start-up does (the conftest did already: a no-op)
    emitter = _Emitter()
    received: list[object] = []
    emitter.value.connect(received.append)
    for i in range(200):
        emitter.value.emit(i)
    emitter.value.disconnect(received.append)
    emitter.value.emit(-1)
    assert received == list(range(200))
