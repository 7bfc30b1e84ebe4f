"""SHA-256 checks of model files fetched from elsewhere (the catalog, the default model).

A download is only as trustworthy as the hash it is checked against: the
catalog and the default model record one per file, and a file that does not
match is deleted at once, so nothing unchecked is ever listed or loaded.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from pathlib import Path

from gambit.errors import GambitError

# (stage, bytes done, bytes total), as gambit.models.default_model.Progress
Progress = Callable[[str, int, int], None]

_CHUNK = 1 << 20
_SHA256 = re.compile(r"[0-9a-f]{64}")


class ChecksumError(GambitError):
    """A file is not the one whose SHA-256 was recorded; it has been deleted."""


def is_sha256(text: str) -> bool:
    return _SHA256.fullmatch(text) is not None


def file_sha256(path: Path, progress: Progress | None = None, stage: str = "verifying") -> str:
    """The file's SHA-256, read in 1 MiB chunks (never whole into memory)."""
    total = path.stat().st_size
    digest = hashlib.sha256()
    done = 0
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
            done += len(chunk)
            if progress is not None:
                progress(stage, done, total)
    return digest.hexdigest()


def verify_sha256(
    path: Path, expected: str, progress: Progress | None = None, source: str = ""
) -> None:
    """Raise ``ChecksumError`` and delete ``path`` unless its SHA-256 is ``expected``.

    ``source`` says where the file came from, for the message ("from
    bartowski/…-GGUF at revision 1a2b3c4")."""
    if not is_sha256(expected):
        raise ValueError(f"not a SHA-256 digest: {expected!r}")
    actual = file_sha256(path, progress, f"verifying {path.name}")
    if actual == expected:
        return
    path.unlink(missing_ok=True)
    where = f" {source}" if source else ""
    raise ChecksumError(
        f"{path.name}{where} failed its SHA-256 check (expected {expected[:12]}…, got "
        f"{actual[:12]}…) and was deleted: it is not the file Gambit has on record. The "
        "transfer may have been corrupted (try again), or the file was changed at its source."
    )
