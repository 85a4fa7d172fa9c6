"""``memvault recall`` answered by the warm process before click and the vault code are imported (a cold recall at
10k facts: 0.25 s -> ~0.07 s, docs/benchmarks.md, issue 24): the same output as the full CLI, and the full CLI for
every command line the quick path does not read completely."""
from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
from click.testing import CliRunner

from memvault.interfaces import quick
from memvault.interfaces.cli import cli
from conftest import REPO_ROOT
from warm_server import serving


@pytest.fixture
def warm_vault(vault, models, monkeypatch):
    """A vault with three facts and a warm process (a thread of this process, fake model) serving it."""
    monkeypatch.delenv("MEMVAULT_NO_DAEMON", raising=False)
    vault.facts.set("db/primary", "The primary database listens on 10.8.0.4 port 5432.", source="user:t")
    vault.facts.set("db/backup", "Snapshots of the database run nightly to s3://backups.", source="user:t")
    vault.facts.set("web/tls", "The TLS certificate renews on the first of the month.", source="user:t")
    with serving(models):
        yield vault


@pytest.mark.parametrize("argv, expected", [
    (["recall", "db port"], {"query": "db port"}),
    (["--vault", "/v", "recall", "q", "--json"], {"vault": "/v", "query": "q", "fmt": "json"}),
    (["--json", "recall", "q", "-k", "3", "--kind", "fact", "--kind", "episode", "--no-record"],
     {"fmt": "json", "query": "q", "k": 3, "kinds": ["fact", "episode"], "record": False}),
    (["recall", "q", "--format=prompt", "--budget=400", "--mode", "keyword", "--min-relevance", "0.2",
      "--since", "7d", "-s", "agent:x"],
     {"query": "q", "fmt": "prompt", "budget": 400, "mode": "keyword", "min_relevance": 0.2, "since": "7d",
      "source": "agent:x"}),
])
def test_a_recall_line_it_reads(argv, expected):
    assert quick.parse(argv) == expected


@pytest.mark.parametrize("argv", [
    [], ["recall"], ["recall", "  "], ["fact", "get", "x"], ["recall", "q", "--explain"], ["recall", "q", "--help"],
    ["--version"], ["recall", "q", "--include-superseded"], ["recall", "q", "-k", "0"], ["recall", "q", "-k", "1001"],
    ["recall", "q", "-k5"], ["recall", "q", "-k"], ["recall", "q", "--kind", "facts"], ["recall", "q", "--format", "xml"],
    ["recall", "q", "--json", "--format", "text"], ["recall", "q", "--min-relevance", "2"],
    ["recall", "q", "--budget", "-1"], ["recall", "q", "--mode", "fuzzy"], ["recall", "q", "--since", "1d", "--since", "2d"],
    ["recall", "q", "--", "x"], ["recall", "a", "b"], ["recall", "q", "--unknown"],
])
def test_anything_else_goes_to_the_full_cli(argv):
    assert quick.parse(argv) is None


@pytest.mark.parametrize("fmt", [["--json"], ["--format", "text"], ["--format", "prompt"]])
def test_the_answer_is_the_full_clis(warm_vault, capsys, fmt):
    line = ["--vault", str(warm_vault.root), "recall", "which port does the database use", "--mode", "keyword",
            "--no-record", *fmt]
    assert quick.recall(line) == 0
    fast = capsys.readouterr()
    full = CliRunner().invoke(cli, line)
    assert full.exit_code == 0, full.output
    if fmt == ["--json"]:
        mine, theirs = json.loads(fast.out), json.loads(full.stdout)
        for hit in mine["hits"] + theirs["hits"]:
            hit["factors"].pop("recency")  # a few ms apart
            hit.pop("score")
        assert mine == theirs and mine["hits"][0]["id"] == "db/primary"
    else:
        assert fast.out == full.stdout
    assert fast.err == ""


def test_no_warm_process_or_an_error_reply_leaves_it_to_the_full_cli(vault, models, monkeypatch, capsys):
    monkeypatch.delenv("MEMVAULT_NO_DAEMON", raising=False)
    line = ["--vault", str(vault.root), "recall", "anything", "--json"]
    assert quick.recall(line) is None  # no warm process
    with serving(models):
        assert quick.recall(line + ["--source", "not a source"]) is None  # the warm process refuses it
        assert quick.recall(["--vault", str(vault.root / "nope"), "recall", "x"]) is None  # not a vault
        monkeypatch.setenv("MEMVAULT_NO_DAEMON", "1")
        assert quick.recall(line) is None  # the warm process is turned off
    assert capsys.readouterr() == ("", "")


def test_the_quick_path_imports_neither_click_nor_the_vault_code(warm_vault):
    code = ("import sys\nfrom memvault.interfaces import quick\n"
            "code = quick.recall(sys.argv[1:])\n"
            "print(code, sorted(m for m in sys.modules if m.startswith(('memvault.core', 'memvault.index', 'click', "
            "'numpy'))), file=sys.stderr)\n")
    out = subprocess.run([sys.executable, "-c", code, "--vault", str(warm_vault.root), "recall", "database port",
                          "--json", "--mode", "keyword"], capture_output=True, text=True, timeout=60, cwd=REPO_ROOT)
    assert out.stderr.strip() == "0 []", out.stderr
    assert json.loads(out.stdout)["hits"][0]["id"] == "db/primary"


def test_the_vault_is_found_as_the_cli_finds_it(vault, tmp_path, monkeypatch):
    monkeypatch.delenv("MEMVAULT_DIR", raising=False)
    deep = vault.root / "facts" / "x"
    deep.mkdir(parents=True)
    monkeypatch.chdir(deep)
    assert quick._root(None) == str(vault.root.resolve())
    monkeypatch.setenv("MEMVAULT_DIR", str(vault.root))
    assert quick._root(None) == str(vault.root)
    assert quick._root(str(tmp_path)) is None  # not a vault: the full CLI says so
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MEMVAULT_DIR")
    assert quick._root(None) is None


#: A teammate's fact that speaks to the terminal: a window title (OSC), a screen clear (CSI), an 8-bit CSI (C1), a
#: bidi override and a carriage return that would overwrite the line shown.
HOSTILE = "The database port is 5432 \x1b]0;pwned\x07 \x1b[2J \u202eevil\u202c \x9b31m \x85 \rforged"


@pytest.mark.parametrize("fmt", [["--json"], ["--format", "text"], ["--format", "prompt"]])
def test_the_quick_path_escapes_control_characters_as_the_full_cli_does(warm_vault, fmt, monkeypatch):
    """The console script, run as a person runs it, with and without the warm process: the same bytes, and no
    character a terminal acts on."""
    warm_vault.facts.set("db/primary", HOSTILE, source="user:t")
    line = [sys.executable, "-m", "memvault", "--vault", str(warm_vault.root), "recall", "database port",
            "--mode", "keyword", "--no-record", *fmt]

    def run(**env: str) -> subprocess.CompletedProcess[bytes]:
        import os

        out = subprocess.run(line, capture_output=True, timeout=60, cwd=REPO_ROOT, env={**os.environ, **env})
        assert out.returncode == 0, out.stderr
        return out

    fast, full = run(), run(MEMVAULT_NO_DAEMON="1")
    controls = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")
    for out in (fast, full):
        text = out.stdout.decode()
        assert "db/primary" in text and not controls.search(text), text
    if fmt == ["--json"]:
        mine, theirs = json.loads(fast.stdout), json.loads(full.stdout)
        for hit in mine["hits"] + theirs["hits"]:
            hit["factors"].pop("recency")
            hit.pop("score")
        assert mine == theirs and mine["hits"][0]["text"] == HOSTILE
        assert re.sub(rb'"(recency|score)": [0-9.e-]+', b"", fast.stdout) == \
            re.sub(rb'"(recency|score)": [0-9.e-]+', b"", full.stdout)
    else:
        assert fast.stdout == full.stdout


def test_the_quick_paths_warnings_are_escaped_as_the_clis(vault, monkeypatch, capsys):
    """A warning can name what a teammate committed (a file, a key): on stderr it is escaped as warn() escapes it."""
    from memvault.interfaces import warm_client
    from memvault.interfaces.cli.base import warn

    monkeypatch.delenv("MEMVAULT_NO_DAEMON", raising=False)
    warning = "facts/\x1b]0;pwned\x07\u202ex.md could not be read"
    monkeypatch.setattr(warm_client, "call", lambda *a, **k: {"hits": [], "warnings": [warning], "printed": "[]"})
    assert quick.recall(["--vault", str(vault.root), "recall", "q"]) == 0
    fast = capsys.readouterr()
    warn([warning])
    assert fast.err == capsys.readouterr().err and "\x1b" not in fast.err and "\u202e" not in fast.err


def test_a_reply_without_the_printed_answer_leaves_it_to_the_full_cli(vault, monkeypatch, capsys):
    from memvault.interfaces import warm_client

    monkeypatch.delenv("MEMVAULT_NO_DAEMON", raising=False)
    monkeypatch.setattr(warm_client, "call", lambda *a, **k: {"hits": [], "warnings": [], "rendered": "\x1b[2J"})
    assert quick.recall(["--vault", str(vault.root), "recall", "q"]) is None
    assert capsys.readouterr() == ("", "")
