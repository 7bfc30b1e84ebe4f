"""Gambit: local LLM chat made faster by speculative decoding that shows its bet."""

__version__ = "0.1.0"
