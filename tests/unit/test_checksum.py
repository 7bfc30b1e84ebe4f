"""SHA-256 checks of fetched files: streamed, and a mismatch deletes the file."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from gambit.errors import GambitError
from gambit.models.checksum import ChecksumError, file_sha256, is_sha256, verify_sha256


def _file(tmp_path: Path, size: int = 3 * (1 << 20) + 17) -> tuple[Path, str]:
    data = bytes(range(256)) * (size // 256) + b"x" * (size % 256)
    path = tmp_path / "model.gguf"
    path.write_bytes(data)
    return path, hashlib.sha256(data).hexdigest()


def test_the_right_hash_keeps_the_file_and_reports_progress(tmp_path: Path) -> None:
    path, digest = _file(tmp_path)
    seen: list[tuple[str, int, int]] = []
    verify_sha256(path, digest, lambda *a: seen.append(a))
    assert path.exists()
    size = path.stat().st_size
    assert {s for s, _, _ in seen} == {"verifying model.gguf"}
    done = [d for _, d, _ in seen]
    assert len(done) == 4 and done == sorted(done) and done[-1] == size  # 1 MiB at a time
    assert all(t == size for _, _, t in seen)
    assert file_sha256(path) == digest


def test_a_wrong_hash_refuses_and_deletes_the_file(tmp_path: Path) -> None:
    path, digest = _file(tmp_path)
    wrong = digest[::-1]
    with pytest.raises(ChecksumError) as info:
        verify_sha256(path, wrong, source="from a/b at revision 0123456789ab")
    assert isinstance(info.value, GambitError)  # shown as a message, never a traceback
    message = str(info.value)
    assert message.startswith("model.gguf from a/b at revision 0123456789ab failed its SHA-256")
    assert f"expected {wrong[:12]}…, got {digest[:12]}…" in message
    assert "was deleted" in message
    assert not path.exists()


def test_only_a_real_digest_is_accepted(tmp_path: Path) -> None:
    path, _ = _file(tmp_path, 10)
    assert is_sha256("0" * 64) and not is_sha256("0" * 63) and not is_sha256("G" * 64)
    with pytest.raises(ValueError, match="not a SHA-256"):
        verify_sha256(path, "abc")
    assert path.exists()  # a bad expectation deletes nothing
