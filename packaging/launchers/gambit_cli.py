"""PyInstaller entry point of the ``gambit-cli`` executable (a console program).

Besides the ``gambit-cli`` commands it answers ``--self-test`` and ``--about``
like the app does (``gambit.cli.main.APP_MODES``): on Windows the app itself
has no console to print to.
"""

if __name__ == "__main__":
    from gambit.cli.main import main

    raise SystemExit(main())
