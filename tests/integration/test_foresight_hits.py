"""The draft model's greedy choices along a reply, teacher-forced, on the real Q4_1 SmolLM2."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from gambit.bench.foresight import model_guesses
from gambit.engine.drafters.base import top_probability
from gambit.engine.machine.runtime import ModelRuntime, RuntimeOptions

OPTIONS = RuntimeOptions(n_ctx=256, n_threads=1, n_batch=8)  # (the reply spans batches)
# A choice this far ahead of the runner-up (in logits) is the same decoded
# alone or in a batch, whatever kernels the CPU's batches take.
CLEAR = 0.5


def test_the_model_guesses_its_own_greedy_reply_and_misses_a_changed_token(smol_q4_1: Path) -> None:
    with ModelRuntime(smol_q4_1, OPTIONS) as rt:
        prompt = rt.tokenize("The capital of France is Paris. The capital of Italy is")
        rt.decode(prompt)
        own, clear, sure_alone = [], [], []
        for _ in range(20):  # its own greedy continuation, one token at a time
            logits = rt.logits(-1)
            sure_alone.append(top_probability(logits))
            second, first = np.partition(logits, -2)[-2:]
            own.append(int(np.argmax(logits)))
            clear.append(first - second >= CLEAR)
            rt.decode(own[-1:])
        assert sum(clear) >= 10
        hits, confidence = model_guesses(rt, prompt, own)
        assert len(hits) == len(confidence) == 20
        # How sure it was at each position: as decoded one token at a time.
        assert np.allclose(confidence, sure_alone, atol=0.02)
        assert all(hit for hit, sure in zip(hits, clear, strict=True) if sure)
        # A token changed where the model was sure: a miss there, and what
        # comes before it is as it was.
        at = [i for i, sure in enumerate(clear) if sure][5]
        changed = [*own[:at], (own[at] + 1) % rt.n_vocab, *own[at + 1 :]]
        hits, _ = model_guesses(rt, prompt, changed)
        assert not hits[at]
        assert all(hit for hit, sure in zip(hits[:at], clear[:at], strict=True) if sure)
