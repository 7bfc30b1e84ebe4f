"""The draft model's greedy choices along a reply, teacher-forced, on the real Q4_1 SmolLM2."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from gambit.bench.foresight import model_hits
from gambit.engine.machine.runtime import ModelRuntime, RuntimeOptions

OPTIONS = RuntimeOptions(n_ctx=256, n_threads=1, n_batch=8)  # (the reply spans batches)


def test_the_model_hits_its_own_greedy_reply_and_misses_a_changed_token(smol_q4_1: Path) -> None:
    with ModelRuntime(smol_q4_1, OPTIONS) as rt:
        prompt = rt.tokenize("The capital of France is Paris. The capital of Italy is")
        rt.decode(prompt)
        own = []
        for _ in range(20):  # its own greedy continuation, one token at a time
            own.append(int(np.argmax(rt.logits(-1))))
            rt.decode(own[-1:])
        assert model_hits(rt, prompt, own) == [True] * 20
        changed = [*own[:7], (own[7] + 1) % rt.n_vocab, *own[8:]]
        hits = model_hits(rt, prompt, changed)
        assert hits[:8] == [True] * 7 + [False]
