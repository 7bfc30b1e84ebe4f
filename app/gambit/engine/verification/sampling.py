"""Logits -> the processed distribution a token is drawn from. Pure numpy.

Draft and target, speculative and plain decoding all call ``process``: one
definition of "the distribution" is what makes speculation lossless.

Order of the processors (as in Hugging Face's warpers): repetition penalty on
the raw logits, temperature, top-k, softmax, top-p, min-p, renormalise.
Temperature 0 is exact greedy: a point mass on the (penalised) argmax.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 0.7
    top_k: int = 40  # 0: off
    top_p: float = 0.95  # 1.0: off
    min_p: float = 0.05  # 0.0: off
    repeat_penalty: float = 1.0  # 1.0: off
    repeat_last_n: int = 64
    seed: int | None = None  # None: a fresh seed per generation

    def __post_init__(self) -> None:
        problems = []
        if not (self.temperature >= 0):
            problems.append("temperature must be 0 or more")
        if self.top_k < 0:
            problems.append("top-k must be 0 (off) or more")
        if not (0.0 < self.top_p <= 1.0):
            problems.append("top-p must be in (0, 1]")
        if not (0.0 <= self.min_p < 1.0):
            problems.append("min-p must be in [0, 1)")
        if not (self.repeat_penalty > 0):
            problems.append("repetition penalty must be above 0")
        if self.repeat_last_n < 0:
            problems.append("repetition window must be 0 or more")
        if problems:
            raise ValueError("; ".join(problems))

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


@dataclass(frozen=True, slots=True)
class Distribution:
    """A categorical distribution over token ids, stored sparsely.

    ``ids`` are distinct token ids, ``probs`` their probabilities (sum 1);
    tokens not listed have probability 0.
    """

    ids: IntArray
    probs: FloatArray

    @classmethod
    def point(cls, token: int) -> Distribution:
        return cls(np.array([token], dtype=np.int64), np.ones(1))

    @property
    def is_point(self) -> bool:
        return len(self.ids) == 1

    def prob(self, token: int) -> float:
        if len(self.ids) == 1:
            return 1.0 if int(self.ids[0]) == token else 0.0
        hit = np.flatnonzero(self.ids == token)
        return float(self.probs[hit[0]]) if len(hit) else 0.0

    def sample(self, u: float) -> int:
        """The token at quantile ``u`` in [0, 1) (inverse-CDF sampling)."""
        if len(self.ids) == 1:
            return int(self.ids[0])
        cdf = np.cumsum(self.probs)
        i = int(np.searchsorted(cdf, u * cdf[-1], side="right"))
        return int(self.ids[min(i, len(self.ids) - 1)])

    def dense(self, n_vocab: int) -> FloatArray:
        out = np.zeros(n_vocab)
        out[self.ids] = self.probs
        return out


def penalise(
    logits: npt.NDArray[np.float32], recent: Sequence[int], penalty: float
) -> npt.NDArray[np.float32]:
    """llama.cpp's repetition penalty: divide positive logits, multiply negative ones."""
    out: npt.NDArray[np.float32] = logits.copy()
    idx = np.unique(np.asarray(recent, dtype=np.int64))
    idx = idx[(idx >= 0) & (idx < len(out))]
    v = out[idx]
    out[idx] = np.where(v > 0, v / penalty, v * penalty)
    return out


def process(
    logits: npt.NDArray[np.float32],
    params: SamplingParams,
    recent: Sequence[int] = (),
    allowed: npt.NDArray[np.bool_] | None = None,
) -> Distribution:
    """The distribution the next token is drawn from, given one row of logits.

    ``recent`` holds the last tokens of the context, for the repetition penalty.
    ``allowed`` (a grammar's mask, one bool per token): the other tokens get no
    probability, before top-k, top-p and min-p choose among the rest.
    ``logits`` is only read (it may be a view into llama.cpp's buffer).
    """
    x = logits
    if params.repeat_penalty != 1.0 and params.repeat_last_n > 0 and recent:
        x = penalise(x, recent[-params.repeat_last_n :], params.repeat_penalty)
    if allowed is not None:
        x = np.where(allowed, x, -np.inf).astype(np.float32, copy=False)
    if params.greedy:
        return Distribution.point(int(np.argmax(x)))

    n_vocab = len(x)
    k = params.top_k if 0 < params.top_k < n_vocab else n_vocab
    if k < n_vocab:
        ids = np.argpartition(x, n_vocab - k)[n_vocab - k :].astype(np.int64)
        vals = x[ids]
    else:
        ids = np.arange(n_vocab, dtype=np.int64)
        vals = x
    order = np.argsort(-vals, kind="stable")
    ids = ids[order]
    z = (vals[order].astype(np.float64) - float(vals[order[0]])) / params.temperature
    probs = np.exp(z)
    probs /= probs.sum()

    keep = len(probs)
    if params.top_p < 1.0:
        # smallest prefix whose mass reaches top_p
        keep = min(keep, int(np.searchsorted(np.cumsum(probs), params.top_p)) + 1)
    if params.min_p > 0.0:
        keep = min(keep, int(np.count_nonzero(probs >= params.min_p * probs[0])))
    if allowed is not None:  # (masked tokens sort last, with no probability)
        keep = min(keep, int(np.count_nonzero(probs > 0.0)))
    keep = max(keep, 1)
    if keep < len(probs):
        ids = ids[:keep]
        probs = probs[:keep] / probs[:keep].sum()
    return Distribution(ids, probs)
