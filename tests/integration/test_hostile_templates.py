"""Hostile and broken chat templates: rendered by the real code under limits,
they end in one clear message naming the model (never a traceback, never a
hang), and Stop / Ctrl-C stops them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import gguf
import pytest

from gambit.engine.machine.runtime import RuntimeOptions
from gambit.engine.session import Engine, EngineConfig
from gambit.engine.text.chat import ChatTemplate, Message
from gambit.engine.text.reply import GenerationConfig, StopReason
from gambit.engine.text.template_sandbox import RenderCancelledError, RenderLimits
from gambit.engine.verification.sampling import SamplingParams
from gambit.errors import ChatTemplateError
from gguf_fixtures import copy_gguf, reader_of

MESSAGES = [Message("user", "Hi")]
SPIN = "{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}"
# Slow but within the loop limit: stopped by the deadline, or by Stop / Ctrl-C.
SLOW = "{% for a in range(100000) %}{{ range(100000)|sort|sum }}{% endfor %}"
HOSTILE = {
    "nested loops": (SPIN, "loops ran more than"),
    "300 MB string": ("{{ 'x' * 300000000 }}", "output grew past"),
    "range(10**9)": ("{% for i in range(10**9) %}{% endfor %}", "number 1e+09"),
    "width 10**9": ("{{ 'a'|center(10**9) }}", "number 1e+09"),
    "method width": ("{{ 'a'.ljust(10**9) }}", "number 1e+09"),
    "huge power": ("{{ 7 ** 100000000 }}", "too large"),
    "doubling": (
        "{% set ns = namespace(s='x') %}{% for i in range(64) %}"
        "{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
        "output grew past",
    ),
    "list doubling": (
        "{% set ns = namespace(l=[1]) %}{% for i in range(64) %}"
        "{% set ns.l = ns.l + ns.l %}{% endfor %}",
        "output grew past",
    ),
    "recursive macro": ("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "recursed"),
    "raise_exception": (
        "{{ raise_exception('Conversation roles must alternate user/assistant') }}",
        "Conversation roles must alternate user/assistant",
    ),
    "division by zero": ("{{ 1 / 0 }}", "ZeroDivisionError"),
    "sandbox escape": ("{{ ''.__class__.__mro__ }}", "failed"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_template_ends_in_a_message_naming_the_model(case: str) -> None:
    source, expected = HOSTILE[case]
    with pytest.raises(ChatTemplateError) as info:  # ended by a limit, not run forever
        ChatTemplate(source, model="hostile.gguf").render(MESSAGES)
    message = str(info.value)
    assert message.startswith("the chat template of hostile.gguf ")
    assert expected in message
    assert "\n" not in message and "Traceback" not in message


def test_syntax_error_is_a_message_with_the_line() -> None:
    with pytest.raises(ChatTemplateError, match=r"hostile\.gguf cannot be read: .*\(line 2\)"):
        ChatTemplate("{% for m in messages %}\n{{ m.content }", model="hostile.gguf")


def test_deadline_stops_a_slow_template() -> None:
    template = ChatTemplate(SLOW, model="slow.gguf", limits=RenderLimits(seconds=0.5))
    with pytest.raises(ChatTemplateError, match=r"ran longer than 0\.5 seconds"):
        template.render(MESSAGES)


def test_cancel_stops_a_spinning_template() -> None:
    cancel = threading.Event()
    threading.Timer(0.3, cancel.set).start()
    template = ChatTemplate(SPIN, limits=RenderLimits(loop_iterations=10**12))
    with pytest.raises(RenderCancelledError):  # the loop cap is out of reach: only cancel ends it
        template.render(MESSAGES, cancel=cancel)


def test_ordinary_templates_still_render() -> None:
    source = (
        "{% for m in messages %}{% set c = m.content|trim %}"
        "<{{ m.role }}>{{ c ~ '|' }}{{ loop.index }}{% endfor %}"
        "{% filter upper %}x{% endfilter %}{% set t %}{{ 'y' * 3 }}{% endset %}{{ t }}"
        "{{ '%s!'|format('z') }}{{ 2 ** 10 }}{% if add_generation_prompt %}<a>{% endif %}"
    )
    text = ChatTemplate(source).render([Message("user", " Hi "), Message("assistant", "Yo")])
    assert text == "<user>Hi|1<assistant>Yo|2Xyyyz!1024<a>"


# ------------------------------------------------------- real model files, real processes


def _with_template(src: gguf.GGUFReader, dst: Path, template: str) -> Path:
    def edit(name: str, value: object) -> object:
        return template if name == "tokenizer.chat_template" else value

    copy_gguf(src, dst, edit)
    return dst


@pytest.fixture(scope="module")
def hostile_models(tmp_path_factory: pytest.TempPathFactory, smol_q4_1: Path) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("hostile-templates")
    src = reader_of(smol_q4_1)
    return {
        "spin": _with_template(src, folder / "spin.gguf", SPIN),
        "slow": _with_template(src, folder / "slow.gguf", SLOW),
        "raise": _with_template(
            src, folder / "raise.gguf", "{{ raise_exception('System role not supported') }}"
        ),
        "syntax": _with_template(src, folder / "syntax.gguf", "{% if messages %}"),
    }


def _cli(*args: str | Path, home: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "GAMBIT_HOME": str(home)}
    return subprocess.Popen(
        [sys.executable, "-m", "gambit", *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        ("spin", "was stopped: its loops ran more than 1,000,000 times"),
        ("raise", "failed: System role not supported"),
        ("syntax", "cannot be read: Unexpected end of template"),
    ],
)
def test_cli_exits_2_with_one_line(
    hostile_models: dict[str, Path], tmp_path: Path, kind: str, expected: str
) -> None:
    model = hostile_models[kind]
    proc = _cli(
        "generate", "--target", model, "--threads", "1", "--ctx", "256", "Hi", home=tmp_path
    )
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 2, err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.startswith("gambit-cli: error:")]
    assert len(lines) == 1, err
    assert f"the chat template of {model.name}" in lines[0]
    assert expected in lines[0]


def test_ctrl_c_stops_a_slow_template_in_the_cli(
    hostile_models: dict[str, Path], tmp_path: Path
) -> None:
    args = ("generate", "--threads", "1", "--ctx", "256", "Hi")
    # How long loading takes here: a model whose template fails at once.
    t0 = time.monotonic()
    _cli(*args, "--target", hostile_models["raise"], home=tmp_path).communicate(timeout=120)
    load_s = time.monotonic() - t0
    proc = _cli(*args, "--target", hostile_models["slow"], home=tmp_path)
    try:
        # The template then runs for 10 s unless stopped: stop it in the middle.
        time.sleep(load_s + 2)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert "Traceback" not in err
    assert proc.returncode == 130, err
    # Ctrl-C, not the 10 s deadline, ended it: the deadline exits 2 with a message.
    assert "stop: cancelled" in err


def test_engine_stop_during_rendering_ends_the_reply_cancelled(
    hostile_models: dict[str, Path],
) -> None:
    options = RuntimeOptions(n_ctx=256, n_threads=1)
    config = GenerationConfig(max_tokens=8, sampling=SamplingParams(temperature=0.0))
    engine = Engine(EngineConfig(hostile_models["slow"], target_options=options))
    try:
        cancel = threading.Event()
        threading.Timer(0.5, cancel.set).start()
        rounds = list(engine.chat(MESSAGES, config, cancel))
        # Cancelled, not ended by the 10 s deadline (that would raise ChatTemplateError).
        assert [r.stop for r in rounds] == [StopReason.CANCELLED]
        assert rounds[0].text == ""
    finally:
        engine.close()
