"""Drafters propose tokens for the target to verify; see ``base.Drafter``."""

from gambit.engine.drafters.base import Draft, Drafter

__all__ = ["Draft", "Drafter"]
