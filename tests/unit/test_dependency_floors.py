"""Dependency floors that close known holes stay raised.

Chat templates come inside model files, so they are untrusted input rendered
by jinja2's sandbox: versions before 3.1.6 let a template escape it
(CVE-2024-56326, CVE-2025-27516). The floor in pyproject.toml and the version
installed here both have to be past that."""

from __future__ import annotations

import re
from pathlib import Path

import jinja2
from packaging.requirements import Requirement
from packaging.version import Version

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"
JINJA2_FIXED = Version("3.1.6")


def _requirement(name: str) -> Requirement:
    text = PYPROJECT.read_text(encoding="utf-8")
    deps = re.search(r"^dependencies = \[(.*?)^\]", text, re.S | re.M)
    assert deps is not None
    specs = [Requirement(s) for s in re.findall(r'^\s*"([^"]+)"', deps.group(1), re.M)]
    [req] = [r for r in specs if r.name.lower() == name]
    return req


def test_jinja2_floor_is_past_the_sandbox_escapes() -> None:
    req = _requirement("jinja2")
    floors = [Version(s.version) for s in req.specifier if s.operator in (">=", "==", "~=")]
    assert floors and min(floors) >= JINJA2_FIXED
    assert not req.specifier.contains("3.1.5")  # the last version with the escapes


def test_the_installed_jinja2_is_past_them() -> None:
    assert Version(jinja2.__version__) >= JINJA2_FIXED
