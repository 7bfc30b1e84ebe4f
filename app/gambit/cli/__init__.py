"""``gambit-cli``: the command line, an entry point beside the window.

``main`` parses the commands (generate, bench, models ...), ``models`` holds
the ``models`` sub-commands, ``selftest`` the self-test that ``gambit
--self-test`` and ``gambit-cli --self-test`` run, ``stop_signals`` turns
Ctrl-C and SIGTERM into a request to stop. Nothing below the entry points
imports this package.
"""
