from __future__ import annotations

import json

from memvault.interfaces.cli import cli
from conftest import git, use_editor

FACT_FIELDS = ["key", "text", "category", "importance", "confidence", "source", "tags", "created", "updated",
               "valid_until", "path"]


def test_fact_set_get_json_fields(invoke):
    r = invoke("fact", "set", "db/primary", "listens on 10.8.0.4:5432", "-c", "database", "--importance", "0.8",
               "-t", "postgres", "-t", "primary", "--source", "agent:deployer", "--valid-until", "2027-01-31")
    assert r.exit_code == 0, r.output
    r = invoke("fact", "get", "db/primary", "--json")
    data = json.loads(r.stdout)
    assert list(data) == FACT_FIELDS
    assert data["tags"] == ["postgres", "primary"] and data["confidence"] == 0.7
    assert data["path"] == "facts/db/primary.md" and data["valid_until"] == "2027-01-31"
    r = invoke("fact", "get", "db/primary")
    assert "listens on 10.8.0.4:5432" in r.stdout and "[database]" in r.stdout


def test_fact_set_from_stdin(invoke):
    r = invoke("fact", "set", "a/b", "-", input="from stdin\n")
    assert r.exit_code == 0
    assert json.loads(invoke("fact", "get", "a/b", "--json").stdout)["text"] == "from stdin"


def test_errors_are_one_line_with_exit_1_and_usage_exit_2(invoke):
    r = invoke("fact", "get", "nope/missing")
    assert r.exit_code == 1 and r.stderr.strip() == "memvault: error: no fact with key 'nope/missing'"
    r = invoke("fact", "set", "../x", "y")
    assert r.exit_code == 1 and len(r.stderr.strip().splitlines()) == 1 and "../x" in r.stderr
    r = invoke("fact", "set", "a/b", "y", "--importance", "abc")
    assert r.exit_code == 2
    r = invoke("fact", "set", "a/b", "y", "--importance", "3")
    assert r.exit_code == 1 and "importance" in r.stderr
    r = invoke("episode", "add", "x", "--meta", "[1]")
    assert r.exit_code == 2 and "--meta" in r.stderr
    r = invoke("episode", "list", "--since", "someday")
    assert r.exit_code == 1 and "--since" in r.stderr


def test_fact_list_reports_broken_file_and_lists_the_rest(invoke, vault):
    invoke("fact", "set", "a/good", "fine")
    (vault.root / "facts/a/bad.md").write_text("---\nimportance: [\n---\nx\n")
    r = invoke("fact", "list", "--json")
    assert r.exit_code == 0
    assert [f["key"] for f in json.loads(r.stdout)] == ["a/good"]
    assert "facts/a/bad.md:" in r.stderr and "warning" in r.stderr


def test_fact_list_filters(invoke):
    invoke("fact", "set", "a/one", "one", "-c", "db", "-t", "pg")
    invoke("fact", "set", "a/two", "two", "-c", "web", "-t", "nginx")
    assert [f["key"] for f in json.loads(invoke("fact", "list", "-c", "web", "--json").stdout)] == ["a/two"]
    assert [f["key"] for f in json.loads(invoke("fact", "list", "-t", "pg", "--json").stdout)] == ["a/one"]
    assert "a/one" in invoke("fact", "list").stdout


def test_fact_rm_and_history(invoke, vault):
    invoke("fact", "set", "a/b", "first")
    invoke("fact", "set", "a/b", "second")
    r = invoke("fact", "history", "a/b")
    assert r.stdout.count("commit ") == 2 and "-first" in r.stdout and "+second" in r.stdout
    assert len(json.loads(invoke("fact", "history", "a/b", "--json").stdout)) == 2
    assert invoke("fact", "rm", "a/b").exit_code == 0
    assert invoke("fact", "get", "a/b").exit_code == 1


def test_fact_history_shows_the_change_whatever_a_committed_gitattributes_says(invoke, vault):
    """A teammate's ``.gitattributes`` (``facts/** -diff``, or a ``diff=`` driver this host has a textconv for) made
    `fact history` show "Binary files ... differ", or the driver's rendering, for their next change of a fact: what
    it changed was not in the history a person audits. The history is always the text's own diff."""
    from conftest import git

    invoke("fact", "set", "db/primary", "The primary listens on port 5432.")
    invoke("fact", "set", "web/front", "The front end listens on port 5432.")
    (vault.root / ".gitattributes").write_text("facts/** -diff\nfacts/db/** diff=hidden\n")
    git(vault.root, "config", "diff.hidden.textconv", "sed s/6543/5432/")
    git(vault.root, "add", ".gitattributes")
    git(vault.root, "commit", "-qm", "attributes")
    for rel in ("facts/db/primary.md", "facts/web/front.md"):
        path = vault.root / rel
        path.write_text(path.read_text().replace("5432", "6543"))
    git(vault.root, "commit", "-qam", "a teammate's change")
    for key, what in (("db/primary", "The primary"), ("web/front", "The front end")):
        r = invoke("fact", "history", key)
        assert r.exit_code == 0 and "Binary files" not in r.stdout, r.stdout
        assert f"+{what} listens on port 6543." in r.stdout and f"-{what} listens on port 5432." in r.stdout


def test_fact_edit_with_editor_validates_then_commits(invoke, vault, tmp_path, monkeypatch):
    invoke("fact", "set", "a/b", "before", "--importance", "0.3")
    use_editor(monkeypatch, tmp_path / "ed.py", "p.write_text(p.read_text().replace('before', 'after'))\n")
    r = invoke("fact", "edit", "a/b")
    assert r.exit_code == 0, r.output
    assert json.loads(invoke("fact", "get", "a/b", "--json").stdout)["text"] == "after"
    assert git(vault.root, "log", "-1", "--format=%s").startswith("fact edit a/b")
    use_editor(monkeypatch, tmp_path / "bad.py",
               "p.write_text(p.read_text().replace('importance: 0.3', 'importance: lots'))\n")
    before = (vault.root / "facts/a/b.md").read_text()
    r = invoke("fact", "edit", "a/b")
    assert r.exit_code == 1 and "importance" in r.stderr
    assert (vault.root / "facts/a/b.md").read_text() == before


def test_proc_commands(invoke, vault, tmp_path):
    script = tmp_path / "s.sh"
    script.write_text("#!/bin/sh\n# description: echo args\necho \"got $*\"\nexit ${CODE:-0}\n")
    script.chmod(0o755)
    assert invoke("proc", "add", "ops/echo", str(script)).exit_code == 0
    data = json.loads(invoke("proc", "list", "--json").stdout)
    assert [p["name"] for p in data] == ["ops/echo"]
    shown = json.loads(invoke("proc", "show", "ops/echo", "--json").stdout)
    assert list(shown) == ["name", "path", "text", "commit", "blob", "dirty", "description", "tags"]
    assert shown["text"] == script.read_text() and shown["dirty"] is False
    r = invoke("proc", "show", "ops/echo")
    assert r.stdout == script.read_text() and shown["commit"] in r.stderr and shown["blob"] in r.stderr
    r = invoke("proc", "run", "ops/echo", "--", "a", "--flag")
    assert r.exit_code == 0 and "recorded run" in r.stderr
    ep = json.loads(invoke("episode", "list", "--json", "--kind", "procedure_run").stdout.splitlines()[0])
    assert ep["meta"]["args"] == ["a", "--flag"] and ep["meta"]["commit"] == shown["commit"]
    (vault.root / "procedures/ops/echo.sh").write_text("#!/bin/sh\necho changed\n")
    r = invoke("proc", "run", "ops/echo")
    assert r.exit_code == 1 and "--allow-dirty" in r.stderr
    assert "differs from the last commit" in invoke("proc", "show", "ops/echo").stderr


def test_proc_run_exit_code_is_propagated(invoke, tmp_path):
    script = tmp_path / "f.sh"
    script.write_text("#!/bin/sh\nexit 4\n")
    script.chmod(0o755)
    invoke("proc", "add", "ops/fail", str(script))
    assert invoke("proc", "run", "ops/fail").exit_code == 4


def test_proc_run_of_a_script_killed_by_a_signal_exits_as_a_shell_says_so(invoke, tmp_path):
    """A script ended by a signal (an out-of-memory kill, a `kill`) has no exit code: memvault exited 1, as for any
    failure, so a job could not tell a kill from `exit 1`. A shell's 128 + the signal's number now (137, 143)."""
    script = tmp_path / "k.sh"
    script.write_text("#!/bin/sh\nkill -TERM $$\nsleep 5\n")
    script.chmod(0o755)
    invoke("proc", "add", "ops/killed", str(script))
    result = invoke("proc", "run", "ops/killed")
    assert result.exit_code == 128 + 15, result.output
    assert "killed by signal 15" in invoke("episode", "list", "--kind", "procedure_run").output


def test_episode_add_and_list(invoke):
    r = invoke("episode", "add", "disk 91% on web3", "--source", "agent:monitor", "--kind", "raw",
               "--at", "2026-11-20T10:00:00Z", "-t", "disk", "--meta", '{"host": "web3"}', "--json")
    assert r.exit_code == 0, r.output
    stored = json.loads(r.stdout)
    invoke("episode", "add", "-", "--source", "agent:x", "--kind", "summary", input="session summary\n")
    lines = invoke("episode", "list", "--json").stdout.splitlines()
    assert json.loads(lines[0]) == stored
    assert len(lines) == 2
    assert invoke("episode", "list", "--source", "agent:monitor", "--json").stdout.count("\n") == 1
    assert "disk 91% on web3" in invoke("episode", "list", "--kind", "raw").stdout
    assert invoke("episode", "add", "x").exit_code == 0  # default source user:$USER



def test_an_oversized_episode_names_the_argument_at_fault(invoke):
    """An episode past [limits] episode_bytes was refused as "episode: ... bytes": the user gave TEXT (or --meta),
    not an "episode", and was not told which of them to shorten."""
    r = invoke("episode", "add", "-", input="word " * 14_000)
    assert r.exit_code == 1 and r.stderr.count("\n") == 1 and "text: " in r.stderr and "episode_bytes" in r.stderr
    r = invoke("episode", "add", "short", "--meta", json.dumps({"log": "x" * 70_000}))
    assert r.exit_code == 1 and r.stderr.count("\n") == 1 and "meta: " in r.stderr and "episode_bytes" in r.stderr


def test_vault_not_found_is_a_clear_error(runner, tmp_path):
    r = runner.invoke(cli, ["--vault", str(tmp_path), "fact", "list"])
    assert r.exit_code == 1 and "not a vault" in r.stderr


def test_init_command(runner, tmp_path):
    r = runner.invoke(cli, ["init", str(tmp_path / "new")])
    assert r.exit_code == 0 and (tmp_path / "new/memvault.toml").exists()


def test_every_command_has_help(runner):
    def walk(group, path):
        for name, cmd in group.commands.items():
            assert cmd.help, f"{' '.join(path + [name])} has no help"
            if hasattr(cmd, "commands"):
                walk(cmd, path + [name])

    walk(cli, ["memvault"])
