"""PyInstaller entry point of the ``gambit-cli`` executable (a console program).

Besides the ``gambit-cli`` commands it answers ``--self-test`` and ``--about``
like the app does: on Windows the app itself has no console to print to.
"""

import sys

if __name__ == "__main__":
    if sys.argv[1:2] in (["--self-test"], ["--about"]):
        from gambit.ui.app import main as app_main

        raise SystemExit(app_main())
    from gambit.cli.main import main

    raise SystemExit(main())
