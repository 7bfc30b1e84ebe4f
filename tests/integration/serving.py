"""The local server on the real engine, for the server's tests: the pair it
serves (SmolLM2 Q8_0 drafted by Q4_1), a server on a free port with OpenAI's
client and raw HTTP, and what the command line writes for the same prompt.
The fixtures that make them are in this folder's conftest.py."""

from __future__ import annotations

import http.client
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import openai

from gambit.engine.machine.runtime import RuntimeOptions
from gambit.engine.session import Engine
from gambit.engine.verification.sampling import SamplingParams
from gambit.serve.jobs import ThreadHost
from gambit.serve.openai_api import ServeOptions, create_app
from gambit.serve.prometheus import ServeMetrics
from gambit.serve.server import LocalServer

OPTIONS = RuntimeOptions(n_ctx=1024, n_threads=2)
PROMPT = "Repeat this sentence twice, exactly: The quick brown fox jumps over the lazy dog."
MODEL = "SmolLM2-135M-Instruct.Q8_0"
DEADLINE_S = 120.0  # hang guards only


class Served:
    def __init__(self, engine: Engine, **options: Any) -> None:
        self.host = ThreadHost(engine, MODEL)
        self.metrics = ServeMetrics()
        defaults = SamplingParams(temperature=0.0, seed=0)
        app = create_app(self.host, ServeOptions(defaults=defaults, **options), self.metrics)
        self.server = LocalServer(app, "127.0.0.1", 0)
        self.server.start()
        self.port = self.server.port

    def client(self, key: str = "none") -> openai.OpenAI:
        return openai.OpenAI(base_url=self.server.base_url, api_key=key, max_retries=0)

    def raw(self, method: str, path: str, body: bytes | str | None = None,
            headers: dict[str, str] | None = None) -> tuple[int, Any]:  # fmt: skip
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=DEADLINE_S)
        data = body.encode() if isinstance(body, str) else body
        conn.request(method, path, body=data, headers={"Content-Type": "application/json",
                                                        **(headers or {})})  # fmt: skip
        response = conn.getresponse()
        payload = response.read().decode()
        conn.close()
        kind = response.getheader("Content-Type", "")
        return response.status, json.loads(payload) if "json" in kind else payload

    def close(self) -> None:
        self.server.stop()
        self.host.close()


def generate_cli(
    smol_q8_0: Path, smol_q4_1: Path, max_tokens: int, prompt: str = PROMPT, raw: bool = False
) -> str:
    """What ``gambit-cli generate`` writes for ``prompt`` on the served pair
    (``raw``: a plain completion, as /v1/completions makes)."""
    proc = subprocess.run(
        [sys.executable, "-m", "gambit", "generate", "--target", str(smol_q8_0),
         "--draft", str(smol_q4_1), "--policy", "fixed", "--gamma", "4", "--temp", "0",
         "--seed", "0", "--threads", "2", *(["--raw"] if raw else []),
         "--ctx", "1024", "--max-tokens", str(max_tokens), prompt],
        capture_output=True, text=True, timeout=300, check=True,
    )  # fmt: skip
    return proc.stdout.removesuffix("\n")
