"""Bad input on real files and real models: each failure has its own error class,
a message a user can act on, and leaves the process able to carry on.

Model files: missing, empty, a folder, foreign bytes, cut short, unreadable,
checked both by ``check_model_file`` and by ``ModelRuntime`` (which must raise
the same class). Draft models: a copy of the Q4_1 file with one token's text
changed loads, but is refused as a draft. Context: prompts that cannot fit,
conversations that must be trimmed, and a context that fills up mid-reply.
"""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
import traceback
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from gambit.engine.decoder import SpeculativeDecoder
from gambit.engine.drafters.draft_model import DraftModelDrafter, check_compatible
from gambit.engine.gamma.policy import FixedGamma
from gambit.engine.machine.runtime import ModelRuntime, RuntimeOptions
from gambit.engine.session import Engine, EngineConfig
from gambit.engine.text.chat import ChatPromptBuilder, Message
from gambit.engine.text.reply import GenerationConfig, Round, StopReason
from gambit.engine.verification.sampling import SamplingParams
from gambit.errors import (
    ContextOverflowError,
    EmptyModelFileError,
    IncompatibleDraftError,
    ModelFileError,
    ModelNotFoundError,
    NotAFileError,
    NotGGUFError,
    TruncatedModelError,
)
from gambit.formats.gguf_file import check_model_file, read_header
from gguf_fixtures import CHANGED_TEXT, CHANGED_TOKEN

# One thread: the machine's two cores are shared with other jobs, and llama.cpp's
# spinning thread pool slows down a hundredfold when its threads get preempted.
SMALL = RuntimeOptions(n_ctx=256, n_threads=1)
GREEDY = SamplingParams(temperature=0.0)
STORY = (
    "Once upon a time, in a small village by the sea, there lived an old fisherman "
    "named Tom. Every morning he rowed his little boat out past the rocks, cast his "
    "nets, and sang songs to the gulls while he waited for the fish. "
)


def _still_works(good: Path) -> None:
    """A good model loads and decodes after whatever failed before."""
    with ModelRuntime(good, SMALL) as rt:
        tokens = rt.tokenize("Hello there")
        assert rt.decode(tokens) == 1
        row = rt.logits(-1)  # the last token's row (row 0 is not: see report)
        assert np.isfinite(row).all()
        assert 0 <= int(row.argmax()) < rt.n_vocab


def _load_runtime(path: Path) -> None:
    ModelRuntime(path, SMALL).close()


LOADERS: dict[str, Callable[[Path], object]] = {
    "check_model_file": check_model_file,
    "ModelRuntime": _load_runtime,
}


# ------------------------------------------------------------------ bad model files


@pytest.fixture(scope="module")
def bad_files(tmp_path_factory: pytest.TempPathFactory, smol_q4_1: Path) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("bad-models")
    data = smol_q4_1.read_bytes()
    noise = os.urandom(4096)
    while noise.startswith(b"GGUF"):  # 1 in 2**32, but then it would be a GGUF
        noise = os.urandom(4096)
    contents = {
        "empty.gguf": b"",
        "random.gguf": noise,
        "readme.gguf": b"# Not a model\n\nThis is a plain text file, not GGUF weights.\n" * 20,
        "first-1MiB.gguf": data[: 1 << 20],
        "minus-4096.gguf": data[:-4096],
        "header-200.gguf": data[:200],
    }
    files = {}
    for name, blob in contents.items():
        files[name] = d / name
        files[name].write_bytes(blob)
    files["folder.gguf"] = d / "folder.gguf"
    files["folder.gguf"].mkdir()
    files["missing.gguf"] = d / "missing.gguf"
    return files


# name -> (error class, patterns that must all occur in the message, case-insensitive)
CASES: dict[str, tuple[type[ModelFileError], list[str]]] = {
    "missing.gguf": (ModelNotFoundError, [r"not found"]),
    "empty.gguf": (EmptyModelFileError, [r"empty", r"0 bytes"]),
    "folder.gguf": (NotAFileError, [r"folder|directory", r"not a model file"]),
    "random.gguf": (NotGGUFError, [r"not a GGUF"]),
    "readme.gguf": (NotGGUFError, [r"not a GGUF", r"\.gguf"]),
    "header-200.gguf": (TruncatedModelError, [r"truncated|cut short"]),
}


@pytest.mark.parametrize("loader", list(LOADERS))
@pytest.mark.parametrize("name", list(CASES))
def test_bad_model_file(
    bad_files: dict[str, Path], smol_q4_1: Path, loader: str, name: str
) -> None:
    path = bad_files[name]
    error, patterns = CASES[name]
    with pytest.raises(ModelFileError) as info:
        LOADERS[loader](path)
    assert type(info.value) is error, f"{name}: {type(info.value).__name__}: {info.value}"
    message = str(info.value)
    for pattern in patterns:
        assert re.search(pattern, message, re.IGNORECASE), f"{pattern!r} not in {message!r}"
    assert info.value.path == str(path)
    assert message.endswith(str(path))  # the user sees which file
    _still_works(smol_q4_1)


@pytest.mark.parametrize("loader", list(LOADERS))
def test_file_cut_to_first_mebibyte(
    bad_files: dict[str, Path], smol_q4_1: Path, loader: str
) -> None:
    # SmolLM2's header (49k tokens and merges) is ~1.7 MB, so the cut falls inside
    # it: an interrupted download, and the message should say so with sizes.
    path = bad_files["first-1MiB.gguf"]
    assert read_header(smol_q4_1).data_offset > path.stat().st_size
    with pytest.raises(TruncatedModelError) as info:
        LOADERS[loader](path)
    message = str(info.value)
    assert "truncated" in message.lower(), message
    assert re.search(r"1,048,576|1048576", message), f"no byte count in {message!r}"
    _still_works(smol_q4_1)


@pytest.mark.parametrize("loader", list(LOADERS))
def test_file_missing_its_last_4096_bytes(
    bad_files: dict[str, Path], smol_q4_1: Path, loader: str
) -> None:
    path = bad_files["minus-4096.gguf"]
    full = smol_q4_1.stat().st_size
    with pytest.raises(TruncatedModelError) as info:
        LOADERS[loader](path)
    message = str(info.value)
    assert "truncated" in message.lower()
    assert f"{full - 4096:,} bytes on disk" in message
    assert f"{full:,} expected" in message
    assert "4,096 missing" in message
    _still_works(smol_q4_1)


@pytest.mark.parametrize("loader", list(LOADERS))
def test_unreadable_file(tmp_path: Path, smol_q4_1: Path, loader: str) -> None:
    path = tmp_path / "locked.gguf"
    path.write_bytes(b"GGUF" + bytes(60))
    path.chmod(0)
    try:
        if os.access(path, os.R_OK):
            pytest.skip("running with privileges that read a mode-000 file (root)")
        with pytest.raises(NotAFileError) as info:
            LOADERS[loader](path)
        assert "cannot be read" in str(info.value)
        assert "permission denied" in str(info.value)
    finally:
        path.chmod(stat.S_IRUSR | stat.S_IWUSR)
    _still_works(smol_q4_1)


# ------------------------------------------------------------ incompatible draft


def test_changed_tokenizer_loads_but_cannot_draft_token_for_token(
    changed_tokenizer: Path, rt_q4_1: ModelRuntime, rt_q8_0: ModelRuntime
) -> None:
    check_model_file(changed_tokenizer)
    with ModelRuntime(changed_tokenizer, SMALL) as changed:
        assert changed.token_text(CHANGED_TOKEN) == CHANGED_TEXT
        original = rt_q4_1.token_text(CHANGED_TOKEN)
        assert original != CHANGED_TEXT
        assert changed.decode(changed.tokenize("Hello")) == 1  # a usable model on its own

        with pytest.raises(IncompatibleDraftError) as info:
            check_compatible(rt_q4_1, changed)
        message = str(info.value)
        assert f"token {CHANGED_TOKEN} differs" in message
        assert repr(CHANGED_TEXT) in message and repr(original) in message
        assert changed_tokenizer.name in message and rt_q4_1.path.name in message
        assert "token for token" in message

        # either way round
        with pytest.raises(IncompatibleDraftError, match=f"token {CHANGED_TOKEN} differs"):
            check_compatible(changed, rt_q4_1)
    # the control: a real same-tokenizer pair passes
    check_compatible(rt_q8_0, rt_q4_1)


def test_a_draft_of_another_tokenizer_drafts_through_text(
    changed_tokenizer: Path, smol_q8_0: Path
) -> None:
    config = EngineConfig(
        target=smol_q8_0, drafter="draft", draft=changed_tokenizer, target_options=SMALL
    )
    engine = Engine(config)
    try:
        assert engine.drafts_through_text
        assert engine.drafter is not None and engine.drafter.name == "draft model (through text)"
        config_reply = GenerationConfig(max_tokens=24, sampling=GREEDY)
        # Drafting at a fixed γ: on this toy pair (a draft step ~0.75 of a
        # target step) the adaptive policy may rightly not draft at all.
        engine.use_controller(engine.new_controller("fixed", 4))
        rounds = list(engine.chat([Message("user", "Count: one, two, three")], config_reply))
        assert sum(r.n_accepted for r in rounds) > 0  # the same network: it lands
        assert {r.drafted_by for r in rounds if r.n_drafted} == {"draft model (through text)"}
    finally:
        engine.close()


def test_engine_refuses_incompatible_draft_and_closes_models(
    changed_tokenizer: Path, smol_q8_0: Path, smol_q4_1: Path
) -> None:
    # A layer-skip draft is derived from its target, so it must share its
    # vocabulary: one that does not fails after both models loaded.
    config = EngineConfig(
        target=smol_q8_0, drafter="layerskip", draft=changed_tokenizer, target_options=SMALL
    )
    with pytest.raises(IncompatibleDraftError) as info:
        Engine(config)
    assert type(info.value) is IncompatibleDraftError
    assert f"token {CHANGED_TOKEN} differs" in str(info.value)
    # nothing else went wrong on the way out (closing raised nothing)
    assert info.value.__context__ is None
    # the half-built engine closed both models it had loaded
    engines = [
        frame.f_locals["self"]
        for frame, _ in traceback.walk_tb(info.tb)
        if isinstance(frame.f_locals.get("self"), Engine)
    ]
    assert engines, "the failing Engine.__init__ frame is not in the traceback"
    engine = engines[0]
    assert engine.draft_runtime is not None
    for rt in (engine.target, engine.draft_runtime):
        assert rt._model is None and rt._ctx is None, f"{rt.path.name} left open"
    # and a good pair still works afterwards
    good = EngineConfig(target=smol_q8_0, drafter="draft", draft=smol_q4_1, target_options=SMALL)
    engine = Engine(good)
    try:
        rounds = list(
            engine.chat([Message("user", "Hi")], GenerationConfig(max_tokens=4, sampling=GREEDY))
        )
        assert sum(len(r.tokens) for r in rounds) >= 1
    finally:
        engine.close()


# ------------------------------------------------------------------------ context


def _story_tokens(rt: ModelRuntime, n: int) -> list[int]:
    tokens = rt.tokenize(STORY * (n // 20 + 2), add_special=True, parse_special=False)
    assert len(tokens) >= n
    return tokens[:n]


def test_prompt_longer_than_context(smol_q4_1: Path) -> None:
    with ModelRuntime(smol_q4_1, RuntimeOptions(n_ctx=128, n_threads=1)) as rt:
        assert rt.n_ctx >= 128  # llama.cpp may round the size up (to 256)
        n_prompt = max(200, rt.n_ctx + 1)
        decoder = SpeculativeDecoder(rt)
        config = GenerationConfig(max_tokens=8, sampling=GREEDY)
        with pytest.raises(ContextOverflowError) as info:
            list(decoder.generate(_story_tokens(rt, n_prompt), config))
        message = str(info.value)
        assert f"{n_prompt:,} tokens" in message
        assert f"context holds {rt.n_ctx:,}" in message
        assert "shorten" in message.lower()
        assert rt.kv_tokens == []  # nothing was decoded

        # exactly n_ctx tokens leaves no room for a reply either
        with pytest.raises(ContextOverflowError):
            list(decoder.generate(_story_tokens(rt, rt.n_ctx), config))

        # the runtime is still usable
        rounds = list(decoder.generate(_story_tokens(rt, 20), config))
        assert sum(len(r.tokens) for r in rounds) == 8
        assert rounds[-1].stop is StopReason.MAX_TOKENS


# Run in a child process: a failed llama.cpp assertion aborts the whole process.
_BETWEEN_SIZES = """
import sys
from gambit.engine.decoder import SpeculativeDecoder
from gambit.engine.text.reply import GenerationConfig
from gambit.engine.machine.runtime import ModelRuntime, RuntimeOptions
from gambit.engine.verification.sampling import SamplingParams
from gambit.errors import ContextOverflowError

rt = ModelRuntime(sys.argv[1], RuntimeOptions(n_ctx=128, n_threads=1))
prompt = rt.tokenize(sys.argv[2])[:200]
assert len(prompt) == 200
config = GenerationConfig(max_tokens=4, sampling=SamplingParams(temperature=0.0))
try:
    rounds = list(SpeculativeDecoder(rt).generate(prompt, config))
except ContextOverflowError as exc:
    print("overflow", rt.n_ctx, exc)
else:
    print("generated", rt.n_ctx, sum(len(r.tokens) for r in rounds), rounds[-1].stop.name)
"""


def test_200_token_prompt_on_a_128_token_context_does_not_crash(smol_q4_1: Path) -> None:
    """n_ctx=128 and a 200-token prompt: a clean ContextOverflowError, or (as
    llama.cpp rounds the context up to 256) a normal reply; never an abort."""
    proc = subprocess.run(
        [sys.executable, "-c", _BETWEEN_SIZES, str(smol_q4_1), STORY * 10],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    asserts = [line for line in proc.stderr.splitlines() if "GGML_ASSERT" in line]
    assert proc.returncode == 0, (
        f"the process died (rc {proc.returncode}): {asserts or proc.stderr[-800:]}"
    )
    kind, n_ctx, *rest = proc.stdout.split()
    if kind == "overflow":
        assert int(n_ctx) < 200 and "200 tokens" in proc.stdout
    else:
        assert int(n_ctx) > 200 and rest == ["4", "MAX_TOKENS"]


def test_huge_chat_message_overflows(smol_q4_1: Path) -> None:
    with ModelRuntime(smol_q4_1, SMALL) as rt:
        builder = ChatPromptBuilder(rt)
        huge = "Please summarise this: " + "lorem ipsum dolor sit amet " * 300
        for messages in (
            [Message("user", huge)],
            [Message("system", "Be brief."), Message("user", huge)],
            # earlier turns are dropped first, but the last message alone is too long
            [Message("user", "Hi"), Message("assistant", "Hello!"), Message("user", huge)],
        ):
            with pytest.raises(ContextOverflowError) as info:
                builder.build(messages, reserve=64)
            message = str(info.value)
            assert "too long for the context window" in message
            assert re.search(r"needs [\d,]+ tokens", message), message
            assert f"{rt.n_ctx:,} in the context" in message
            assert "Shorten the message" in message
        # still works: a short message builds
        prompt = builder.build([Message("user", "Hi")], reserve=64)
        assert prompt.n_dropped == 0 and len(prompt.tokens) < rt.n_ctx


def test_long_conversation_is_trimmed(smol_q4_1: Path) -> None:
    system = Message("system", "You are a terse math tutor.")
    messages = [system]
    for i in range(12):
        messages.append(Message("user", f"Question number {i}: what is {i} plus {i}?"))
        messages.append(Message("assistant", f"The answer to question {i} is {2 * i}."))
    last = Message("user", "Final question: what is seven times six?")
    messages.append(last)
    config = GenerationConfig(max_tokens=32, sampling=GREEDY)

    engine = Engine(EngineConfig(target=smol_q4_1, target_options=SMALL))
    try:
        n_ctx = engine.target.n_ctx
        full = engine.chat_builder.template.render(messages)
        assert len(engine.target.tokenize(full)) > n_ctx  # really too long
        prompt = engine.chat_builder.build(messages, reserve=config.max_tokens)
        assert prompt.n_dropped > 0
        assert len(prompt.tokens) <= n_ctx - config.max_tokens
        assert system.content in prompt.text
        assert prompt.text.rstrip().endswith("<|im_start|>assistant")
        assert last.content in prompt.text
        assert "Question number 0:" not in prompt.text  # the oldest turn went first
        # whole exchanges are dropped: after the system message comes a user turn
        turns = prompt.text.split("<|im_start|>")[1:]
        assert turns[0].startswith("system\n") and turns[1].startswith("user\n")
        kept = len(turns) - 2  # minus system and the generation prompt
        assert kept + prompt.n_dropped == len(messages) - 1

        rounds = list(engine.chat(messages, config))
        assert rounds[-1].stop in (StopReason.EOG, StopReason.MAX_TOKENS)
        assert 1 <= sum(len(r.tokens) for r in rounds) <= config.max_tokens
        assert engine.decoder.context[: len(prompt.tokens)] == prompt.tokens
    finally:
        engine.close()


@pytest.mark.parametrize("drafter", ["none", "draft model"])
def test_context_fills_up_during_generation(smol_q4_1: Path, smol_q8_0: Path, drafter: str) -> None:
    with (
        ModelRuntime(smol_q8_0 if drafter != "none" else smol_q4_1, SMALL) as target,
        ModelRuntime(smol_q4_1, SMALL) as draft_rt,
    ):
        # A story cut mid-sentence: the model carries on telling it, and 30
        # tokens of room run out long before max_tokens.
        prompt = _story_tokens(target, target.n_ctx - 30)
        if drafter == "none":
            decoder = SpeculativeDecoder(target)
        else:
            decoder = SpeculativeDecoder(target, DraftModelDrafter(draft_rt), FixedGamma(4))
        config = GenerationConfig(max_tokens=10_000, sampling=GREEDY)
        rounds: list[Round] = list(decoder.generate(prompt, config))
        assert rounds[-1].stop is StopReason.CONTEXT_FULL
        assert all(r.stop is None for r in rounds[:-1])
        n_generated = sum(len(r.tokens) for r in rounds)
        # every KV slot is used; the last token is emitted without being decoded
        assert len(target.kv_tokens) == target.n_ctx
        assert n_generated == target.n_ctx + 1 - len(prompt)
        assert decoder.context == prompt + [t for r in rounds for t in r.tokens]
        assert "".join(r.text for r in rounds).strip()
        if drafter != "none":
            assert sum(r.n_drafted for r in rounds) > 0
