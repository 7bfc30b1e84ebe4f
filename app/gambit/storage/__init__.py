"""Where Gambit keeps things on disk."""
