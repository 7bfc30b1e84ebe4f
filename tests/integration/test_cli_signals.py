"""``gambit-cli`` ends cleanly when stopped: Ctrl-C during bench exits 130 with
one line, and a closed stdout (``| head``) ends it quietly; never a traceback."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

FAST = ["--threads", "1", "--ctx", "256"]


def _start(*args: str | Path, home: Path, **kwargs: object) -> subprocess.Popen[str]:
    env = {**os.environ, "GAMBIT_HOME": str(home)}
    return subprocess.Popen(
        [sys.executable, "-m", "gambit", *map(str, args)],
        stderr=subprocess.PIPE, text=True, env=env, **kwargs,  # type: ignore[call-overload]
    )  # fmt: skip


def test_ctrl_c_during_bench(tmp_path: Path, smol_q4_1: Path) -> None:
    prompts = tmp_path / "prompts.jsonl"
    lines = [json.dumps({"prompt": f"Tell a long story number {i}."}) for i in range(50)]
    prompts.write_text("\n".join(lines) + "\n")
    proc = _start(
        "bench", "--target", smol_q4_1, "--prompts", prompts, *FAST, "--max-tokens", "32",
        home=tmp_path, stdout=subprocess.PIPE,
    )  # fmt: skip
    said: list[str] = []
    deadline = threading.Timer(180, proc.kill)  # a bench that never gets going fails
    deadline.start()
    try:
        # Ctrl-C once the first reply is measured: the bench is under way,
        # with 49 prompts to go.
        assert proc.stderr is not None
        for line in proc.stderr:
            said.append(line)
            if line.lstrip().startswith("[1/50]"):
                break
        deadline.cancel()
        assert proc.poll() is None, "".join(said)
        proc.send_signal(signal.SIGINT)
        _, rest = proc.communicate(timeout=60)
    finally:
        deadline.cancel()
        proc.kill()
        proc.communicate()  # reap it and close its pipes, whatever happened
    err = "".join(said) + rest
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1] == "gambit-cli: interrupted"


def test_closed_stdout_ends_quietly(tmp_path: Path, smol_q4_1: Path) -> None:
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first word
    try:
        proc = _start(
            "generate", "--target", smol_q4_1, *FAST, "--max-tokens", "16", "Say hello",
            home=tmp_path, stdout=write_end,
        )  # fmt: skip
    finally:
        os.close(write_end)
    _, err = proc.communicate(timeout=180)
    assert proc.returncode == 141, err
    assert "Traceback" not in err and "BrokenPipeError" not in err
