"""The engine worker on its own thread, with the real engine and the small real model.

Requests go in through queued signals, as the main window sends them; the
layer-skip search itself (about a minute) is replaced by a stand-in that
writes a real layer-skip draft with a fixed set of blocks.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import psutil
import pytest
from PySide6.QtCore import QObject, Signal
from pytestqt.qtbot import QtBot

from gambit.engine.machine.kernels import KernelProbe
from gambit.engine.machine.runtime import RuntimeOptions
from gambit.engine.session import EngineConfig
from gambit.engine.text.chat import Message
from gambit.engine.text.reply import GenerationConfig, StopReason
from gambit.engine.verification.sampling import SamplingParams
from gambit.formats import layerskip_file
from gambit.models import layerskip
from gambit.qt.reply_stream import ReplyResult
from gambit.qt.worker import EngineInfo, EngineRequest, WorkerThread
from gambit.storage.chat_store.conversations import ConversationStore
from gambit.storage.history_memory import HistoryMemory
from gambit.storage.settings import Settings

LOAD_TIMEOUT_MS = 120_000
REPLY_TIMEOUT_MS = 120_000
OPTIONS = RuntimeOptions(n_ctx=1024, n_threads=2)
GREEDY = GenerationConfig(max_tokens=32, sampling=SamplingParams(temperature=0.0))
COPY_PROMPT = [
    Message(
        "user",
        "Repeat this sentence twice, exactly: The quick brown fox jumps over the lazy dog.",
    )
]


HAIKU = [Message("user", "Write a haiku about autumn leaves.")]


class Requests(QObject):
    """Queued requests to the worker thread, like the main window's."""

    load = Signal(object, object)
    generate = Signal(object, object)
    forget = Signal(object)


@pytest.fixture
def worker(qtbot: QtBot) -> Iterator[tuple[WorkerThread, Requests]]:
    thread = WorkerThread()
    requests = Requests()
    requests.load.connect(thread.worker.load)
    requests.generate.connect(thread.worker.generate)
    yield thread, requests
    assert thread.stop(timeout_ms=30_000)


# Signals from the worker thread are collected with list.append (a direct call
# on that thread) and waited for with waitUntil, as test_main_window does:
# qtbot.waitSignal would stop its timer from the worker thread.


def _load(qtbot: QtBot, worker: tuple[WorkerThread, Requests], what: Any) -> EngineInfo:
    thread, requests = worker
    outcomes: list[Any] = []
    thread.worker.loaded.connect(outcomes.append)
    thread.worker.load_failed.connect(outcomes.append)
    requests.load.emit(what, None)
    qtbot.waitUntil(lambda: bool(outcomes), timeout=LOAD_TIMEOUT_MS)
    [info] = outcomes
    assert isinstance(info, EngineInfo), info
    return info


def _reply(
    qtbot: QtBot, worker: tuple[WorkerThread, Requests], messages: list[Message] = COPY_PROMPT
) -> tuple[ReplyResult, list[Any]]:
    thread, requests = worker
    deltas: list[Any] = []
    outcomes: list[Any] = []
    thread.worker.delta.connect(deltas.append)
    thread.worker.finished.connect(outcomes.append)
    thread.worker.failed.connect(lambda message, _partial: outcomes.append(message))
    requests.generate.emit(messages, GREEDY)
    qtbot.waitUntil(lambda: bool(outcomes), timeout=REPLY_TIMEOUT_MS)
    [result] = outcomes
    assert isinstance(result, ReplyResult), result
    return result, deltas


def test_lookup_tree_engine_streams_a_reply(
    qtbot: QtBot, worker: tuple[WorkerThread, Requests], smol_q4_1: Path
) -> None:
    config = EngineConfig(
        target=smol_q4_1, drafter="lookup", tree=True, tree_nodes=4, target_options=OPTIONS
    )
    info = _load(qtbot, worker, config)
    assert (info.drafter, info.drafter_label) == ("lookup", "prompt lookup")
    assert info.drafter_detail == "tree, up to 4 nodes"
    assert info.draft_name is None

    result, deltas = _reply(qtbot, worker)
    assert result.stop in (StopReason.EOG.value, StopReason.MAX_TOKENS.value)
    assert result.text.strip()
    assert deltas and "".join(d.text for d in deltas) == result.text
    assert len(result.drafted) == len(result.text)
    assert result.speculation
    snapshot = result.snapshot
    assert snapshot.tree is True
    assert snapshot.n_tokens > 0
    assert 0 <= snapshot.side_nodes <= 3  # within the 4-node budget, next to a chain of γ ≥ 1
    assert all(0.0 <= a <= 1.0 for a in snapshot.acceptance_by_position)


@pytest.fixture
def fake_search(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> list[tuple[Path, RuntimeOptions | None]]:
    """Stand in for the search: report two steps, then write a real layer-skip
    draft that skips blocks 10 and 20 (seconds, where the search takes a minute)."""
    calls: list[tuple[Path, RuntimeOptions | None]] = []

    def ensure(target: Path, *, progress: Any = None, cancel: Any = None,
               options: RuntimeOptions | None = None, **_: Any) -> SimpleNamespace:  # fmt: skip
        calls.append((target, options))
        progress("measuring block 7 of 30", 7, 30)
        progress("writing the draft", 30, 30)
        assert cancel is not None and not cancel.is_set()
        path = layerskip_file.write_layer_skip_model(target, tmp_path / "skip.gguf", (10, 20))
        pays = SimpleNamespace(refusal=lambda: None)  # a plan worth drafting with
        return SimpleNamespace(path=path, from_cache=False, plan=pays)

    monkeypatch.setattr(layerskip, "ensure_layer_skip_draft", ensure)
    return calls


def test_layer_skip_request_finds_the_draft_then_loads(
    qtbot: QtBot,
    worker: tuple[WorkerThread, Requests],
    smol_q4_1: Path,
    fake_search: list[tuple[Path, RuntimeOptions | None]],
) -> None:
    thread, _ = worker
    progress: list[str] = []
    thread.worker.load_progress.connect(progress.append)
    settings = Settings(
        target_model=str(smol_q4_1), drafter="layerskip", context_size=1024, threads=2
    )
    request = EngineRequest(
        target=settings.target_path(),
        make_config=settings.engine_config,
        drafter="layerskip",
        options=settings.target_options(),
    )
    info = _load(qtbot, worker, request)

    assert fake_search == [(smol_q4_1, settings.target_options())]
    assert progress[:3] == [
        "Finding layers to skip in SmolLM2-135M-Instruct.Q4_1.gguf…",
        "Finding layers to skip: measuring block 7 of 30 — 23%",
        "Finding layers to skip: writing the draft — 100%",
    ]
    # Then the engine says what its load does: the models, and the first timing of the pair.
    loading = progress[3:]
    assert "Loading SmolLM2-135M-Instruct.Q4_1.gguf…" in loading
    assert any(line.startswith("Loading the draft ") for line in loading)
    assert info.drafter == "layerskip"
    assert info.draft_name is None  # the draft is the target itself, less two blocks
    assert info.drafter_detail == "skips blocks 10, 20 of 30 · chain"

    result, _ = _reply(qtbot, worker)
    assert result.text.strip()
    assert result.snapshot.tree is False


def test_layer_skip_search_stops_on_cancel_and_on_close(
    qtbot: QtBot, monkeypatch: pytest.MonkeyPatch, smol_q4_1: Path
) -> None:
    started = threading.Event()

    def ensure(target: Path, *, progress: Any = None, cancel: Any = None, **_: Any) -> Any:
        progress("measuring block 1 of 30", 1, 40)
        started.set()
        while not cancel.is_set():  # a search that would never end on its own
            cancel.wait(0.01)
        raise layerskip_file.LayerSkipCancelledError("cancelled: the layer-skip search was stopped")

    monkeypatch.setattr(layerskip, "ensure_layer_skip_draft", ensure)
    settings = Settings(target_model=str(smol_q4_1), drafter="layerskip")
    request = EngineRequest(settings.target_path(), settings.engine_config, drafter="layerskip")

    thread = WorkerThread()
    requests = Requests()
    requests.load.connect(thread.worker.load)
    outcomes: list[Any] = []
    thread.worker.loaded.connect(outcomes.append)
    thread.worker.load_failed.connect(outcomes.append)
    try:
        requests.load.emit(request, None)
        assert started.wait(10)
        thread.worker.cancel()  # from this (the UI) thread, as the window would
        qtbot.waitUntil(lambda: bool(outcomes), timeout=LOAD_TIMEOUT_MS)
        # Cancelled: the model loads without a drafter, and says why.
        [info] = outcomes
        assert isinstance(info, EngineInfo), info
        assert (info.drafter, info.drafter_label) == ("none", None)
        assert info.drafter_refused is not None and "was cancelled" in info.drafter_refused

        # Closing while a search runs: stop() ends it instead of waiting it out,
        # and no model is loaded after it.
        started.clear()
        outcomes.clear()
        requests.load.emit(request, None)
        assert started.wait(10)
    finally:
        assert thread.stop(timeout_ms=10_000)
    assert outcomes == [] or outcomes == ["cancelled: the layer-skip search was stopped"]


# -- soak: hundreds of turns must leave memory and file descriptors where they were
SOAK_TURNS = 220
SOAK_WARM_UP = 20  # allocators and caches settle first
SOAK_CONFIG = GenerationConfig(max_tokens=6, sampling=SamplingParams(temperature=0.7, seed=None))
SOAK_PROMPTS = [
    "Name a colour.",
    "Repeat: the quick brown fox jumps over the lazy dog.",
    "Count from one to five.",
    "Say hello in French.",
]


def test_hundreds_of_turns_leak_neither_memory_nor_files(
    qtbot: QtBot, worker: tuple[WorkerThread, Requests], q8_0_first8: Path, q4_1_first8: Path
) -> None:
    # The short pair (conftest): the same engine, worker and drafter paths
    # turn after turn, at a fraction of the passes' cost.
    thread, requests = worker
    outcomes: list[Any] = []
    thread.worker.loaded.connect(outcomes.append)
    thread.worker.load_failed.connect(outcomes.append)
    thread.worker.finished.connect(outcomes.append)
    thread.worker.failed.connect(lambda message, _partial: outcomes.append(message))
    config = EngineConfig(
        target=q8_0_first8, drafter="draft", draft=q4_1_first8,
        target_options=RuntimeOptions(n_ctx=512, n_threads=2),
    )  # fmt: skip
    requests.load.emit(config, None)
    qtbot.waitUntil(lambda: bool(outcomes), timeout=120_000)
    assert isinstance(outcomes.pop(), EngineInfo)

    proc = psutil.Process()
    rss = fds = 0
    for turn in range(SOAK_TURNS):
        if turn == SOAK_WARM_UP:
            rss, fds = proc.memory_info().rss, proc.num_fds()
        # Turns alternate between conversations, as a user switching chats does.
        history = [Message("user", SOAK_PROMPTS[turn % len(SOAK_PROMPTS)])]
        if turn % 3 == 0:
            history = [Message("user", "Hi"), Message("assistant", "Hello!"), *history]
        requests.generate.emit(history, SOAK_CONFIG)
        qtbot.waitUntil(lambda: bool(outcomes), timeout=60_000)
        result = outcomes.pop()
        assert isinstance(result, ReplyResult), result
        assert result.text or result.stop
    grown_mib = (proc.memory_info().rss - rss) / 2**20
    assert grown_mib < 32, (
        f"resident memory grew {grown_mib:.1f} MiB over {SOAK_TURNS - SOAK_WARM_UP} turns"
    )
    assert proc.num_fds() <= fds + 2


def test_a_first_load_says_it_probes_the_kernels_and_times_the_pair(
    qtbot: QtBot, worker: tuple[WorkerThread, Requests], smol_q8_0: Path, smol_q4_1: Path,
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    # Nothing known: a cache of its own, and none of this process's verdicts.
    monkeypatch.setattr(KernelProbe, "_memory", {})
    thread, _ = worker
    progress: list[str] = []
    thread.worker.load_progress.connect(progress.append)
    config = EngineConfig(
        target=smol_q8_0, drafter="draft", draft=smol_q4_1, target_options=OPTIONS,
        kernel_cache=tmp_path,  # nothing probed or timed here yet
    )  # fmt: skip
    _load(qtbot, worker, config)
    timing = "Timing this machine for the pair (first load only)"
    said = len(progress) - sum(line.startswith(f"{timing}: ") for line in progress)
    assert progress[:said] == [
        "Checking which llama.cpp kernels run SmolLM2-135M-Instruct.Q8_0.gguf here "
        "(first load only)…",
        "Loading SmolLM2-135M-Instruct.Q8_0.gguf…",
        "Checking which llama.cpp kernels run SmolLM2-135M-Instruct.Q4_1.gguf here "
        "(first load only)…",
        "Loading the draft SmolLM2-135M-Instruct.Q4_1.gguf…",
        f"{timing}…",
    ]
    # The timing moves (minutes for a large pair on a slow machine), to 100 %.
    percents = [int(line.removeprefix(f"{timing}: ").removesuffix("%")) for line in progress[said:]]
    assert len(percents) > 2 and percents == sorted(percents) and percents[-1] == 100
    progress.clear()
    _load(qtbot, worker, config)  # the second time, both are known
    assert progress == [
        "Loading SmolLM2-135M-Instruct.Q8_0.gguf…",
        "Loading the draft SmolLM2-135M-Instruct.Q4_1.gguf…",
    ]


def test_lookup_copies_from_earlier_chats_only_while_the_memory_is_on(
    qtbot: QtBot, worker: tuple[WorkerThread, Requests], smol_q4_1: Path, tmp_path: Path
) -> None:
    """A request the user made before: with the memory on, prompt lookup
    copies the earlier reply from the stored chats (the model's tokenizer,
    a real SQLite file), and the reply is the same greedy text as without."""
    thread, _ = worker
    store = ConversationStore(tmp_path / "conversations.sqlite3")
    memory_folder = tmp_path / "lookup-memory"
    try:
        _load(
            qtbot, worker, EngineConfig(target=smol_q4_1, drafter="lookup", target_options=OPTIONS)
        )
        thread.worker.set_lookup_memory(None)
        first, _ = _reply(qtbot, worker, HAIKU)
        assert "earlier chats" not in dict(first.snapshot.accepted_by_drafter)
        assert not memory_folder.exists()  # off: nothing of the chats is read
        earlier = store.create()
        store.add_message(earlier, "user", HAIKU[0].content)
        store.add_message(earlier, "assistant", first.text)

        thread.worker.set_lookup_memory(HistoryMemory(store.path))
        again, _ = _reply(qtbot, worker, HAIKU)
        assert again.text == first.text  # lossless (Q4_1: batch-invariant kernels)
        by_source = dict(again.snapshot.accepted_by_drafter)
        assert by_source.get("earlier chats", 0) >= 8, by_source
        assert list(memory_folder.glob("*.npz"))  # saved beside the conversations

        requests_forget = Requests()
        requests_forget.forget.connect(thread.worker.forget_lookup_memory)
        requests_forget.forget.emit(memory_folder)
        qtbot.waitUntil(lambda: not list(memory_folder.glob("*.npz")), timeout=REPLY_TIMEOUT_MS)
        thread.worker.set_lookup_memory(None)
        off, _ = _reply(qtbot, worker, HAIKU)
        assert off.text == first.text
        assert "earlier chats" not in dict(off.snapshot.accepted_by_drafter)
        assert not list(memory_folder.glob("*.npz"))
    finally:
        store.close()
