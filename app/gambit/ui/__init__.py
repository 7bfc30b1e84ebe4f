"""Gambit's desktop user interface (PySide6)."""
