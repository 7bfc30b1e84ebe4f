"""What a generation measured, from its ``Round`` events. Definitions users can check:

- tokens_per_s: reply tokens / generation time, where generation time is the
  wall time from the end of prompt processing to the last token.
- ttft_ms: time to first token, from the request to the first visible token
  (prompt processing included).
- inter-token latency: for each reply token after the first, the time since
  the previous token arrived. Tokens that arrive together in one round count
  as one gap of the round's duration followed by gaps of 0, because that is
  what the reader sees. p50 / p99 are percentiles of these gaps.
- acceptance_rate: accepted draft tokens / drafted tokens.
- mean_accepted: accepted draft tokens per round that drafted anything.
- tokens_per_round: reply tokens per target pass (1 for plain decoding).
- overhead_share: share of wall time spent outside ``llama_decode`` (Python,
  numpy, sampling, verification) over the whole request.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from gambit.engine.decoder import Round


@dataclass
class GenerationStats:
    n_tokens: int = 0
    n_rounds: int = 0
    n_spec_rounds: int = 0
    n_drafted: int = 0
    n_accepted: int = 0
    ttft_s: float = 0.0
    prefill_s: float = 0.0
    elapsed_s: float = 0.0
    decode_s: float = 0.0  # time inside llama_decode, all models
    t_draft_s: float = 0.0
    t_verify_s: float = 0.0
    gaps_s: list[float] = field(default_factory=list)
    _last_emit: float | None = None

    def add(self, rnd: Round) -> None:
        self.n_rounds += 1 if rnd.tokens else 0
        self.n_drafted += rnd.n_drafted
        self.n_accepted += rnd.n_accepted
        self.n_spec_rounds += 1 if rnd.n_drafted else 0
        self.t_draft_s += rnd.t_draft_s
        self.t_verify_s += rnd.t_verify_s
        self.elapsed_s = rnd.elapsed_s
        k = len(rnd.tokens)
        if k == 0:
            return
        if self._last_emit is None:
            self.ttft_s = rnd.elapsed_s
            self.gaps_s.extend([0.0] * (k - 1))
        else:
            self.gaps_s.append(rnd.elapsed_s - self._last_emit)
            self.gaps_s.extend([0.0] * (k - 1))
        self._last_emit = rnd.elapsed_s
        self.n_tokens += k

    @classmethod
    def of(cls, rounds: Iterable[Round]) -> GenerationStats:
        stats = cls()
        for rnd in rounds:
            stats.add(rnd)
        return stats

    @property
    def generation_s(self) -> float:
        return max(self.elapsed_s - self.prefill_s, 1e-9)

    @property
    def tokens_per_s(self) -> float:
        return self.n_tokens / self.generation_s if self.n_tokens else 0.0

    @property
    def acceptance_rate(self) -> float:
        return self.n_accepted / self.n_drafted if self.n_drafted else 0.0

    @property
    def mean_accepted(self) -> float:
        return self.n_accepted / self.n_spec_rounds if self.n_spec_rounds else 0.0

    @property
    def tokens_per_round(self) -> float:
        return self.n_tokens / self.n_rounds if self.n_rounds else 0.0

    @property
    def overhead_share(self) -> float:
        return max(0.0, 1.0 - self.decode_s / self.elapsed_s) if self.elapsed_s else 0.0

    def latency_ms(self, percentile: float) -> float:
        return float(np.percentile(self.gaps_s, percentile) * 1000) if self.gaps_s else 0.0
