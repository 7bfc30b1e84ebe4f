"""Prompt lookup's copies checked by the draft model (``DraftModelDrafter.draft_checked``).

On the real SmolLM2 Q4_1 draft: a copy the model agrees with is kept whole
and read in one batch; a copy that strays is cut where the model's own top
choice differs, and the model's own chain follows from there, as if it had
drafted on that context by itself.
"""

from __future__ import annotations

import numpy as np

from gambit.engine.drafters.base import Option, SourceKind
from gambit.engine.drafters.combined import CombinedDrafter
from gambit.engine.drafters.draft_model import DraftModelDrafter
from gambit.engine.drafters.lookup import PromptLookupDrafter
from gambit.engine.machine.runtime import ModelRuntime
from gambit.engine.text.chat import ChatTemplate, Message
from gambit.engine.verification.sampling import SamplingParams

GREEDY = SamplingParams(temperature=0.0)
HOT = SamplingParams(temperature=1.0, top_k=8, top_p=1.0, min_p=0.0)


def _context(rt: ModelRuntime) -> list[int]:
    text = "Repeat this list exactly, one item per line: apple, pear, plum, cherry."
    rendered = ChatTemplate.for_model(rt).render([Message("user", text)])
    return rt.tokenize(rendered, add_special=False)


def _own_chain(rt: ModelRuntime, context: list[int], n: int) -> tuple[int, ...]:
    rt.clear()
    return DraftModelDrafter(rt).draft(context, n, GREEDY, np.random.default_rng(0)).tokens


def test_a_copy_the_model_agrees_with_is_kept_whole_and_read_in_one_batch(
    rt_q4_1: ModelRuntime,
) -> None:
    context = _context(rt_q4_1)
    own = _own_chain(rt_q4_1, context, 10)
    drafter = DraftModelDrafter(rt_q4_1)
    rt_q4_1.clear()
    drafter.prepare(context)  # in step with the context, as mid-reply
    calls = rt_q4_1.decode_calls
    draft = drafter.draft_checked(context, own[:8], 10, GREEDY, np.random.default_rng(0))
    assert draft.tokens == own  # the copy, then the model's own two tokens
    assert draft.q is None  # greedy: point masses
    # One batch for the copy (and the token it must re-read), then one decode
    # for the ninth token (the tenth needs none): not one per copied token.
    assert rt_q4_1.decode_calls - calls == 2
    assert draft.n_synced == 1


def test_a_copy_that_strays_is_cut_where_the_model_disagrees(rt_q4_1: ModelRuntime) -> None:
    context = _context(rt_q4_1)
    own = _own_chain(rt_q4_1, context, 12)
    stray_at = 3
    wrong = next(t for t in range(100, 200) if t != own[stray_at])
    copy = (*own[:stray_at], wrong, *own[stray_at + 1 : 10])
    drafter = DraftModelDrafter(rt_q4_1)
    draft = drafter.draft_checked(context, copy, 12, GREEDY, np.random.default_rng(0))
    # Kept up to the stray; then the model's own token and chain, as drafted alone.
    assert draft.tokens == own
    # The cache holds the context and the draft's accepted part, nothing of the
    # copy past the stray: the next round's catch-up reads only what is new.
    assert rt_q4_1.kv_tokens == [*context, *own[:11]]


def test_sampled_copies_are_point_masses_and_the_model_s_tokens_carry_q(
    rt_q4_1: ModelRuntime,
) -> None:
    context = _context(rt_q4_1)
    own = _own_chain(rt_q4_1, context, 6)
    copy = (*own[:2], next(t for t in range(100, 200) if t != own[2]))
    drafter = DraftModelDrafter(rt_q4_1)
    draft = drafter.draft_checked(context, copy, 6, HOT, np.random.default_rng(1))
    assert draft.tokens[:2] == own[:2]
    assert draft.q is not None and len(draft.q) == len(draft.tokens) == 6
    assert all(q.is_point for q in draft.q[:2])
    # From the stray on, tokens drawn from the model's own distributions.
    assert all(not q.is_point for q in draft.q[2:])
    assert all(q.prob(t) > 0 for q, t in zip(draft.q, draft.tokens, strict=True))


def test_the_combined_drafter_offers_each_copy_as_is_and_checked(rt_q4_1: ModelRuntime) -> None:
    context = _context(rt_q4_1)
    # The context repeated: lookup copies it, wherever the model would go.
    context = [*context, *context[-40:-20]]
    copied = PromptLookupDrafter().draft(context, 8, GREEDY, np.random.default_rng(0))
    rt_q4_1.clear()
    expected = DraftModelDrafter(rt_q4_1).draft_checked(
        context, copied.tokens, 8, GREEDY, np.random.default_rng(0)
    )
    for check in (True, False):
        rt_q4_1.clear()
        combined = CombinedDrafter(DraftModelDrafter(rt_q4_1), PromptLookupDrafter(), check)
        options = combined.options(context)
        as_is = [o for o in options if o.kind is SourceKind.FREE]
        checked = [o for o in options if o.kind is SourceKind.READ]
        assert as_is, "lookup should match the repeated stretch"
        assert [(o.source, o.bucket) for o in checked] == (
            [(o.source, o.bucket) for o in as_is] if check else []
        )
        assert Option("draft model") in options  # the draft model's own chain
        assert as_is[0].source == "prompt lookup"
        combined.use(as_is[0])
        draft = combined.draft(context, 8, GREEDY, np.random.default_rng(0))
        assert draft.tokens == copied.tokens and draft.n_synced == 0  # the model read nothing
        if check:
            combined.use(checked[0])
            draft = combined.draft(context, 8, GREEDY, np.random.default_rng(0))
            assert draft.tokens == expected.tokens
            assert draft.n_synced == len(context)  # the model read the context with the copy


def test_without_copying_the_combined_drafter_offers_its_draft_model_alone(
    rt_q4_1: ModelRuntime,
) -> None:
    # (the regimes bench's "model alone": lookup's worth measured on one engine)
    context = _context(rt_q4_1)
    context = [*context, *context[-40:-20]]
    rt_q4_1.clear()
    combined = CombinedDrafter(DraftModelDrafter(rt_q4_1), PromptLookupDrafter())
    assert any(o.kind is not SourceKind.MODEL for o in combined.options(context))
    combined.copying = False
    assert combined.options(context) == (Option("draft model"),)
    combined.use(Option("draft model"))
    rt_q4_1.clear()
    own = _own_chain(rt_q4_1, context, 6)
    rt_q4_1.clear()
    assert combined.draft(context, 6, GREEDY, np.random.default_rng(0)).tokens == own
    combined.copying = True
    assert any(o.kind is SourceKind.FREE for o in combined.options(context))
