"""The command line's flags come from the settings' declarations."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from gambit.cli.main import build_parser, cli_settings
from gambit.cli.setting_flags import settings_from_args
from gambit.storage.settings import SETTINGS, Settings

FLAGGED = [name for name, declared in SETTINGS.items() if declared.flag is not None]


def _commands() -> dict[str, argparse.ArgumentParser]:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def _action(parser: argparse.ArgumentParser, flag: str) -> argparse.Action | None:
    return next((a for a in parser._actions if flag in a.option_strings), None)


def test_every_declared_flag_is_taken_with_the_settings_default_and_help() -> None:
    commands = _commands()
    defaults = Settings()
    own = {("bench", "temperature"): 0.0, ("bench", "max_tokens"): 128}  # set_defaults
    for name in FLAGGED:
        flag = SETTINGS[name].flag
        assert flag is not None
        taking = {c: _action(p, flag) for c, p in commands.items() if _action(p, flag)}
        assert taking, f"no command takes {flag}"
        for command, action in taking.items():
            assert action is not None
            expected = own.get((command, name), getattr(defaults, name))
            if isinstance(expected, bool):
                # a flag that turns the setting on, or (flag_sets False) off
                assert action.default is expected, (command, flag)
            else:
                assert action.default == expected, (command, flag)
                help_text = commands[command].format_help()
                assert flag in help_text


def test_parsed_flags_are_the_settings_the_window_would_hold() -> None:
    args = build_parser().parse_args(
        ["generate", "--temp", "0.2", "--top-k", "7", "--ctx", "2048", "--threads", "2",
         "--tree", "--tree-nodes", "6", "--gamma", "12", "--fast-kernels", "--seed", "5",
         "--gpu-layers", "-1", "--rpc", "10.0.0.2:50052, 10.0.0.3:50052", "hello"]
    )  # fmt: skip
    settings = cli_settings(args)
    assert settings == Settings().with_(
        temperature=0.2, top_k=7, context_size=2048, threads=2, tree_drafts=True,
        tree_nodes=6, fixed_gamma=12, gamma_max=16, exact_kernels=False, seed=5,
        gpu_layers_target=-1, gpu_layers_draft=-1,
        rpc_workers=("10.0.0.2:50052", "10.0.0.3:50052"),
    )  # fmt: skip
    assert settings.generation_config().sampling.seed == 5
    # --gamma past --gamma-max raises the ceiling with it (as before the flags were declared)
    higher = cli_settings(build_parser().parse_args(["generate", "--gamma-max", "4",
                                                     "--gamma", "6", "x"]))  # fmt: skip
    assert (higher.fixed_gamma, higher.gamma_max) == (6, 6)


def test_no_flags_give_the_window_s_engine(tmp_path: Path) -> None:
    """The command line and the window build the same engine records from the
    same defaults: one mapping (Settings.engine_config), not two."""
    args = build_parser().parse_args(["generate", "hello"])
    settings = cli_settings(args)
    target = tmp_path / "t.gguf"
    window = Settings().engine_config(target)
    assert settings.engine_config(target) == window
    assert settings.generation_config() == Settings().generation_config()


def test_flags_of_a_command_without_them_leave_the_settings_alone() -> None:
    args = argparse.Namespace(top_k=3)
    assert settings_from_args(args) == Settings().with_(top_k=3)


def _all_commands() -> dict[str, argparse.ArgumentParser]:
    """Every command, subcommands of subcommands too ("models layerskip")."""
    found: dict[str, argparse.ArgumentParser] = {}
    todo = [("", build_parser())]
    while todo:
        prefix, parser = todo.pop()
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    found[f"{prefix}{name}"] = sub
                    todo.append((f"{prefix}{name} ", sub))
    return found


def test_every_flag_a_help_line_names_is_a_flag_of_that_command() -> None:
    """Issue 35: serve's --gamma said it applies "with --policy fixed", and
    serve had no --policy."""
    wrong = []
    for command, parser in _all_commands().items():
        flags = {s for a in parser._actions for s in a.option_strings}
        for action in parser._actions:
            for named in re.findall(r"(?<![\w-])--[a-z][a-z-]*", action.help or ""):
                if named not in flags:
                    wrong.append(f"gambit-cli {command} {action.option_strings}: {named}")
    assert not wrong, wrong
