"""Measuring on stored chats with the real engine: SmolLM2 Q8_0 target and the
Q4_1 file as its draft, a real conversation database under tmp_path; and
``gambit-cli bench --from-history`` as a user runs it."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from gambit.bench.measure import (
    MeasureConfig,
    MeasurementCancelledError,
    MeasureProgress,
    plan,
    run_measurement,
)
from gambit.engine.machine.runtime import RuntimeOptions
from gambit.engine.session import Engine, EngineConfig
from gambit.engine.text.chat import Message
from gambit.engine.text.reply import GenerationConfig
from gambit.engine.verification.sampling import SamplingParams
from gambit.storage import measurements
from gambit.storage.chat_store.conversations import ConversationStore
from gambit.storage.paths import cache_dir
from gambit.storage.prompts.history_turns import read_turns
from gambit.storage.settings import Settings

# Both cores: the suite runs one test at a time, and no assertion here reads a clock.
OPTIONS = RuntimeOptions(n_ctx=1024, n_threads=2)


def make_history(path: Path) -> Path:
    with ConversationStore(path) as store:
        code = store.create("Parser")
        store.add_message(code, "user", "Write a Python function that adds two numbers.")
        store.add_message(code, "assistant", "def add(a, b):\n    return a + b")
        store.add_message(code, "user", "Rename add to plus and show the whole function again.")
        chat = store.create("Weekend")
        store.add_message(chat, "user", "Name three things to do on a rainy Sunday.")
    return path


@pytest.fixture(scope="module")
def engine(q8_0_first8: Path, q4_1_first8: Path) -> Iterator[Engine]:
    # The short pair (conftest: SmolLM2's first 8 blocks): every replay of a
    # measurement at a fraction of the full pair's cost.
    e = Engine(
        EngineConfig(
            target=q8_0_first8,
            drafter="draft",
            draft=q4_1_first8,
            target_options=OPTIONS,
            kernel_cache=cache_dir(),  # the tests' shared probe verdicts (GAMBIT_CACHE)
        )
    )
    yield e
    e.close()


def _reply(engine: Engine) -> str:
    config = GenerationConfig(max_tokens=12, sampling=SamplingParams(temperature=0.0))
    return "".join(r.text for r in engine.chat([Message("user", "Say hello")], config))


def test_measurement_on_stored_turns(engine: Engine, tmp_path: Path) -> None:
    db = make_history(tmp_path / "conversations.sqlite3")
    digest = hashlib.sha256(db.read_bytes()).hexdigest()
    turns = read_turns(db, last=20)
    configs, notes = plan(engine, ["lookup", "draft", "layerskip"], ["adaptive", "fixed=17"], True)
    assert configs == [MeasureConfig("lookup"), MeasureConfig("draft")]
    assert any("layer skip left out" in n for n in notes)
    assert any("fixed=17 left out" in n for n in notes)
    assert any("trees left out" in n for n in notes)

    before = _reply(engine)
    seen: list[MeasureProgress] = []
    report = run_measurement(engine, turns, configs, max_tokens=8, progress=seen.append)
    # 3 turns x 4 replays (target-only twice: its spread is the noise), after timing
    assert [p.done for p in seen] == list(range(13))
    assert seen[-1].total == 12 and seen[-1].eta_s == 0.0
    assert report["turns"] == 3 and report["skipped_turns"] == 0
    assert report["identical_outputs"] == "6/6"  # Q8_0: speculation changes no token
    all_modes = report["suites"]["ALL"]
    assert list(all_modes) == ["target-only", "lookup adaptive", "draft adaptive"]
    assert all_modes["target-only"]["speedup"] == 1.0
    assert report["noise"] >= 0.0  # (a spread of timings: no bound a busy machine cannot break)
    assert report["busy"]["of"] == 12
    for mode in ("lookup adaptive", "draft adaptive"):
        f = all_modes[mode]
        # A speedup is claimed only where a draft was accepted.
        assert (f["speedup"] is None) == (f["accepted_tokens"] == 0)
        assert f["speedup"] is None or f["speedup"] > 0
        assert 0.0 <= f["acceptance_rate"] <= 1.0
        assert f["divergence_rate"] == 0.0
        assert f["p50_ms"] <= f["p99_ms"] and f["ttft_ms"] > 0
        assert f["tokens_per_round"] >= 1.0
    assert {c["title"] for c in report["conversations"]} == {"Parser", "Weekend"}
    parser = next(c for c in report["conversations"] if c["title"] == "Parser")
    assert parser["turns"] == 2 and parser["kind"] == "code"
    assert set(report["suites"]) >= {"code", "ALL"}
    assert report["regime"]["name"] in ("compute-bound", "bandwidth-bound")
    assert "t(5)/t(1)" in report["regime"]["sentence"]
    assert report["models"]["target"]["file"] == engine.config.target.name
    assert report["models"]["target"]["size"] == engine.config.target.stat().st_size
    assert report["machine"]["threads"] == 2
    assert report["recommendation"]["headline"]
    # the engine is left as a fresh load leaves it: the same reply as before
    assert _reply(engine) == before
    assert hashlib.sha256(db.read_bytes()).hexdigest() == digest


def test_cancel_stops_the_measurement_and_leaves_the_engine_usable(
    engine: Engine, tmp_path: Path
) -> None:
    turns = read_turns(make_history(tmp_path / "c.sqlite3"))
    before = _reply(engine)
    cancel = threading.Event()

    def progress(p: MeasureProgress) -> None:
        if p.done == 2:
            cancel.set()  # the next replay must not run to its end

    with pytest.raises(MeasurementCancelledError) as info:
        run_measurement(
            engine, turns, [MeasureConfig("draft")], max_tokens=64, cancel=cancel,
            progress=progress,
        )  # fmt: skip
    assert info.value.done == 2 and info.value.total == 9
    assert "cancelled after 2 of 9 replays; nothing was saved" in str(info.value)

    # set while a reply decodes: it stops within that reply, at a round's end
    cancel = threading.Event()
    timer = threading.Timer(1.0, cancel.set)
    timer.start()
    with pytest.raises(MeasurementCancelledError) as info:
        run_measurement(engine, turns * 20, [MeasureConfig("lookup")], max_tokens=200,
                        cancel=cancel)  # fmt: skip
    timer.join()
    assert info.value.done < info.value.total
    assert _reply(engine) == before


def _cli(home: Path, *args: str | Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GAMBIT_HOME": str(home)}
    return subprocess.run(
        [sys.executable, "-m", "gambit", "bench", *map(str, args)],
        capture_output=True, text=True, env=env, timeout=300, check=False,
    )  # fmt: skip


def test_cli_bench_from_history(tmp_path: Path, q8_0_first8: Path, q4_1_first8: Path) -> None:
    home = tmp_path / "home"
    db = make_history(home / "data" / "conversations.sqlite3")
    digest = hashlib.sha256(db.read_bytes()).hexdigest()
    common = ["--target", q8_0_first8, "--threads", "2", "--ctx", "512", "--max-tokens", "8"]
    proc = _cli(home, "--from-history", "--last", "2", *common, "--draft", q4_1_first8)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    header = next(line for line in out.splitlines() if line.startswith("suite"))
    assert "speedup" in header and "tok/s" in header  # bench's table
    rows = [line for line in out.splitlines() if line.startswith("ALL ")]
    modes = ["target-only", "lookup adaptive", "lookup fixed=4", "draft adaptive", "draft fixed=4"]
    assert len(rows) == len(modes)
    assert all(f" {mode} " in row for mode, row in zip(modes, rows, strict=True))
    assert "greedy outputs identical with and without speculation: 8/8" in out
    assert "t(5)/t(1)" in out and "Recommendation: " in out
    assert "[8/12]" in proc.stderr and "left" in proc.stderr  # progress on stderr
    saved = list((home / "data" / "measurements").glob("measure-*.json"))
    assert len(saved) == 1 and f"saved to {saved[0]}" in proc.stderr
    report = json.loads(saved[0].read_text(encoding="utf-8"))
    assert report["turns"] == 2 and report["history"]["last"] == 2
    assert hashlib.sha256(db.read_bytes()).hexdigest() == digest

    proc = _cli(home, "--from-history", "--last", "1", *common, "--json")  # no draft: lookup only
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert [m["name"] for m in report["modes"]] == [
        "target-only", "lookup adaptive", "lookup fixed=4",
    ]  # fmt: skip
    assert report["turns"] == 1 and report["schema"] == "gambit-bench/2"
    assert len(list((home / "data" / "measurements").glob("measure-*.json"))) == 2


def test_cli_from_history_without_history_says_so(tmp_path: Path, smol_q8_0: Path) -> None:
    proc = _cli(tmp_path, "--from-history", "--target", smol_q8_0, "--threads", "2")
    assert proc.returncode == 2
    assert proc.stderr.startswith("gambit-cli: error: There is no chat history"), proc.stderr
    assert "Traceback" not in proc.stderr


def test_trees_are_measured_when_the_target_is_loaded_for_them(
    tmp_path: Path, smol_q8_0: Path
) -> None:
    turns = read_turns(make_history(tmp_path / "t.sqlite3"), last=1)
    config = EngineConfig(
        target=smol_q8_0, drafter="lookup", target_options=OPTIONS, tree=True, tree_nodes=4,
        kernel_cache=cache_dir(),
    )  # fmt: skip
    with_trees = Engine(config)
    try:
        configs, notes = plan(with_trees, ["lookup"], ["adaptive"], trees=True)
        assert [c.name for c in configs] == ["lookup adaptive", "tree lookup adaptive"]
        assert notes == []
        report = run_measurement(with_trees, turns, configs, max_tokens=8)
    finally:
        with_trees.close()
    assert list(report["suites"]["ALL"]) == ["target-only", *(c.name for c in configs)]
    assert report["tree_nodes"] == 4
    tree = next(m for m in report["modes"] if m["tree"])
    assert (tree["label"], tree["policy"]) == ("prompt lookup tree, adaptive", "adaptive")


BUSY_LOOP = "import time\nwhile True:\n    time.time()\n"


def test_a_busy_machine_is_named_and_no_gain_is_credited_without_evidence(
    smol_q8_0: Path, smol_q4_1: Path, tmp_path: Path
) -> None:
    """Another program keeps a core busy for the whole measurement: every
    replay says so, nothing that had no draft accepted claims a speedup, and a
    recommendation needs a gain beyond what plain decoding itself varied by."""
    turns = read_turns(make_history(tmp_path / "busy.sqlite3"))
    configs = [MeasureConfig("lookup"), MeasureConfig("draft", "fixed=8")]
    # One thread each: the busy program holds the other core (two threads would
    # wait on each other at every barrier, and the test would only be slower).
    one_core = RuntimeOptions(n_ctx=1024, n_threads=1)
    busy = subprocess.Popen([sys.executable, "-c", BUSY_LOOP])
    try:
        engine = Engine(
            EngineConfig(
                target=smol_q8_0, drafter="draft", draft=smol_q4_1,
                target_options=one_core, kernel_cache=cache_dir(),
            )
        )  # fmt: skip
        try:
            # Replies long enough for the meter to judge on a fast CPU too (a
            # span under SPAN_MIN_S says nothing: 8 tokens took ~0.2 s on one,
            # and 24 took 0.21-0.25 s on an AVX-512 EPYC, where 8 of 12 were
            # too short to judge).
            report = run_measurement(engine, turns, configs, max_tokens=64)
        finally:
            engine.close()
    finally:
        busy.kill()
        busy.wait(timeout=30)
    # 3 turns x 4 replays; how many the scheduler lets the meter see busy varies
    # (7 of 12 seen once, on a 2-core CI machine): most of them
    assert report["busy"]["of"] == 12 and report["busy"]["replays"] >= 6
    assert report["busy"]["other_cores"] >= 0.5
    all_modes = report["suites"]["ALL"]
    for conv in report["conversations"]:
        for f in conv["modes"].values():
            assert f["accepted_tokens"] or f["speedup"] in (None, 1.0)
    rec = report["recommendation"]
    if rec["mode"] is not None:
        chosen = all_modes[rec["mode"]]
        assert chosen["accepted_tokens"] > 0
        assert chosen["speedup"] - 1.0 > report["noise"]
        assert "busy during" in rec["reason"]
    else:
        assert rec["off"] and rec["headline"] in (
            "Speculation off",
            "Not enough evidence yet: measure more turns",
        )


def test_candidate_drafts_of_the_library_are_compared_and_one_is_applied_only_beyond_noise(
    engine: Engine, tmp_path: Path, q4_1_first8: Path, smol_q4_1: Path, gemma_q4_k_m: Path
) -> None:
    """Which draft pays on my chats: the library's other drafts replay next to
    the loaded one, each loaded for the measurement with its own costs; one
    of another tokenizer drafts through text. The recommendation names a
    draft only where its gain clears plain decoding's own spread."""
    turns = read_turns(make_history(tmp_path / "drafts.sqlite3"))
    drafts = [str(q4_1_first8), str(smol_q4_1), str(gemma_q4_k_m)]
    configs, _ = plan(engine, [], ["adaptive"], False, drafts=drafts)
    # The loaded draft is the draft model; the others are candidates.
    assert [c.draft for c in configs] == [None, str(smol_q4_1), str(gemma_q4_k_m)]
    report = run_measurement(engine, turns, configs, max_tokens=8)
    all_modes = report["suites"]["ALL"]
    gemma_mode = f"draft adaptive: {gemma_q4_k_m.name}"
    assert set(all_modes) == {
        "target-only", "draft adaptive", f"draft adaptive: {smol_q4_1.name}", gemma_mode,
    }  # fmt: skip
    # A Gemma step costs ~8 of this short target's: the policy never drafts
    # with it, so it claims nothing and cannot be recommended.
    assert all_modes[gemma_mode]["speedup"] is None
    assert all_modes[gemma_mode]["divergence_rate"] == 0.0
    assert next(m for m in report["modes"] if m["name"] == gemma_mode)["draft"] == str(gemma_q4_k_m)
    rec = report["recommendation"]
    assert rec["mode"] != gemma_mode
    if rec["off"]:
        assert rec["mode"] is None
    else:
        assert all_modes[rec["mode"]]["speedup"] - 1.0 > report["noise"]
        chosen = next(m for m in report["modes"] if m["name"] == rec["mode"])
        assert rec["draft_model"] == chosen["draft"]
        applied = measurements.recommended_settings(Settings(), report)
        assert applied.drafter == "draft"
        assert applied.draft_model == (chosen["draft"] or str(engine.config.draft))
    # The engine's own drafter and costs are untouched; the candidates unload with it.
    assert engine.draft_runtime is not None and engine.draft_runtime.path == q4_1_first8
