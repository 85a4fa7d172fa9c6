"""Docs that are generated from the code must match it; the README's set-up commands must stay what CI runs."""
from __future__ import annotations

import importlib.util
import subprocess

import pytest

from conftest import REPO_ROOT


def load_generator():
    spec = importlib.util.spec_from_file_location("docs_generate", REPO_ROOT / "docs" / "generate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_cli_reference_is_up_to_date():
    gen = load_generator()
    assert gen.TARGET.read_text() == gen.render(), "docs/cli.md is stale: run python docs/generate.py"


def test_reference_tables_are_generated_from_the_code():
    gen = load_generator()
    for page in gen.PAGES:
        text = page.read_text()
        assert text == gen.generated(page, text), f"{page.name}'s generated tables are stale: run python docs/generate.py"
    # every setting of memvault.toml is documented
    from memvault.rules import config

    text = (gen.DOCS / "reference.md").read_text()
    for section, key, _default, _help in config.settings():
        assert f"`[{section}] {key}`" in text


def test_every_exit_code_a_command_can_end_with_is_documented():
    from memvault.interfaces.cli import cli
    from memvault.rules.errors import EXIT_CODES, InvalidValue, describe

    codes = {describe(InvalidValue("x", "bad"))[1], describe(OSError(2, "gone", "f"))[1],
             describe(KeyboardInterrupt())[1], describe(RuntimeError("bug"))[1]}
    from click.testing import CliRunner

    codes.add(CliRunner().invoke(cli, ["no-such-command"]).exit_code)  # a usage error
    codes.add(0)
    assert codes <= set(EXIT_CODES), codes - set(EXIT_CODES)


def test_readme_starts_with_two_setup_commands_and_ci_runs_the_second():
    text = (REPO_ROOT / "README.md").read_text()
    block = text.split("```sh\n", 1)[1].split("```", 1)[0].strip().splitlines()
    assert len(block) == 2
    assert "memvault.demo" in block[0] and "pytest" in block[1]
    assert text.index("```sh") < 20  # right at the top
    ci = (REPO_ROOT / ".ci" / "run").read_text()
    assert "sed -n 2p" in ci and "README.md" in ci


@pytest.mark.model
def test_demo_runs_and_leaves_the_shipped_vault_untouched(tmp_path):
    before = subprocess.run(["git", "status", "--porcelain", "--", "vault"], cwd=REPO_ROOT, capture_output=True,
                            text=True).stdout
    import sys

    import os

    # as a user runs it: with the warm embedder daemon it starts for itself (and stops at the end)
    env = {k: v for k, v in os.environ.items() if k != "MEMVAULT_NO_DAEMON"}
    proc = subprocess.run([sys.executable, "-m", "memvault.demo"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "demo finished" in proc.stdout and "recorded run" in proc.stderr + proc.stdout
    after = subprocess.run(["git", "status", "--porcelain", "--", "vault"], cwd=REPO_ROOT, capture_output=True,
                           text=True).stdout
    assert after == before
