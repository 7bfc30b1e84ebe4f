"""Drafters propose tokens for the target to verify: ``base.Drafter`` is the
protocol, ``registry`` declares each kind once."""
