"""Stopping the layer-skip search, on real weights: from the terminal, in real
processes, Ctrl-C and SIGTERM stop it at its next step with one line and the
signal's exit status, and its copies of the target are gone at once; a search
killed with SIGKILL leaves its copy behind, and the next search removes it.
In process, a cancel stops its reference text and its verification cost at
their next token or decode (counted, not timed).
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
from collections.abc import Iterator
from pathlib import Path

import pytest

from gambit.engine.gamma.calibration import calibrate
from gambit.engine.machine.runtime import ModelRuntime, RuntimeOptions
from gambit.formats.layerskip_file import LayerSkipCancelledError
from gambit.models.layerskip import CALIBRATION_PROMPTS, CALIBRATION_TOKENS, search_layer_skip
from gambit.models.layerskip_search import references

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


# -- Cancel stops the search at its next step (issue 35) ----------------------------------
# A search on a large model sat at "generating reference text — 0 %" for two
# minutes, and took as long again to stop after Cancel: the reference text and
# the verification cost were each one step of minutes. Counted here in the
# target's decodes, on the real runtime: no clock.


class CountingRuntime(ModelRuntime):
    """The real runtime, counting its decodes (the work a search does)."""

    decodes = 0

    def decode(self, tokens: list[int], *, all_logits: bool = False, n_logits: int = 0) -> int:
        self.decodes += 1
        return super().decode(tokens, all_logits=all_logits, n_logits=n_logits)


@pytest.fixture
def counting(q4_1_first8: Path) -> Iterator[CountingRuntime]:
    with CountingRuntime(q4_1_first8, RuntimeOptions(n_ctx=1024, n_threads=1)) as rt:
        yield rt


def test_the_reference_text_stops_at_its_next_token_and_counts_its_tokens(
    counting: CountingRuntime,
) -> None:
    stop_after = 6  # decodes: the prompt, then 5 tokens of the first text's 48
    reports: list[tuple[str, int, int]] = []
    with pytest.raises(LayerSkipCancelledError):
        references(
            counting, CALIBRATION_PROMPTS, CALIBRATION_TOKENS,
            lambda stage, done, total: reports.append((stage, done, total)),
            lambda: counting.decodes >= stop_after,
        )  # fmt: skip
    assert counting.decodes <= stop_after + 1  # its next step, not the text's end (48)
    # The progress moved token by token, out of every text's tokens.
    total = len(CALIBRATION_PROMPTS) * CALIBRATION_TOKENS
    done = [d for _, d, t in reports if t == total]
    assert done == sorted(done) and done[-1] >= stop_after - 1, reports


def test_the_verification_cost_stops_at_its_next_decode(counting: CountingRuntime) -> None:
    steps: list[tuple[int, int]] = []

    def step(done: int, total: int) -> None:
        steps.append((done, total))
        if done >= 3:
            raise LayerSkipCancelledError("cancelled")

    with pytest.raises(LayerSkipCancelledError):
        calibrate(counting, None, 17, repeats=10, step=step)
    assert steps == [(1, 50), (2, 50), (3, 50)]  # 5 batch sizes x 10: stopped at the 3rd
    assert counting.decodes == 1 + 3  # the filler, then three timed batches
    assert counting.kv_tokens == []  # left empty, as a finished calibration leaves it


def test_cancel_during_the_search_s_reference_text_stops_it_there(q4_1_first8: Path) -> None:
    """The whole search, stopped while it writes the reference text: it says
    what it is doing, token by token, and the next step is its last."""
    reports: list[tuple[str, int, int]] = []
    stop = threading.Event()

    def progress(stage: str, done: int, total: int) -> None:
        reports.append((stage, done, total))
        if stage == "generating reference text" and done >= 3:
            stop.set()  # as the window's Cancel does, mid-text

    with pytest.raises(LayerSkipCancelledError):
        search_layer_skip(
            q4_1_first8, options=RuntimeOptions(n_threads=1), progress=progress, cancel=stop
        )
    assert {stage for stage, _, _ in reports} == {"generating reference text"}
    _, done, total = reports[-1]
    assert total == len(CALIBRATION_PROMPTS) * CALIBRATION_TOKENS  # it counts tokens
    assert done <= 4  # the token after the one at which it was stopped, at most
