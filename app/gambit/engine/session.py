"""An engine session: target + drafter loaded, checked and ready to chat.

This is the one object the CLI, the benchmark and the GUI worker drive.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from gambit.engine.chat import ChatPromptBuilder, Message
from gambit.engine.decoder import (
    FixedGamma,
    GammaPolicy,
    GenerationConfig,
    Round,
    SpeculativeDecoder,
)
from gambit.engine.drafters.base import Drafter
from gambit.engine.drafters.draft_model import DraftModelDrafter, check_compatible
from gambit.engine.drafters.lookup import PromptLookupDrafter
from gambit.engine.runtime import ModelRuntime, RuntimeOptions

log = logging.getLogger(__name__)

DrafterKind = Literal["none", "draft", "lookup"]


@dataclass(frozen=True)
class EngineConfig:
    target: Path
    drafter: DrafterKind = "none"
    draft: Path | None = None  # with drafter="draft"
    target_options: RuntimeOptions = field(default_factory=RuntimeOptions)
    draft_options: RuntimeOptions | None = None  # default: the target's
    gamma: int = 4  # fixed draft length, until a policy is given
    lookup_ngram_max: int = 3

    def __post_init__(self) -> None:
        if self.drafter == "draft" and self.draft is None:
            raise ValueError("a draft model path is needed for drafter='draft'")
        if self.gamma < 0:
            raise ValueError("gamma must be 0 or more")


class Engine:
    def __init__(self, config: EngineConfig, policy: GammaPolicy | None = None) -> None:
        self.config = config
        self.target = ModelRuntime(config.target, config.target_options)
        self.draft_runtime: ModelRuntime | None = None
        drafter: Drafter | None = None
        try:
            if config.drafter == "draft":
                assert config.draft is not None
                self.draft_runtime = ModelRuntime(
                    config.draft, config.draft_options or config.target_options
                )
                check_compatible(self.target, self.draft_runtime)
                drafter = DraftModelDrafter(self.draft_runtime)
            elif config.drafter == "lookup":
                drafter = PromptLookupDrafter(ngram_max=config.lookup_ngram_max)
        except BaseException:
            self.close()
            raise
        self.drafter = drafter
        self.decoder = SpeculativeDecoder(
            self.target, drafter, policy or FixedGamma(config.gamma if drafter else 0)
        )
        self._chat: ChatPromptBuilder | None = None

    @property
    def chat_builder(self) -> ChatPromptBuilder:
        if self._chat is None:
            self._chat = ChatPromptBuilder(self.target)
        return self._chat

    def chat(
        self,
        messages: Sequence[Message],
        config: GenerationConfig,
        cancel: threading.Event | None = None,
    ) -> Iterator[Round]:
        """Stream the assistant's reply to ``messages``, one round at a time."""
        builder = self.chat_builder
        prompt = builder.build(messages, reserve=config.max_tokens)
        if prompt.n_dropped:
            log.info("left out the %d oldest messages to fit the context", prompt.n_dropped)
        try:
            yield from self.decoder.generate(prompt.tokens, config, cancel)
        finally:
            builder.remember(prompt, self.decoder.context)

    def complete(
        self,
        text: str,
        config: GenerationConfig,
        cancel: threading.Event | None = None,
    ) -> Iterator[Round]:
        """Plain completion of ``text`` (base models, no chat template)."""
        tokens = self.target.tokenize(text, add_special=True, parse_special=False)
        yield from self.decoder.generate(tokens, config, cancel)

    def close(self) -> None:
        if self.draft_runtime is not None:
            self.draft_runtime.close()
        self.target.close()
