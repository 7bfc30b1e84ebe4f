"""Scratch folders and partial files named by their process: what a killed
process left is removed by the next job; a running process's files never are."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from gambit.cli.stop_signals import StopSignals
from gambit.fsutil import owner_gone, remove_stale, scratch_dir

PREFIX = "gambit-test-"


def _reaped() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_owner_gone() -> None:
    assert not owner_gone(os.getpid())
    assert not owner_gone(os.getppid())
    assert owner_gone(_reaped())


def test_a_dead_process_s_folder_goes_a_live_one_s_stays(tmp_path: Path) -> None:
    dead = tmp_path / f"{PREFIX}{_reaped()}-abc123"
    (dead / "sub").mkdir(parents=True)
    (dead / "candidate.gguf").write_bytes(b"x" * 4096)
    (dead / "sub" / "part").write_bytes(b"y")
    live = tmp_path / f"{PREFIX}{os.getppid()}-def456"
    live.mkdir()
    (live / "candidate.gguf").write_bytes(b"z")
    other = tmp_path / "gambit-other-1-x"  # another prefix: not ours to touch
    other.mkdir()
    with scratch_dir(PREFIX, tmp_path) as mine:
        assert not dead.exists()
        assert live.exists() and (live / "candidate.gguf").exists()
        assert other.exists()
        assert Path(mine).parent == tmp_path
        assert re.fullmatch(rf"{PREFIX}{os.getpid()}-.+", Path(mine).name)
        (Path(mine) / "candidate.gguf").write_bytes(b"w")
    assert not Path(mine).exists()  # gone with the with block
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([live.name, other.name])


def test_partial_files_of_dead_writers(tmp_path: Path) -> None:
    pattern = re.compile(r"\.draft\.gguf\.(?P<pid>\d+)-[0-9a-f]{8}\.part")
    dead = tmp_path / f".draft.gguf.{_reaped()}-0badc0de.part"
    mine = tmp_path / f".draft.gguf.{os.getpid()}-12345678.part"
    unrelated = tmp_path / "draft.gguf"
    for p in (dead, mine, unrelated):
        p.write_bytes(b"data")
    assert remove_stale(tmp_path, pattern) == [dead]
    assert not dead.exists() and mine.exists() and unrelated.exists()
    assert remove_stale(tmp_path / "missing", pattern) == []


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_stop_signals_set_the_event_and_restore(sig: signal.Signals, code: int) -> None:
    before = signal.getsignal(sig)
    cancel = threading.Event()
    with StopSignals(cancel) as stop:
        os.kill(os.getpid(), sig)  # handled at the next bytecode, in this (main) thread
        assert cancel.wait(5)
        assert stop.signum == sig and stop.exit_code == code
    assert signal.getsignal(sig) is before
