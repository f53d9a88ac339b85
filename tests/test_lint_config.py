"""The linters run in one version everywhere: pre-commit's hooks (.pre-commit-config.yaml) pin the
versions of ruff and clang-format that pyproject.toml's ``dev`` extra pins (and requirements.txt,
which ``make lint`` installs: tests/test_packaging.py checks those two agree)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")


def dev_pins() -> dict[str, str]:
    with open(ROOT / "pyproject.toml", "rb") as f:
        dev = tomllib.load(f)["project"]["optional-dependencies"]["dev"]
    return dict(re.match(r"([A-Za-z0-9._-]+)==(.+)$", r).groups() for r in dev if "==" in r)


def hooks() -> dict[str, dict]:
    """hook id -> {"repo", "rev", ...} of .pre-commit-config.yaml."""
    config = yaml.safe_load((ROOT / ".pre-commit-config.yaml").read_text(encoding="utf-8"))
    return {h["id"]: {"repo": r["repo"], "rev": r.get("rev"), **h} for r in config["repos"] for h in r["hooks"]}


def test_pre_commit_pins_the_dev_versions():
    pins, found = dev_pins(), hooks()
    for hook, package in (("ruff-check", "ruff"), ("ruff-format", "ruff"), ("clang-format", "clang-format")):
        assert hook in found, f".pre-commit-config.yaml has no {hook} hook"
        assert found[hook]["rev"] == f"v{pins[package]}", (
            f"{hook}: rev {found[hook]['rev']}, pyproject pins {package}=={pins[package]}"
        )


def test_pre_commit_checks_the_notebooks_as_make_lint_does():
    hook = hooks()["notebooks-in-shape"]
    assert hook["entry"] == "python tools/sync_notebooks.py --check"
    assert "tools/sync_notebooks.py --check" in (ROOT / "Makefile").read_text(encoding="utf-8")
