"""A grammar's mask in sampling (verification.sampling.process) and the
schemas that cannot be followed (engine.text.grammar), without a model."""

from __future__ import annotations

import numpy as np
import pytest

from gambit.engine.text.grammar import GrammarError, json_schema_grammar, lark_grammar
from gambit.engine.verification.sampling import SamplingParams, process

LOGITS = np.array([5.0, 4.0, 3.0, 2.0, 1.0], dtype=np.float32)
ALLOWED = np.array([False, True, False, True, True])


def test_masked_tokens_get_no_probability_before_top_k_chooses() -> None:
    greedy = process(LOGITS, SamplingParams(temperature=0.0), (), ALLOWED)
    assert greedy.ids.tolist() == [1]  # the best allowed, not the best
    hot = process(
        LOGITS, SamplingParams(temperature=1.0, top_k=2, top_p=1.0, min_p=0.0), (), ALLOWED
    )
    assert hot.ids.tolist() == [1, 3]  # top 2 of the allowed
    assert hot.probs.sum() == pytest.approx(1.0)
    wide = process(
        LOGITS, SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0), (), ALLOWED
    )
    assert sorted(wide.ids.tolist()) == [1, 3, 4] and (wide.probs > 0).all()


@pytest.mark.parametrize(
    "schema",
    [
        '{"type": "nonsense"}',
        "{not json",
        {"type": "integer", "minimum": 5, "maximum": 1},
        {"$ref": "#/$defs/a", "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}},
    ],
)
def test_a_schema_that_cannot_be_followed_says_why(schema: object) -> None:
    with pytest.raises(GrammarError):
        json_schema_grammar(schema)  # type: ignore[arg-type]


def test_a_recursive_schema_that_nests_is_fine() -> None:
    tree = {"type": "object", "properties": {"children": {"type": "array", "items": {"$ref": "#"}}}}
    assert json_schema_grammar(tree)
    assert lark_grammar("start: /[a-z]+/")
    with pytest.raises(GrammarError):
        lark_grammar("start: undefined_rule")
