"""PyInstaller entry point of the ``gambit-worker`` executable (a console program).

Serves this machine's CPU to a Gambit elsewhere over llama.cpp's RPC backend
(``gambit.cli.worker``); it needs no Qt, and shares the bundle's Python and
llama.cpp libraries with ``gambit`` and ``gambit-cli``.
"""

import sys

if __name__ == "__main__":
    from gambit.cli.worker import main

    sys.exit(main())
