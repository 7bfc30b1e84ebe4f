"""Scratch files of long jobs, which a killed process cannot leave behind for good.

A job that writes large temporary files (the layer-skip search copies the
target once per candidate) names them with its process id. Ctrl-C and SIGTERM
stop the job, and its ``finally`` blocks remove them at once; SIGKILL cannot
be caught, so the next job of the same kind removes whatever a process that
no longer exists left behind. Files of a running process are never touched.
"""

from __future__ import annotations

import importlib
import logging
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

# psutil ships no type hints; imported this way, mypy needs no stubs package.
psutil: Any = importlib.import_module("psutil")


def owner_gone(pid: int) -> bool:
    """No process ``pid`` exists (this one always does). A reused pid keeps the
    files: leaving a stale file is harmless, deleting a live job's is not."""
    return pid != os.getpid() and not psutil.pid_exists(pid)


def remove_stale(folder: Path, pattern: re.Pattern[str]) -> list[Path]:
    """Remove the entries of ``folder`` whose name matches ``pattern`` (with a
    ``pid`` group) and whose process is gone; return what was removed."""
    try:
        entries = list(folder.iterdir())
    except OSError:
        return []
    removed = []
    for entry in entries:
        m = pattern.fullmatch(entry.name)
        if m is None or not owner_gone(int(m.group("pid"))):
            continue
        try:
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
        except OSError as exc:
            log.warning("could not remove %s, left by an earlier run: %s", entry, exc)
            continue
        log.info("removed %s, left by process %s (no longer running)", entry, m.group("pid"))
        removed.append(entry)
    return removed


def scratch_dir(
    prefix: str, parent: str | os.PathLike[str] | None = None
) -> tempfile.TemporaryDirectory[str]:
    """A new folder ``<prefix><pid>-<random>`` in ``parent`` (the system's
    temporary folder by default), removed when the ``with`` block ends; first
    the folders that processes no longer running left there are removed."""
    where = Path(parent) if parent is not None else Path(tempfile.gettempdir())
    remove_stale(where, re.compile(re.escape(prefix) + r"(?P<pid>\d+)-.+"))
    return tempfile.TemporaryDirectory(prefix=f"{prefix}{os.getpid()}-", dir=where)
