"""PyInstaller entry point of the ``gambit`` executable (the desktop app)."""

from gambit.ui.app import main

if __name__ == "__main__":
    raise SystemExit(main())
