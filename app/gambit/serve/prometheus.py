"""The served replies' counters, in Prometheus' text format (``GET /metrics``).

Besides what llama-server exports (requests, tokens, drafted and accepted
tokens, accepted tokens per draft position), whether the bet paid: a
histogram of the speedups replies measured against plain decoding.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Mapping
from typing import Any

from gambit.serve.jobs import Outcome

SPEEDUP_BUCKETS = (0.5, 0.75, 0.9, 1.0, 1.1, 1.25, 1.5, 2.0, 3.0, 4.0)


class ServeMetrics:
    """Counters updated as replies end (any thread) and read by ``render``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.requests: Counter[str] = Counter()  # by HTTP status
        self.replies: Counter[str] = Counter()  # by finish reason ("stop", "cancelled", ...)
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.drafted = 0
        self.accepted = 0
        self.drafted_by_position: Counter[int] = Counter()
        self.accepted_by_position: Counter[int] = Counter()
        self.accepted_by_source: Counter[str] = Counter()  # "draft model", "grammar", ...
        self.speedups: list[int] = [0] * len(SPEEDUP_BUCKETS)  # cumulative, per bucket
        self.speedup_count = 0
        self.speedup_sum = 0.0
        self.in_flight = 0

    def request(self, status: int) -> None:
        with self._lock:
            self.requests[str(status)] += 1

    def started(self) -> None:
        with self._lock:
            self.in_flight += 1

    def ended(self) -> None:
        with self._lock:
            self.in_flight -= 1

    def finished(self, outcome: Outcome) -> None:
        """A reply ended on the engine (read by its client or not)."""
        figures = outcome.figures
        with self._lock:
            self.replies["error" if outcome.error else outcome.finish_reason] += 1
            if figures is None:
                return
            self.prompt_tokens += figures.prompt_tokens
            self.completion_tokens += figures.completion_tokens
            self.drafted += figures.drafted
            self.accepted += figures.accepted
            for i, n in enumerate(figures.drafted_by_position, 1):
                self.drafted_by_position[i] += n
            for i, n in enumerate(figures.accepted_by_position, 1):
                self.accepted_by_position[i] += n
            self.accepted_by_source.update(figures.accepted_by_drafter)
            if figures.speedup is not None:
                self.speedup_count += 1
                self.speedup_sum += figures.speedup
                for i, bound in enumerate(SPEEDUP_BUCKETS):
                    self.speedups[i] += figures.speedup <= bound

    def render(self) -> str:
        with self._lock:
            lines = [
                *_labelled(
                    "gambit_requests_total",
                    "Completion requests (chat and text), by HTTP status.",
                    "status",
                    self.requests,
                ),
                *_labelled(
                    "gambit_replies_total",
                    "Replies the engine ended, by finish reason.",
                    "finish",
                    self.replies,
                ),
                "# HELP gambit_requests_in_flight Requests running or waiting for the engine.",
                "# TYPE gambit_requests_in_flight gauge",
                f"gambit_requests_in_flight {self.in_flight}",
                *_counter("gambit_prompt_tokens_total", "Prompt tokens read.", self.prompt_tokens),
                *_counter(
                    "gambit_completion_tokens_total", "Tokens generated.", self.completion_tokens
                ),
                *_counter("gambit_draft_tokens_total", "Draft tokens proposed.", self.drafted),
                *_counter(
                    "gambit_draft_tokens_accepted_total",
                    "Draft tokens the target accepted.",
                    self.accepted,
                ),
                *_labelled(
                    "gambit_draft_tokens_accepted_by_source_total",
                    "Draft tokens the target accepted, by what drafted them (a grammar's"
                    " forced tokens: grammar).",
                    "source",
                    self.accepted_by_source,
                ),
                *_labelled(
                    "gambit_draft_position_tried_total",
                    "Rounds that tried a draft position.",
                    "position",
                    self.drafted_by_position,
                ),
                *_labelled(
                    "gambit_draft_position_accepted_total",
                    "Draft tokens accepted, by position.",
                    "position",
                    self.accepted_by_position,
                ),
                "# HELP gambit_speedup Replies' speedup over plain decoding on this machine"
                " (replies that drafted).",
                "# TYPE gambit_speedup histogram",
                *(
                    f'gambit_speedup_bucket{{le="{bound}"}} {n}'
                    for bound, n in zip(SPEEDUP_BUCKETS, self.speedups, strict=True)
                ),
                f'gambit_speedup_bucket{{le="+Inf"}} {self.speedup_count}',
                f"gambit_speedup_sum {self.speedup_sum:.6g}",
                f"gambit_speedup_count {self.speedup_count}",
            ]
        return "\n".join(lines) + "\n"


def _counter(name: str, help_text: str, value: int) -> list[str]:
    return [f"# HELP {name} {help_text}", f"# TYPE {name} counter", f"{name} {value}"]


def _labelled(name: str, help_text: str, label: str, counts: Mapping[Any, int]) -> list[str]:
    """A counter with one label, a line per value of it, in sorted order."""
    return [
        f"# HELP {name} {help_text}",
        f"# TYPE {name} counter",
        *(f'{name}{{{label}="{value}"}} {n}' for value, n in sorted(counts.items())),
    ]
