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


def _named_commands(text: str) -> set[tuple[str, ...]]:
    """``memvault WORD [WORD]`` inside backticks (a command as the reader would type it)."""
    import re

    found = set()
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("```")]  # fences pair no quotes
    for quoted in (q for line in lines for q in re.findall(r"`+([^`]+)`+", line)):
        words = quoted.split()
        if len(words) >= 2 and words[0] == "memvault" and re.fullmatch(r"[a-z][a-z-]*", words[1]):
            found.add(tuple(w for w in words[1:3] if re.fullmatch(r"[a-z][a-z-]*", w)))
    return found


def test_every_command_and_module_the_docs_name_exists():
    """The docs once sent readers to `memvault status` (it is `memvault stats`) and to `memvault.errors` (a module
    gone since the layer split): every command and module named in backticks in the README, docs/ (but the dated
    benchmark log) and the CLI's help must exist."""
    import re

    import click

    from memvault.interfaces.cli import cli

    gen = load_generator()
    pages = [REPO_ROOT / "README.md", *sorted(p for p in gen.DOCS.glob("*.md") if p.name != "benchmarks.md")]
    wrong = []
    for page in pages:
        text = page.read_text()
        for command in sorted(_named_commands(text)):
            group: click.Command = cli
            for depth, word in enumerate(command):
                if not isinstance(group, click.Group):
                    break  # the next word is an argument
                sub = group.commands.get(word)
                if sub is None:
                    if depth == 0:
                        wrong.append(f"{page.name}: memvault {' '.join(command)}")
                    break
                group = sub
        for name in sorted(set(re.findall(r"`(memvault(?:\.[A-Za-z_]+)+)", text)) - {"memvault.toml"}):
            if not _resolves(name) and not _pg_table(name):
                wrong.append(f"{page.name}: {name}")
    assert not wrong, wrong


def _resolves(dotted: str) -> bool:
    """``memvault.a.b.C.d``: the longest prefix that is a module, then attributes of it."""
    import importlib

    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attr in parts[cut:]:
            if not hasattr(found, attr):
                return False
            found = getattr(found, attr)
        return True
    return False


def _pg_table(dotted: str) -> bool:
    """``memvault.TABLE``: a table of the PostgreSQL schema the team index creates."""
    sql = (REPO_ROOT / "memvault/index/postgres/migrations.py").read_text()
    return dotted.count(".") == 1 and f"CREATE TABLE {dotted} (" in sql
