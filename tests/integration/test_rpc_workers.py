"""Targets split over real ``gambit-worker`` processes on 127.0.0.1 (llama.cpp RPC).

The workers are real processes serving this machine's CPU; the target loads in
Gambit's child process (``HostedRuntime``) and places its layers on them.
"""

from __future__ import annotations

import os
import signal
import socket
import struct
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from gambit.engine.machine import rpc, target_host
from gambit.engine.machine.kernels import EXACT
from gambit.engine.machine.runtime import RuntimeOptions
from gambit.engine.machine.target_host import HostedRuntime, WorkerLostError
from gambit.engine.session import Engine, EngineConfig
from gambit.engine.text.reply import GenerationConfig, Round
from gambit.engine.verification.sampling import SamplingParams
from gambit.errors import ModelLoadError
from gambit.models.derive import requantize
from worker_process import WorkerProcess, free_port, workers

PROMPT = "Here is a numbered list of twenty fruits, one per line:\n1."
GREEDY = GenerationConfig(max_tokens=40, sampling=SamplingParams(temperature=0.0))


def _engine(target: Path, draft: Path, *, speculate: bool, **target_options: object) -> Engine:
    config = EngineConfig(
        target=target,
        drafter="draft",
        draft=draft,
        # Kernels named: no kernel probe (a minute per file and layer count).
        target_options=RuntimeOptions(n_ctx=1024, n_threads=2, kernels=EXACT, **target_options),  # type: ignore[arg-type]
        draft_options=RuntimeOptions(n_ctx=1024, n_threads=2, kernels=EXACT),
        policy="fixed",
        gamma=4,
    )
    engine = Engine(config)
    engine.set_speculation(speculate)
    return engine


def _text(engine: Engine, config: GenerationConfig = GREEDY) -> str:
    try:
        return "".join(r.text for r in engine.complete(PROMPT, config))
    finally:
        engine.close()


@pytest.fixture(scope="module")
def local_text(smol_f16: Path, smol_q4_1: Path) -> str:
    return _text(_engine(smol_f16, smol_q4_1, speculate=False))


@pytest.mark.parametrize("speculate", [False, True], ids=["plain", "speculative"])
def test_a_target_split_over_two_workers_writes_the_local_tokens(
    tmp_path: Path, smol_f16: Path, smol_q4_1: Path, local_text: str, speculate: bool
) -> None:
    with workers(tmp_path, 2) as (w1, w2):
        engine = _engine(
            smol_f16, smol_q4_1, speculate=speculate, rpc_workers=(w1.endpoint, w2.endpoint)
        )
        assert isinstance(engine.target, HostedRuntime)
        assert _text(engine) == local_text
    assert local_text.strip()


def test_a_target_split_between_this_machine_and_one_worker(
    tmp_path: Path, smol_f16: Path, smol_q4_1: Path, local_text: str
) -> None:
    with workers(tmp_path, 1) as (w1,):
        engine = _engine(
            smol_f16, smol_q4_1, speculate=True, rpc_workers=(w1.endpoint,), n_gpu_layers=15
        )
        assert _text(engine) == local_text


def _rounds_until_lost(
    engine: Engine, cancel: threading.Event | None, after_first: object
) -> tuple[list[Round], WorkerLostError]:
    config = GenerationConfig(max_tokens=400, sampling=SamplingParams(temperature=0.0))
    kept: list[Round] = []
    rounds: Iterator[Round] = engine.complete(PROMPT, config, cancel)
    with pytest.raises(WorkerLostError) as lost:
        for r in rounds:
            kept.append(r)
            if len(kept) == 1:
                after_first()  # type: ignore[operator]
    return kept, lost.value


def test_a_worker_killed_mid_reply_is_a_message_naming_it(
    tmp_path: Path, smol_f16: Path, smol_q4_1: Path, local_text: str
) -> None:
    with workers(tmp_path, 2) as (w1, w2):
        engine = _engine(
            smol_f16, smol_q4_1, speculate=True, rpc_workers=(w1.endpoint, w2.endpoint)
        )
        try:
            kept, lost = _rounds_until_lost(engine, None, w2.kill)
            assert kept and kept[0].text  # the reply so far stays with the caller
            assert w2.endpoint in str(lost) and w1.endpoint not in str(lost)
            assert "reply so far is kept" in str(lost)
            with pytest.raises(WorkerLostError):  # the engine says so again, never hangs
                engine.target.decode([1])
        finally:
            engine.close()
        # This process is intact: the same models load and run here.
        assert _text(_engine(smol_f16, smol_q4_1, speculate=True)) == local_text


def test_stop_while_a_worker_hangs_ends_the_reply(
    tmp_path: Path, smol_f16: Path, smol_q4_1: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A stopped worker never answers, so the grace after Stop always runs out:
    # a short one ends the reply the same way, sooner.
    monkeypatch.setattr(target_host, "STOP_GRACE_S", 0.5)
    with workers(tmp_path, 1) as (w1,):
        engine = _engine(smol_f16, smol_q4_1, speculate=False, rpc_workers=(w1.endpoint,))
        cancel = threading.Event()

        def pause_then_stop() -> None:
            os.kill(w1.proc.pid, signal.SIGSTOP)  # alive, connected, silent
            # Stop lands while the next round waits on the worker.
            threading.Timer(1.0, cancel.set).start()

        try:
            kept, lost = _rounds_until_lost(engine, cancel, pause_then_stop)
            assert kept
            assert "of Stop" in str(lost)
        finally:
            engine.close()


def _serve_once(reply: bytes, done: threading.Event) -> str:
    """A fake server on a free port that reads a HELLO, answers ``reply``
    (nothing: it stays silent) and holds the connection until ``done``."""
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]

    def run() -> None:
        with server:
            conn, _ = server.accept()
            with conn:
                conn.recv(64)
                conn.sendall(reply)
                done.wait(10)

    threading.Thread(target=run, daemon=True).start()
    return f"127.0.0.1:{port}"


def test_probe_says_what_is_wrong_with_a_worker() -> None:
    port = free_port()
    with pytest.raises(rpc.RpcWorkerError, match="connection refused"):
        rpc.probe(f"127.0.0.1:{port}")
    done = threading.Event()
    try:
        old = struct.pack("<Q", 28) + bytes([6, 0, 0, 0]) + bytes(24)
        with pytest.raises(rpc.RpcWorkerError, match=r"protocol 6\.0\.0.*same Gambit version"):
            rpc.probe(_serve_once(old, done))
        with pytest.raises(rpc.RpcWorkerError, match="not a Gambit worker"):
            rpc.probe(_serve_once(b"HTTP/1.1 400 Bad Request\r\n\r\n", done))
        with pytest.raises(rpc.RpcWorkerError, match="busy serving another Gambit"):
            rpc.probe(_serve_once(b"", done), timeout=0.5)  # accepts, never answers
    finally:
        done.set()


def test_a_busy_worker_is_said_before_llama_cpp_connects(
    tmp_path: Path, smol_f16: Path, smol_q4_1: Path
) -> None:
    with workers(tmp_path, 1) as (w1,):
        first = _engine(smol_f16, smol_q4_1, speculate=False, rpc_workers=(w1.endpoint,))
        try:
            with pytest.raises(rpc.RpcWorkerError, match=f"{w1.endpoint}.*busy"):
                _engine(smol_f16, smol_q4_1, speculate=False, rpc_workers=(w1.endpoint,))
        finally:
            first.close()
        # Closing the first target ends its connection: the worker is free again.
        assert rpc.probe(w1.endpoint).total > 0


def test_endpoints_are_checked() -> None:
    assert rpc.parse_endpoints(" 10.0.0.2:50052, 10.0.0.2:50052 ,host") == (
        "10.0.0.2:50052", "host:50052",
    )  # fmt: skip
    for bad in ("", "a b:1", "host:0", "host:70000", "host:port"):
        with pytest.raises(Exception, match="not a worker address"):
            rpc.parse_endpoint(bad)


def test_gambit_worker_says_where_it_listens_and_refuses_a_taken_port(tmp_path: Path) -> None:
    with workers(tmp_path, 1) as (w1,):
        out = w1.log.read_text()
        assert f"listening on {w1.endpoint}" in out and "GiB free" in out
        taken = subprocess.run(
            [sys.executable, "-m", "gambit.cli.worker", "--port", str(w1.port)],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert taken.returncode == 2
        assert f"cannot listen on 127.0.0.1:{w1.port}" in taken.stderr
    bad = subprocess.run(
        [sys.executable, "-m", "gambit.cli.worker", "--port", "99999"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert bad.returncode == 2 and "must be a port" in bad.stderr


def test_on_a_quantized_split_speculation_writes_the_splits_own_tokens(
    tmp_path: Path, smol_q8_0: Path, smol_q4_1: Path
) -> None:
    # The worker runs llama.cpp's default CPU kernels, which may round a
    # quantized model differently from the kernels chosen here: compare the
    # split with itself, speculation off and on (lossless is about that).
    with workers(tmp_path, 1) as (w1,):
        texts = [
            _text(_engine(smol_q8_0, smol_q4_1, speculate=s, rpc_workers=(w1.endpoint,)))
            for s in (False, True)
        ]
    assert texts[0].strip() and texts[0] == texts[1]


def test_a_worker_without_the_memory_for_its_layers_is_said(
    tmp_path: Path, smol_q4_1: Path
) -> None:
    if not rpc.supported():
        pytest.skip(rpc.NO_RPC_MESSAGE)
    f32 = smol_q4_1.with_name("SmolLM2-135M-Instruct.F32.gguf")
    if not f32.is_file():
        f32 = requantize(smol_q4_1, tmp_path / "f32.gguf", "F32")
    # 700 MB of address space: the worker starts, the F32 weights (513 MB) do not fit.
    small = WorkerProcess(tmp_path, memory_limit=700 * 1024**2)
    try:
        with pytest.raises(ModelLoadError) as refused:
            _engine(f32, smol_q4_1, speculate=False, rpc_workers=(small.endpoint,))
        text = str(refused.value)
        assert small.endpoint in text and "lack the memory" in text
        assert rpc.probe(small.endpoint).total > 0  # the worker itself carries on
    finally:
        small.stop()
