"""Every error Gambit raises on purpose: one class per thing a user can get wrong.

Each message says what happened and what to do about it, because it is shown
to the user as it is (CLI stderr, GUI error dialog).
"""

from __future__ import annotations


class GambitError(Exception):
    """Base class: an expected failure with a message meant for the user."""


class ModelFileError(GambitError):
    """A model file cannot be used. ``path`` names it."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{message}: {path}")
        self.path = path


class ModelNotFoundError(ModelFileError):
    pass


class NotAFileError(ModelFileError):
    pass


class EmptyModelFileError(ModelFileError):
    pass


class NotGGUFError(ModelFileError):
    pass


class TruncatedModelError(ModelFileError):
    pass


class DamagedModelError(ModelFileError):
    """The GGUF header says something impossible (a count larger than the file,
    a value of the wrong type, an unknown weight type): llama.cpp refuses it."""


class ModelLoadError(ModelFileError):
    """The header looked fine but llama.cpp refused the file."""


class IncompatibleDraftError(GambitError):
    """The draft model cannot speculate for the target (different tokenizer)."""


class ContextOverflowError(GambitError):
    """The prompt does not fit in the context window, even after trimming history."""


class NoInfillError(GambitError):
    """The model declares no fill-in-the-middle tokens, so it cannot fill in a middle."""


class NoChatTemplateError(GambitError):
    """The model carries no chat template, so chat messages cannot be formatted."""


class ChatTemplateError(GambitError):
    """The model's chat template failed: its own error, a syntax error, or a limit hit."""


class DecodeError(GambitError):
    """llama_decode failed (out of KV slots, aborted, or a backend error)."""


class DecodeAbortedError(DecodeError):
    """llama_decode stopped midway because its abort event was set (Stop, Ctrl-C, close)."""


class OperationCancelledError(GambitError):
    """The user stopped a long job (Cancel, Ctrl-C, SIGTERM); it left no partial file."""


class ProvisioningError(GambitError):
    """The embedded default model could not be obtained or failed its checks."""
