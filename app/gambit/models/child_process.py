"""Starting helper processes that run exactly the tool meant.

``python -m pip`` looks the module up through the working directory first: a
``pip/`` (or ``gambit/``) folder where the user happens to start Gambit would
run instead. Children start with ``-I`` (isolated: no working directory, no
``PYTHON*`` variables, no user site), and a frozen bundle, whose
``sys.executable`` is the app itself, starts itself with an internal flag
(``gambit.ui.app.main`` dispatches it, so that nothing here imports what it
starts).

A child started for a parent (the quantizer) ends when the parent is gone,
even after a kill -9 of the parent: ``exit_with_parent`` watches the parent's
process id from a thread, as the child's main thread is busy in C code.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable

# internal flags of a frozen bundle -> the module they run
BUNDLE_FLAGS = {
    "--gambit-derive": "gambit.models.derive",
    "--gambit-pip": "pip",
}
PARENT_POLL_S = 0.5
PARENT_PID_VAR = "GAMBIT_PARENT_PID"


def module_command(module: str) -> list[str]:
    """The command that runs ``python -m module`` of this very installation."""
    if getattr(sys, "frozen", False):
        flag = next(f for f, m in BUNDLE_FLAGS.items() if m == module)
        return [sys.executable, flag]
    return [sys.executable, "-I", "-m", module]


def child_env() -> dict[str, str]:
    """The environment of a child that ``exit_with_parent`` watches over."""
    return {**os.environ, PARENT_PID_VAR: str(os.getpid())}


def exit_with_parent(cleanup: Callable[[], None] | None = None) -> None:
    """End this process (after ``cleanup``) as soon as its parent is gone."""
    parent = int(os.environ.get(PARENT_PID_VAR) or os.getppid())

    def watch() -> None:
        while os.getppid() == parent:  # once re-parented, the parent has died
            threading.Event().wait(PARENT_POLL_S)
        try:
            if cleanup is not None:
                cleanup()
        finally:
            os._exit(3)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()
