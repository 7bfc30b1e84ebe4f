"""Stopping the layer-skip search from the terminal, on real weights in real
processes: Ctrl-C and SIGTERM stop it at its next step with one line and the
signal's exit status, and its copies of the target are gone at once; a search
killed with SIGKILL leaves its copy behind, and the next search removes it.
The target is the short Q4_1 (conftest: SmolLM2's first 8 blocks): a whole
search, and each of its steps, in a fraction of the full model's time."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

WAIT_S = 240  # generous: a loaded machine; nothing here asserts on time
STOPPED = "gambit-cli: cancelled: the layer-skip search was stopped"


class Cli:
    """``gambit-cli`` in a child process, its temporary folder and data of its own."""

    def __init__(self, tmp_path: Path, *args: str | Path) -> None:
        self.scratch = tmp_path / "tmp"  # TMPDIR: where the search writes its copies
        self.scratch.mkdir(exist_ok=True)
        self.home = tmp_path / "home"
        env = {**os.environ, "GAMBIT_HOME": str(self.home), "TMPDIR": str(self.scratch)}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "gambit", *map(str, args)],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env,
        )  # fmt: skip
        self.lines: queue.Queue[str] = queue.Queue()
        self.err: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.err.append(line)
            self.lines.put(line)

    def wait_for_line(self, text: str) -> None:
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            try:
                if text in self.lines.get(timeout=1):
                    return
            except queue.Empty:
                assert self.proc.poll() is None, "".join(self.err)
        raise AssertionError(f"no {text!r} on stderr:\n{''.join(self.err)}")

    def wait_for_copy(self) -> Path:
        """A candidate copy of the target being written or measured (a file > 1 MB)."""
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            for f in self.scratch.glob("gambit-layerskip-*/*"):
                try:
                    if f.stat().st_size > 1 << 20:
                        return f
                except FileNotFoundError:
                    pass  # renamed or deleted between the listing and the look
            assert self.proc.poll() is None, "".join(self.err)
            time.sleep(0.05)
        raise AssertionError("the search wrote no copy")

    def finish(self, timeout: float = WAIT_S) -> tuple[int, str]:
        try:
            self.proc.wait(timeout=timeout)
        finally:
            self.proc.kill()
            self.proc.wait()
            self._reader.join(timeout=30)  # it ends at the end of stderr
            assert self.proc.stderr is not None
            self.proc.stderr.close()
        return self.proc.returncode, "".join(self.err)

    def leftovers(self) -> list[str]:
        """Files the search may have left: its scratch folders, partial drafts."""
        found = [p.name for p in self.scratch.iterdir()]
        models = self.home / "data" / "models"
        if models.is_dir():
            found += [p.name for p in models.iterdir() if p.name.endswith(".part")]
        return found


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_stops_the_search_and_removes_its_copies(
    tmp_path: Path, q4_1_first8: Path, sig: signal.Signals, code: int
) -> None:
    cli = Cli(tmp_path, "models", "layerskip", q4_1_first8, "--threads", "1")
    cli.wait_for_line("layerskip: measuring")
    cli.wait_for_copy()
    cli.proc.send_signal(sig)
    returncode, err = cli.finish(timeout=120)
    assert returncode == code, err
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1] == STOPPED
    assert cli.leftovers() == []
    assert not list((cli.home / "data" / "models").glob("*.layerskip.*"))  # no draft, no record


def test_ctrl_c_during_the_search_of_generate_layer_skip(tmp_path: Path, q4_1_first8: Path) -> None:
    """``generate --layer-skip`` used to hand Ctrl-C to the reply that had not
    started yet, so the search ran on regardless."""
    cli = Cli(
        tmp_path, "generate", "--target", q4_1_first8, "--layer-skip", "--threads", "1",
        "--ctx", "512", "Hi",
    )  # fmt: skip
    cli.wait_for_line("Finding layers to skip: measuring")
    cli.wait_for_copy()
    cli.proc.send_signal(signal.SIGINT)
    returncode, err = cli.finish(timeout=120)
    assert returncode == 130, err
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1] == STOPPED
    assert cli.leftovers() == []


def test_a_killed_search_s_copy_is_removed_by_the_next_search(
    tmp_path: Path, q4_1_first8: Path
) -> None:
    killed = Cli(tmp_path, "models", "layerskip", q4_1_first8, "--threads", "1")
    copy = killed.wait_for_copy()
    killed.proc.send_signal(signal.SIGKILL)  # nothing runs after this: the copy stays
    returncode, _ = killed.finish()
    assert returncode == -signal.SIGKILL
    stale = copy.parent
    assert stale.name.startswith(f"gambit-layerskip-{killed.proc.pid}-")
    assert stale.is_dir() and any(stale.iterdir())

    again = Cli(tmp_path, "models", "layerskip", q4_1_first8, "--threads", "1", "--max-evals", "1")
    returncode, err = again.finish()
    assert returncode == 0, err
    assert not stale.exists()
    assert again.leftovers() == []
