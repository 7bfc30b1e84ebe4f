"""Quit the real app many times in a row along each path of tests/gui/test_quit.py.

Outside the suite (minutes): ``python tests/quit_soak.py [RUNS] [PATH ...]``,
with the app's source first on PYTHONPATH. Prints each run's exit status and
any line of stderr that names a QObject, a fatal error or a traceback, then a
summary; exits 1 if any run did not end cleanly.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent / "gui"))

from test_quit import DRIVER, TIMEOUT_S

from gambit.models.default_model import DEFAULT_MODEL_FILE, default_model_path
from gambit.storage.settings import Settings, SettingsStore

MODEL_CACHE = Path(
    os.environ.get("GAMBIT_TEST_MODELS", Path.home() / ".cache" / "gambit-test-models")
)
MAX_TOKENS = {"models": 8, "dialogs": 8, "streaming": 400}
BAD = ("QObject", "Fatal Python error", "Traceback")


def one_run(path: str, model: Path) -> tuple[int, list[str]]:
    with tempfile.TemporaryDirectory(prefix="gambit-quit-") as tmp:
        home = Path(tmp)
        models = home / "data" / "models"
        models.mkdir(parents=True)
        (models / DEFAULT_MODEL_FILE).symlink_to(model)
        settings = Settings(
            max_tokens=MAX_TOKENS[path], temperature=0.0, threads=2, context_size=1024
        )
        SettingsStore(home / "config" / "settings.json").save(settings)
        env = {
            **os.environ,
            "GAMBIT_HOME": str(home),
            "GAMBIT_CACHE": str(MODEL_CACHE / "cache"),
            "QT_QPA_PLATFORM": "offscreen",
        }
        proc = subprocess.run(
            [sys.executable, "-c", DRIVER, path],
            capture_output=True, text=True, env=env, timeout=TIMEOUT_S, check=False,
        )  # fmt: skip
    return proc.returncode, [ln for ln in proc.stderr.splitlines() if any(b in ln for b in BAD)]


def main(argv: list[str]) -> int:
    runs = int(argv[0]) if argv else 20
    paths = argv[1:] or ["dialogs", "streaming"]
    model = default_model_path(MODEL_CACHE)
    failed = 0
    for path in paths:
        codes: list[int] = []
        for i in range(runs):
            code, bad = one_run(path, model)
            codes.append(code)
            failed += code != 0 or bool(bad)
            print(f"{path} run {i + 1:2d}: exit {code}", *bad, sep="\n    ", flush=True)
        clean = sum(c == 0 for c in codes)
        print(f"{path}: {clean} of {runs} exited 0; exit codes {sorted(set(codes))}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
