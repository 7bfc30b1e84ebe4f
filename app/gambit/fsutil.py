"""File-system helpers of long file jobs, below every layer that uses them.

Deriving a draft, writing a layer-skip file and downloading a model all report
``Progress``, check the free space first (``check_disk_space``) and may leave
scratch files behind. They live here, not in ``models/``, so that
``gambit.formats`` (which writes layer-skip files) imports nothing above it.

Scratch files, which a killed process cannot leave behind for good: a job that
writes large temporary files (the layer-skip search copies the target once per
candidate) names them with its process id. Ctrl-C and SIGTERM stop the job, and
its ``finally`` blocks remove them at once; SIGKILL cannot be caught, so the
next job of the same kind removes whatever a process that no longer exists left
behind. Files of a running process are never touched.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import re
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gambit.errors import GambitError

log = logging.getLogger(__name__)

# psutil ships no type hints; imported this way, mypy needs no stubs package.
psutil: Any = importlib.import_module("psutil")

PRIVATE_DIR_MODE = 0o700

# (stage, bytes done, bytes total); a total of NO_COUNTS: the stage runs, with no
# byte counts to report.
Progress = Callable[[str, int, int], None]
NO_COUNTS = -1


def check_disk_space(folder: Path, needed: int, what: str = "the new model") -> None:
    """Raise ``GambitError`` unless ``folder``'s file system has ``needed`` bytes free."""
    probe = folder
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    free = shutil.disk_usage(probe).free
    if free < needed:
        raise GambitError(
            f"not enough disk space for {what}: it needs about {needed / 1e6:,.0f} MB, "
            f"and {free / 1e6:,.0f} MB are free in {probe}. Free some space or choose "
            "another destination."
        )


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


def make_private_dirs(path: Path) -> None:
    """Create the folder ``path`` and any missing parents, each open to this
    user only (0700). Folders that exist already are left as they are (they
    may be the user's own). Raises ``OSError``."""
    missing: list[Path] = []
    for folder in (path, *path.parents):
        if folder.is_dir():
            break
        missing.append(folder)
    for folder in reversed(missing):
        with contextlib.suppress(FileExistsError):  # made meanwhile by another process
            folder.mkdir(mode=PRIVATE_DIR_MODE)
    if not path.is_dir():
        path.mkdir()  # raises the telling error: a file in the way, ...


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to a temporary file in ``path``'s folder, then rename it
    over ``path``. Creates the folder. The file is private (mkstemp's 0600).
    Raises ``OSError`` on failure, leaving no temporary file behind."""
    make_private_dirs(path.parent)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as f:
            f.write(text)
            f.flush()
            # On disk before the rename: otherwise a power cut can leave the
            # renamed file empty on some file systems (ext4, APFS).
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
