"""A second, smaller GGUF with the target's tokenizer drafts token by token."""

from __future__ import annotations

import numpy as np

from gambit.engine.drafters.base import EMPTY_DRAFT, Draft
from gambit.engine.runtime import ModelRuntime, common_prefix_length
from gambit.engine.sampling import Distribution, SamplingParams, process
from gambit.errors import IncompatibleDraftError

# As llama.cpp's common/speculative.cpp: vocabularies may differ by a few
# added tokens at the end; the ids below that must mean the same text.
VOCAB_MAX_SIZE_DIFFERENCE = 128
VOCAB_CHECK_START_TOKEN_ID = 5


def check_compatible(target: ModelRuntime, draft: ModelRuntime) -> None:
    """Raise ``IncompatibleDraftError`` with the reason unless ``draft`` can draft for ``target``.

    The same rules as llama.cpp's ``common_speculative_are_compatible``.
    """

    def refuse(reason: str) -> None:
        raise IncompatibleDraftError(
            f"{draft.path.name} cannot draft for {target.path.name}: {reason}. "
            "A draft model must use the same tokenizer as the target "
            "(usually a smaller model of the same family)."
        )

    if target.vocab_type != draft.vocab_type:
        refuse(f"different tokenizer types ({draft.vocab_type} vs {target.vocab_type})")
    if target.add_bos != draft.add_bos or (target.add_bos and target.bos_token != draft.bos_token):
        refuse(f"different begin-of-text tokens ({draft.bos_token} vs {target.bos_token})")
    if target.add_eos != draft.add_eos or (target.add_eos and target.eos_token != draft.eos_token):
        refuse(f"different end-of-text tokens ({draft.eos_token} vs {target.eos_token})")
    diff = abs(target.n_vocab - draft.n_vocab)
    if diff > VOCAB_MAX_SIZE_DIFFERENCE:
        refuse(
            f"vocabulary sizes differ by {diff} "
            f"({draft.n_vocab:,} vs {target.n_vocab:,} tokens; at most "
            f"{VOCAB_MAX_SIZE_DIFFERENCE} allowed)"
        )
    for i in range(VOCAB_CHECK_START_TOKEN_ID, min(target.n_vocab, draft.n_vocab)):
        t_tgt, t_dft = target.token_text(i), draft.token_text(i)
        if t_tgt != t_dft:
            refuse(f"token {i} differs ({t_dft!r} vs {t_tgt!r})")


class DraftModelDrafter:
    """Drafts with a small model, one decode per drafted token.

    The draft's KV cache follows the committed context lazily: each call
    syncs it to the context (keeping the common prefix, so after a partial
    acceptance only the rejected tail is dropped and only the new tokens are
    decoded), then decodes its own proposals.

    After a long stretch of plain decoding (speculation switched off, then a
    probe), catching up on every skipped token would cost more than the probe
    can win; beyond ``max_catch_up`` missing tokens the draft restarts on the
    last ``window`` tokens of the context instead. Its proposals may then be a
    little worse, never wrong: verification decides what is kept.
    """

    name = "draft model"

    def __init__(
        self,
        runtime: ModelRuntime,
        p_min: float = 0.0,
        sampling: SamplingParams | None = None,
        max_catch_up: int = 256,
        window: int = 256,
    ) -> None:
        self.runtime = runtime
        self.max_catch_up = max_catch_up
        self.window = window
        self._offset = 0  # context index of the draft cache's first token
        # The draft's own sampling settings. Default: the generation's, which
        # maximises acceptance; any other choice stays lossless (verification
        # corrects for whatever q the draft proposes from).
        self.sampling = sampling
        # Stop drafting early once the draft's own top probability falls
        # below p_min (0: never); a cheap confidence signal.
        self.p_min = p_min

    def draft(
        self,
        context: list[int],
        n_max: int,
        sampling: SamplingParams,
        rng: np.random.Generator,
    ) -> Draft:
        if n_max <= 0:
            return EMPTY_DRAFT
        rt = self.runtime
        sampling = self.sampling or sampling
        view = self._view(context)
        n_max = min(n_max, rt.n_ctx - len(view))  # room left in the draft's cache
        if n_max <= 0:
            return EMPTY_DRAFT
        n_synced = rt.sync(view)
        tokens: list[int] = []
        q: list[Distribution] = []
        recent = view[-sampling.repeat_last_n :] if sampling.repeat_penalty != 1.0 else []
        for i in range(n_max):
            row = rt.logits(-1)
            dist = process(row, sampling, recent + tokens if recent else ())
            if self.p_min > 0.0 and i > 0 and self._top_prob(row, dist, sampling) < self.p_min:
                break
            tok = dist.sample(rng.random())
            tokens.append(tok)
            q.append(dist)
            if rt.is_eog(tok) or i == n_max - 1:
                break
            rt.decode([tok])
        return Draft(tuple(tokens), None if sampling.greedy else q, n_synced)

    def _view(self, context: list[int]) -> list[int]:
        """The part of the context the draft's cache should hold."""
        rt = self.runtime
        if self._offset >= len(context) or len(context) <= self.window:
            self._offset = 0
        view = context[self._offset :]
        missing = len(view) - common_prefix_length(rt.kv_tokens, view)
        if missing > self.max_catch_up and len(context) > self.window:
            self._offset = len(context) - self.window
            rt.clear()
            view = context[self._offset :]
        return view

    @staticmethod
    def _top_prob(row: np.ndarray, dist: Distribution, sampling: SamplingParams) -> float:
        if not sampling.greedy:
            return float(dist.probs[0])
        z = row.astype(np.float64)
        z -= z.max()
        e = np.exp(z)
        return float(e.max() / e.sum())

    def close(self) -> None:
        self.runtime.close()
