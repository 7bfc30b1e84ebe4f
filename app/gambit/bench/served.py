"""``gambit-cli bench --through-server``: does the local server cost anything per token?

The same prompts, on the same loaded models, alternately through the engine
directly (as ``gambit-cli generate`` runs it) and through the OpenAI-compatible
server on this machine (``gambit.serve``: HTTP, the request's queue, the
engine thread, server-sent events), each reply streamed to a process of its
own: on the direct path, as ``generate`` writes a round's text to the terminal
that shows it, to a reader on a pipe; through the server, to a client. Both
note when each round's text arrives. Compared: the rate at which a reply's
tokens arrive after its first, as that process sees them.
A ratio of 1.00 means the server adds nothing per token.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from dataclasses import dataclass, field

from gambit.bench.paired import paired_ratio
from gambit.bench.runner import load_prompts
from gambit.engine.session import Engine, EngineConfig
from gambit.engine.text.chat import Message
from gambit.engine.text.reply import GenerationConfig
from gambit.engine.verification.sampling import SamplingParams
from gambit.serve.jobs import ThreadHost, model_name
from gambit.serve.openai_api import ServeOptions, create_app
from gambit.serve.prometheus import ServeMetrics
from gambit.serve.server import LocalServer
from gambit.words import counted


@dataclass
class Rates:
    """Tokens after each reply's first, and the seconds they took to arrive."""

    tokens: int = 0
    seconds: float = 0.0
    per_reply: list[float] = field(default_factory=list)

    def add(self, tokens: int, seconds: float) -> None:
        if tokens > 0 and seconds > 0:
            self.tokens += tokens
            self.seconds += seconds
            self.per_reply.append(tokens / seconds)

    @property
    def rate(self) -> float:
        return self.tokens / self.seconds if self.seconds else 0.0


def _cold(engine: Engine) -> None:
    """Both paths start every reply with empty caches: a reply that found its
    twin's prompt still cached would skip the prompt reading that the other
    path paid. (Between replies the engine's thread is idle.)"""
    engine.target.clear()
    if engine.draft_runtime is not None:
        engine.draft_runtime.clear()
    engine.chat_builder.forget()


# What stands for the terminal of `gambit-cli generate`: a process that reads
# the reply's text from a pipe, a round per line, and says when the first and
# the last arrived (the same clock as the server's client below).
_READER = """
import json, sys, time
print("ready", flush=True)
first = last = 0.0
for line in sys.stdin:
    now = time.perf_counter()
    first = first or now
    last = now
print(json.dumps(last - first))
"""


def _direct(engine: Engine, prompt: str, config: GenerationConfig) -> tuple[int, float]:
    _cold(engine)
    reader = subprocess.Popen(
        [sys.executable, "-c", _READER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert reader.stdin is not None and reader.stdout is not None
    try:
        reader.stdout.readline()  # started: its start-up is not the reply's
        tokens = 0
        for rnd in engine.chat([Message("user", prompt)], config):
            tokens += len(rnd.tokens)
            if rnd.text:
                reader.stdin.write(json.dumps(rnd.text) + "\n")
                reader.stdin.flush()
        reader.stdin.close()
        seconds = float(json.loads(reader.stdout.read()))
    finally:
        if reader.poll() is None:
            reader.kill()
        reader.wait()
    # Lines carry a round's text each: the tokens after the first line's.
    return max(0, tokens - 1), seconds


# The caller runs in a process of its own, as an editor or a script does: a
# client parsing events on this process's interpreter would take turns with the
# engine's thread and charge its own work to the server.
_CLIENT = """
import http.client, json, sys, time
port, body = int(sys.argv[1]), sys.argv[2]
conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
conn.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
first = last = 0.0
tokens = 0
for line in conn.getresponse():
    if not line.startswith(b"data: {"):
        continue
    chunk = json.loads(line[6:])
    now = time.perf_counter()
    if chunk["choices"][0]["delta"].get("content"):
        first = first or now
        last = now
    if "gambit" in chunk:
        tokens = int(chunk["usage"]["completion_tokens"])
conn.close()
print(json.dumps([tokens, last - first]))
"""


def _served(port: int, model: str, prompt: str, config: GenerationConfig) -> tuple[int, float]:
    body = {
        "model": model, "stream": True, "max_tokens": config.max_tokens,
        "temperature": config.sampling.temperature, "seed": config.sampling.seed,
        "messages": [{"role": "user", "content": prompt}],
    }  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-c", _CLIENT, str(port), json.dumps(body)],
        capture_output=True, text=True, timeout=900, check=True,
    )  # fmt: skip
    tokens, seconds = json.loads(done.stdout)
    # Chunks carry a round's text each: the tokens after the first chunk's.
    return max(0, int(tokens) - 1), float(seconds)


def run_served_bench(
    args: argparse.Namespace, config: EngineConfig, sampling: SamplingParams
) -> int:
    prompts = load_prompts(args.prompts)[: args.limit or None]
    if sampling.seed is None:
        sampling = SamplingParams(**{**sampling.__dict__, "seed": 1234})
    generation = GenerationConfig(max_tokens=args.max_tokens, sampling=sampling)
    engine = Engine(config)
    name = model_name(config.target.name)
    host = ThreadHost(engine, name)
    # One controller for both paths, as the window's engine has one.
    controller = engine.controller
    server = LocalServer(create_app(host, ServeOptions(), ServeMetrics()), "127.0.0.1", 0)
    server.start()
    direct, served = Rates(), Rates()
    pairs: list[tuple[float, float]] = []  # (direct, served) tok/s, prompt by prompt
    try:
        _direct(engine, "Hello", GenerationConfig(max_tokens=8, sampling=sampling))  # warm up
        for i, bp in enumerate(prompts * max(1, args.repeat)):
            runs = [("direct", direct), ("served", served)]
            rate = {}
            for path, rates in runs if i % 2 == 0 else runs[::-1]:
                if path == "direct":
                    engine.use_controller(controller)
                    tokens, seconds = _direct(engine, bp.prompt, generation)
                else:
                    _cold(engine)
                    tokens, seconds = _served(server.port, name, bp.prompt, generation)
                rates.add(tokens, seconds)
                rate[path] = tokens / seconds if tokens > 0 and seconds > 0 else 0.0
            pairs.append((rate["direct"], rate["served"]))
            print(f"  [{i + 1}] direct {direct.rate:6.1f} tok/s  served {served.rate:6.1f} tok/s",
                  file=sys.stderr, flush=True)  # fmt: skip
    finally:
        server.stop()
        host.close()
        engine.close()
    ratio = served.rate / direct.rate if direct.rate else 0.0
    n = len(direct.per_reply)
    replies = counted(n, "reply", "replies")
    print(f"tokens after the first, as the caller receives them ({replies} each)")
    print(f"direct (as gambit-cli generate): {direct.rate:.1f} tok/s")
    print(f"through the local server:        {served.rate:.1f} tok/s")
    print(f"served / direct:                 {ratio:.3f}")
    paired = paired_ratio(pairs)
    if paired is not None:
        mean, low, high = paired
        print(f"per prompt, geometric mean:      {mean:.3f} (95 % interval {low:.3f}-{high:.3f})")
    return 0
