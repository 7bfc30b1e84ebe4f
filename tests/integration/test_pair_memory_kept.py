"""What a session learned of its pair is kept, and the next load of the pair
starts from it (issue 47): the real engine, real weights, a real file."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
from serving import OPTIONS

from gambit.engine.drafters.base import Option
from gambit.engine.estimates import KEPT_OUTCOMES
from gambit.engine.gamma.calibration import CostStore
from gambit.engine.gamma.controller_learning import option_key
from gambit.engine.session import Engine, EngineConfig
from gambit.engine.text.chat import Message
from gambit.engine.text.reply import GenerationConfig
from gambit.storage.paths import cache_dir


def test_the_next_load_of_a_pair_starts_from_what_the_last_one_learned(
    smol_q8_0: Path, smol_q4_1: Path, tmp_path: Path
) -> None:
    # Its own costs file, the shared kernel verdicts (no probe to run again).
    verdicts = cache_dir() / "kernels.json"
    if verdicts.is_file():
        shutil.copy(verdicts, tmp_path / "kernels.json")
    config = EngineConfig(
        target=smol_q8_0, drafter="draft", draft=smol_q4_1, target_options=OPTIONS,
        policy="fixed", gamma=4, kernel_cache=tmp_path,
    )  # fmt: skip
    first = Engine(config)
    try:
        assert first.kept_learning is None  # (a pair never loaded before)
        reply = GenerationConfig(max_tokens=48)
        for _ in first.chat([Message("user", "Count from one to twenty in words.")], reply):
            pass
        model = Option(first.drafter.name if first.drafter else "")
        learned = first.controller.learning.acceptance(model)
        assert learned.seen[0] > 0
    finally:
        first.close()

    second = Engine(config)
    try:
        assert second.kept_learning is not None
        kept = second.kept_learning["options"][option_key(model)]
        assert np.allclose(kept["acceptance"]["alpha"], learned.alpha, atol=1e-4)
        assert kept["acceptance"]["seen"] == learned.seen.tolist()
        # Its controllers start from it, each position as a few outcomes.
        for ctrl in (second.controller, second.new_controller("adaptive")):
            resumed = ctrl.learning.acceptance(model)
            assert np.allclose(resumed.alpha, learned.alpha, atol=1e-4)
            assert resumed.seen.tolist() == np.minimum(learned.seen, KEPT_OUTCOMES).tolist()
    finally:
        second.close()
    # Kept apart from the costs, in the same file, under the pair's own entry.
    key = CostStore.learned_key(second.target, second.draft_runtime, "draft")
    assert CostStore(tmp_path).load_learned(key) is not None
