"""``gambit-cli generate --rpc``: the target's layers on a real ``gambit-worker``
on 127.0.0.1, the CLI as a user runs it (a subprocess, real SmolLM2 weights)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_cli import FAST, gambit

from worker_process import WorkerProcess, free_port, workers

GREEDY = [*FAST, "--temp", "0", "--max-tokens", "16", "Name three fruits."]


@pytest.fixture(scope="module")
def worker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorkerProcess]:
    with workers(tmp_path_factory.mktemp("workers"), 1) as started:
        yield started[0]


def _reply(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    return proc.stdout


@pytest.mark.parametrize(
    "drafting",
    [[], ["--lookup", "--policy", "fixed"]],
    ids=["target only", "prompt lookup"],
)
def test_generate_through_a_worker_gives_the_local_greedy_text(
    tmp_path: Path, smol_f16: Path, worker: WorkerProcess, drafting: list[str]
) -> None:
    # (F16, as the engine's RPC tests use: a Q4_1 target gave a different greedy
    # reply through the worker than here, whose kernels the probe picks; F16 agrees)
    args = ["generate", "--target", smol_f16, *drafting, *GREEDY]
    local = _reply(gambit(*args, home=tmp_path))
    remote = _reply(gambit(*args, "--rpc", worker.endpoint, home=tmp_path))
    assert local.strip()
    assert remote == local
    # and with only some of the layers there (the rest here)
    split = gambit(*args, "--rpc", worker.endpoint, "--worker-layers", "12", home=tmp_path)
    assert _reply(split) == local


def test_bench_through_a_worker_reports_the_split_and_the_pass_cost(
    tmp_path: Path, smol_q4_1: Path, worker: WorkerProcess
) -> None:
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"prompt": "Name three fruits.", "suite": "a"}) + "\n")
    args = ["bench", "--target", smol_q4_1, "--lookup", "--policy", "adaptive", *FAST,
            "--prompts", prompts, "--max-tokens", "16", "--rpc", worker.endpoint,
            "--worker-layers", "12"]  # fmt: skip
    report = json.loads(_reply(gambit(*args, "--json", home=tmp_path)))
    # SmolLM2-135M: 30 blocks and the output layer; the last 12 on the worker
    assert report["placement"]["local_layers"] == 19
    ((share,),) = (report["placement"]["workers"],)
    assert share["endpoint"] == worker.endpoint and share["layers"] == 12 and share["rtt_ms"] > 0
    assert report["cost_curve"]["t1_ms"] > 0 and report["cost_curve"]["ratio"]["1"] == 1.0
    table = _reply(gambit(*args, home=tmp_path))
    assert f"Target: 19 layers here · 12 on {worker.endpoint} (rtt " in table
    assert "target pass: t(1) " in table


@pytest.mark.parametrize("bad", ["lan box:1", "host:port", "127.0.0.1:70000"])
def test_a_bad_address_exits_2_with_one_line(tmp_path: Path, bad: str) -> None:
    proc = gambit("generate", "--rpc", f"127.0.0.1:50052,{bad}", "hi", home=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        f"gambit-cli: error: '{bad}' is not a worker address: write host:port, "
        "e.g. 127.0.0.1:50052."
    ]


def test_an_unreachable_worker_exits_with_the_probes_message(tmp_path: Path) -> None:
    nobody = f"127.0.0.1:{free_port()}"
    proc = gambit("bench", "--rpc", nobody, "--prompts", tmp_path / "none.jsonl", home=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        f"gambit-cli: error: No worker answers at {nobody} (connection refused): start "
        "`gambit-worker` on that machine, or check the address and port."
    ]
    generate = gambit("generate", "--rpc", nobody, "hi", home=tmp_path)
    assert (generate.returncode, generate.stderr) == (proc.returncode, proc.stderr)


def test_worker_layers_must_be_a_count(tmp_path: Path) -> None:
    proc = gambit("generate", "--rpc", "127.0.0.1:1", "--worker-layers", "-2", "hi", home=tmp_path)
    assert proc.returncode == 2
    assert "--worker-layers: must be 0 (all) or more, not -2" in proc.stderr
