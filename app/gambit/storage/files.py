"""Files Gambit keeps for itself: written so that a reader sees the old content
or the new, never part; private to the user (chats, settings and logs that
quote them are nobody else's business); and set aside, not lost, when damaged.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import stat
from pathlib import Path

PRIVATE_FILE_MODE = 0o600


def touch_private(path: Path) -> None:
    """Make sure the file ``path`` exists and is open to this user only: created
    empty as 0600 if missing; an existing one (Gambit's own: its database, its
    logs) loses any group and other permissions. Raises ``OSError``."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE_MODE)
    except FileExistsError:
        mode = stat.S_IMODE(os.stat(path).st_mode)
        if mode & 0o077:
            with contextlib.suppress(OSError):  # not ours to change (another owner)
                os.chmod(path, mode & 0o700)
    else:
        os.close(fd)


def move_aside(path: Path, now: dt.datetime | None = None) -> Path:
    """Rename a damaged file to ``<name>.corrupt-YYYYmmdd-HHMMSS`` next to it
    (``-2``, ``-3``, ... added if that is taken), so that it can be looked at
    and the next save starts afresh. Returns the new path; raises ``OSError``."""
    stamp = f"{now or dt.datetime.now():%Y%m%d-%H%M%S}"
    aside = path.with_name(f"{path.name}.corrupt-{stamp}")
    n = 1
    while aside.exists():
        n += 1
        aside = path.with_name(f"{path.name}.corrupt-{stamp}-{n}")
    os.replace(path, aside)
    return aside


def set_aside(path: Path) -> str:
    """``move_aside``, and the words for the user: where the damaged file went,
    or why it stayed."""
    try:
        aside = move_aside(path)
    except OSError as exc:
        return f"it could not be moved aside ({exc.strerror or exc})"
    return f"it was kept as {aside.name}"
