"""How the default model's preparation is described while it runs, and stopped."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import pytest

from gambit.errors import OperationCancelledError
from gambit.fsutil import NO_COUNTS
from gambit.models.default_model import _run_pip, describe_progress


def test_stages_with_byte_counts_show_a_percentage() -> None:
    assert describe_progress("extracting", 0, 200) == "extracting 0%"
    assert describe_progress("extracting", 50, 200) == "extracting 25%"
    assert describe_progress("verifying", 0, 0) == "verifying 100%"


def test_a_download_without_byte_counts_says_so_instead_of_a_stuck_zero() -> None:
    text = describe_progress("downloading", 0, NO_COUNTS)
    assert text == "downloading (no progress reported)…"
    assert "0%" not in text


def test_a_cancel_during_the_download_stops_pip_at_its_next_poll(tmp_path: Path) -> None:
    """Issue 35: a Cancel (a progress that raises) stops the fetch where it is,
    and no pip is left running. The stand-in for pip is a real child process
    that would run for ten minutes; it is gone when the call returns."""
    pid_file = tmp_path / "pid"
    cmd = [
        sys.executable, "-c",
        f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(600)",
    ]  # fmt: skip
    heard: list[str] = []

    def progress(stage: str, _done: int, _total: int) -> None:
        heard.append(stage)
        if pid_file.exists() and pid_file.read_text():
            raise OperationCancelledError("cancelled")

    with tempfile.TemporaryFile("w+") as said, pytest.raises(OperationCancelledError):
        _run_pip(cmd, said, progress)
    assert heard and set(heard) == {"downloading"}
    pid = int(pid_file.read_text())
    with pytest.raises(ProcessLookupError):  # killed and reaped: no such process
        os.kill(pid, 0)


def test_pip_that_ends_gives_its_exit_status_and_output(tmp_path: Path) -> None:
    cmd = [sys.executable, "-c", "import sys; print('no such package'); sys.exit(3)"]
    with tempfile.TemporaryFile("w+") as said:
        assert _run_pip(cmd, said, lambda *_: None) == 3
        said.seek(0)
        assert said.read().strip() == "no such package"
