"""Stop during a long prompt: llama.cpp's abort callback ends the decode midway,
the reply ends cancelled, and the KV bookkeeping stays true to the cache."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import llama_cpp as ll
import pytest

from gambit.engine.decoder import SpeculativeDecoder
from gambit.engine.drafters.draft_model import DraftModelDrafter
from gambit.engine.gamma.policy import FixedGamma
from gambit.engine.machine.runtime import ModelRuntime, RuntimeOptions
from gambit.engine.text.reply import GenerationConfig, StopReason
from gambit.engine.verification.sampling import SamplingParams
from gambit.errors import DecodeAbortedError

# One decode for the whole prompt, so that only the callback can stop it midway.
OPTIONS = RuntimeOptions(n_ctx=1024, n_batch=1024, n_threads=1)
GREEDY = GenerationConfig(max_tokens=6, sampling=SamplingParams(temperature=0.0))


def _long_prompt(rt: ModelRuntime, n: int) -> list[int]:
    text = " ".join(f"Line {i}: the quick brown fox jumps over the lazy dog." for i in range(400))
    return rt.tokenize(text, add_special=True, parse_special=False)[:n]


def _cache_length(rt: ModelRuntime) -> int:
    return int(ll.llama_memory_seq_pos_max(rt._mem, 0)) + 1


@pytest.mark.parametrize("drafted", [False, True], ids=["plain", "draft model"])
def test_stop_during_prefill_cancels_the_reply(
    smol_q4_1: Path, smol_q8_0: Path, drafted: bool
) -> None:
    with ModelRuntime(smol_q8_0, OPTIONS) as target, ModelRuntime(smol_q4_1, OPTIONS) as draft:
        # About a second of prompt processing on one thread, stopped at a tenth:
        # long enough for the stop to land inside it with a 10x margin.
        prompt = _long_prompt(target, 450)
        # How long the prompt takes, unstopped (and a reference reply).
        reference = SpeculativeDecoder(target)
        t0 = time.monotonic()
        expected = [t for r in reference.generate(prompt, GREEDY) for t in r.tokens]
        full_s = time.monotonic() - t0
        target.clear()

        drafter = DraftModelDrafter(draft) if drafted else None
        decoder = SpeculativeDecoder(target, drafter, FixedGamma(4 if drafted else 0))
        cancel = threading.Event()
        timer = threading.Timer(full_s / 10, cancel.set)
        timer.start()
        rounds = list(decoder.generate(prompt, GREEDY, cancel))
        timer.cancel()

        assert [r.stop for r in rounds] == [StopReason.CANCELLED]
        assert rounds[0].tokens == ()
        # It stopped inside the prompt: what we think the cache holds is what
        # it holds, and that is less than the prompt.
        assert len(target.kv_tokens) == _cache_length(target) < len(prompt) - 1
        assert target.kv_tokens == prompt[: len(target.kv_tokens)]
        assert target.abort is None and draft.abort is None  # only during the prompt

        # The next reply reuses what was kept and is the reply it would have been.
        again = [t for r in decoder.generate(prompt, GREEDY, threading.Event()) for t in r.tokens]
        assert again == expected


def test_abort_event_stops_a_long_decode(smol_q4_1: Path) -> None:
    with ModelRuntime(smol_q4_1, OPTIONS) as rt:
        prompt = _long_prompt(rt, 900)
        rt.abort = threading.Event()
        rt.abort.set()
        with pytest.raises(DecodeAbortedError):
            rt.decode(prompt)
        assert rt.kv_tokens == [] and _cache_length(rt) == 0
        rt.abort = None
        assert rt.decode(prompt[:20]) == 1  # works again, unstoppable for short decodes
        assert len(rt.kv_tokens) == 20 == _cache_length(rt)
