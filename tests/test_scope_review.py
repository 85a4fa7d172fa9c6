"""An attack review of [scopes] and the faces agents read (2026-12-06): each test is an attack a narrow scope, or a
hostile argument, made before the fix, and the answer it gets now."""
from __future__ import annotations

import time

import pytest

from memvault.rules.errors import InvalidKey, InvalidValue, ScopeRefused
from conftest import git
from test_mcp import call, error_text, tool
from test_scopes import SECRET_DB, run, team  # noqa: F401 - fixture
from test_scopes_more import DB, add_scopes


def _script(tmp_path, name, body):
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return path


# ------------------------------------------------------------------------------- a name that looks like a folder
def test_a_runbook_named_like_a_readable_folder_is_not_read_through_its_name(team, tmp_path):
    """read = ["procedures/web/"] covers the runbooks *in* procedures/web/; the runbook named "web" is the file
    procedures/web.sh, beside that folder. Its name, procedures/web, matched the folder pattern, and proc show, the
    MCP tool and the web view returned its text."""
    v = team
    v.procedures.add("web", _script(tmp_path, "w.sh", "# the web tier's root password is in the db vault\n"),
                     source="user:admin")
    assert "web" not in [p.name for p in v.procedures.list(reader="agent:deployer")]
    with pytest.raises(ScopeRefused):
        v.procedures.get("web", reader="agent:deployer")
    out = run(v, "proc", "show", "web", source="agent:deployer")
    assert out.exit_code == 1 and "outside its read scope" in out.output and "root password" not in out.output
    # the same line as for a name with no file at all (no existence leak), and runbooks inside still read
    nothing = run(v, "proc", "show", "nothing-here", source="agent:deployer")
    assert nothing.exit_code == 1 and nothing.output == out.output.replace("procedure web (procedures/web)",
                                                                           "procedure nothing-here "
                                                                           "(procedures/nothing-here)")
    assert v.procedures.get("web/reload", reader="agent:deployer").name == "web/reload"
    v.act_as("agent:deployer")
    from memvault.interfaces.mcp import build_server

    (answer,) = call(build_server(v, source="agent:deployer", warm=False), tool("get_procedure", name="web"))
    assert "outside its read scope" in error_text(answer)


# ------------------------------------------------------------------------ an accept that reached outside the scope
REVIEW = """
[scopes."agent:deployer"]
read = ["facts/web/**", "episodes/**"]
write = ["episodes/**"]
propose = ["facts/web/**"]

[scopes."agent:reviewer"]
read = ["facts/web/**"]
review = ["facts/web/**"]
"""


def test_accepting_a_proposal_never_supersedes_a_fact_outside_the_reviewers_scope(strict_vault):
    """The deployer proposes, under facts/web/, a fact that contradicts db/main; the reviewer, who may review only
    facts/web/**, accepts it. The accept marked facts/db/main.md superseded_by web/pg (a write outside the
    reviewer's scopes, and recall then hid db/main from everyone) and its warning named db/main, a fact the
    reviewer may not read."""
    v = add_scopes(strict_vault, REVIEW)
    v.facts.set("db/main", DB, source="user:admin")
    before = (v.root / "facts/db/main.md").read_bytes()
    assert v.facts.set("web/pg", "Our postgres primary listens on port 6543 on db01.",
                       source="agent:deployer").quarantined
    out = run(v, "accept", "web/pg", "--source", "agent:reviewer")
    assert out.exit_code == 0, out.output
    assert (v.root / "facts/web/pg.md").is_file() and "supersedes" not in (v.root / "facts/web/pg.md").read_text()
    assert (v.root / "facts/db/main.md").read_bytes() == before
    assert git(v.root, "show", "--name-only", "--format=", "HEAD").split() == ["facts/web/pg.md"]
    assert "db/main" not in out.output and "a person" in out.output
    # recall still finds db/main for everyone else
    hits = v.recall("postgres primary port db01", mode="keyword", source="user:admin", log=False)
    assert "db/main" in [h.id for h in hits]
    # a person who accepts the same kind of proposal still supersedes, as before
    v.facts.set("web/pg2", "Our postgres primary listens on port 7777 on db01.", source="agent:deployer")
    out = run(v, "accept", "web/pg2", "--source", "user:admin")
    assert out.exit_code == 0 and "supersedes" in out.output


# --------------------------------------------------------------------------------- huge arguments through MCP
def test_a_huge_category_is_refused_at_once_naming_the_argument(vault, models, tmp_path):
    """set_fact's category went into the YAML front matter before the size check: 5 MB took 10 s (50 MB a minute)
    of the MCP server's one vault thread, every other tool waiting, and the refusal named the fact's size, not the
    argument."""
    from memvault.interfaces.mcp import build_server

    server = build_server(vault, source="agent:mcp", warm=False)
    head = git(vault.root, "rev-parse", "HEAD")
    started = time.monotonic()
    big, ctl = call(server, tool("set_fact", key="x/big", text="hello", category="a b " * (5 << 18)),
                    tool("set_fact", key="x/ctl", text="hello", category="ops\x1b]0;owned\x07"))
    assert time.monotonic() - started < 3
    for answer in (big, ctl):
        text = error_text(answer)
        assert "set_fact: category: " in text and "\n" not in text and len(text) < 300
    assert git(vault.root, "rev-parse", "HEAD") == head
    assert not (vault.root / "facts/x").exists() and not (vault.root / "inbox/x").exists()
    # a fact's category of ordinary length is still taken
    assert vault.facts.set("x/ok", "hello", category="network / edge", source="user:admin").category == "network / edge"
    with pytest.raises(InvalidValue) as err:
        vault.episodes.append("hello", kind="a" * 100_000, source="user:admin")
    assert str(err.value).startswith("kind: ") and len(str(err.value)) < 300


def test_a_huge_key_is_refused_without_escaping_all_of_it_first(vault):
    """validate_key escaped the whole key (50 MB: 3.5 s) before it looked at its length."""
    started = time.monotonic()
    for key in ("a" * (50 << 20), "a\x1b" * (25 << 20)):
        with pytest.raises(InvalidKey) as err:
            vault.facts.get(key)
        assert "at most 200 characters" in str(err.value) and len(str(err.value)) < 300
    assert time.monotonic() - started < 1.5


# --------------------------------------------------------------------- file names that speak to the terminal
ESCAPES = "\x1b]0;owned\x07\x1b[2J"


def test_a_file_name_with_terminal_escapes_is_shown_not_obeyed_by_the_hooks_and_the_watcher(vault, monkeypatch,
                                                                                           capsys):
    """A file or link named with an escape sequence (a teammate's commit, an agent with a shell in the vault): the
    pre-commit hook said its name is refused for its control characters, and printed them raw to the terminal of
    the person committing (a window title, a cleared screen; OSC 52 writes the clipboard); so did `memvault
    watch` for a link it does not follow."""
    import subprocess

    from memvault.interfaces.githooks import pre_commit
    from memvault.interfaces.watch import default_log, describe_report

    monkeypatch.chdir(vault.root)
    (vault.root / f"facts/x{ESCAPES}.md").write_text("---\nsource: user:a\n---\nhello\n")
    subprocess.run(["git", "add", "-A"], cwd=vault.root, check=True)
    assert pre_commit(vault.root) == 1
    err = capsys.readouterr().err
    assert "not a valid fact key" in err and "\x1b" not in err and "\x07" not in err and "\\u001b" in err
    (vault.root / f"facts/x{ESCAPES}.md").unlink()
    subprocess.run(["git", "add", "-A"], cwd=vault.root, check=True)
    (vault.root / f"facts/l{ESCAPES}.md").symlink_to("/etc/hostname")
    default_log(describe_report(vault.index.sync(), "start"))
    err = capsys.readouterr().err
    assert "a symlink" in err and "\x1b" not in err and "\x07" not in err


# ---------------------------------------------------------------------- reads that were not asked about the scope
def test_fact_history_and_edit_refuse_a_fact_outside_the_read_scope_before_reading_it(team):
    """`fact get db/main` is refused to the deployer, but `fact history db/main` printed every version's diff (the
    whole text), and `vault.facts.edit` handed the file to the editor before the write was refused."""
    v = team
    out = run(v, "fact", "history", "db/main", source="agent:deployer")
    assert out.exit_code == 1 and "outside its read scope" in out.output and "5432" not in out.output
    assert len(out.output.strip().splitlines()) == 1
    seen = []
    with pytest.raises(ScopeRefused):
        v.facts.edit("db/main", lambda text: seen.append(text) or text + "x", source="agent:deployer")
    assert seen == []
    # inside the scope, history still reads; a person's history and edit are as before
    assert run(v, "fact", "history", "web/nginx", source="agent:deployer").exit_code == 0
    assert "5432" in run(v, "fact", "history", "db/main", source="user:admin").output


def test_a_scoped_history_never_follows_a_file_from_outside_its_scope(team):
    """git log --follow pairs a file with the one it was renamed (or copied) from and goes on with that file's
    history: after a person moved db/main to web/moved, the deployer's history of web/moved showed every version
    db/main had under facts/db/, the password it held before included."""
    v = team
    main = v.root / "facts/db/main.md"
    main.write_text(main.read_text().replace("rotates on Fridays", "is hunter2-rotated"))
    git(v.root, "commit", "-qam", "an older version")
    main.write_text(main.read_text().replace("is hunter2-rotated", "rotates on Fridays"))
    git(v.root, "commit", "-qam", "the current version")
    git(v.root, "mv", "facts/db/main.md", "facts/web/moved.md")
    git(v.root, "commit", "-qm", "moved")
    out = run(v, "fact", "history", "web/moved", source="agent:deployer")
    assert out.exit_code == 0 and "hunter2" not in out.output and "facts/db/main.md" not in out.output
    assert "rotates on Fridays" in out.output  # what the file under its scope holds
    assert "hunter2" in run(v, "fact", "history", "web/moved", source="user:admin").output


def test_stale_dedup_and_expire_previews_name_no_fact_outside_the_read_scope(team):
    """The previews of whole-vault upkeep read every fact: as the deployer, `stale` listed db/old and `dedup` printed
    'conflict: db/main vs db/old (values 5432, 5433)'. Stale lists what the source may read; dedup and expire, which
    a scoped source may not run, are refused in their preview too."""
    v = team
    v.facts.set("db/old", SECRET_DB.replace("5432", "5433"), source="user:admin", valid_until="2020-01-01")
    v.facts.set("web/old", "nginx on web02 is retired.", source="user:admin", valid_until="2020-01-01")
    out = run(v, "stale", source="agent:deployer")
    assert out.exit_code == 0 and "web/old" in out.output and "db/" not in out.output
    for command in ("dedup", "expire"):
        out = run(v, command, source="agent:deployer")
        assert out.exit_code == 1 and "a scoped source acts only on its paths" in out.output, out.output
        assert "db/" not in out.output and "5433" not in out.output
    assert "db/old" in run(v, "stale", source="user:admin").output
    assert "conflict: db/main vs db/old" in run(v, "dedup", source="user:admin").output


def test_a_scoped_source_s_write_never_finishes_an_interrupted_purge(vault):
    """A purge killed part-way is finished by the next write of a source that may purge. [trust] lets a trusted
    scoped agent purge, but a scope forbids it every whole-vault operation: its note under its own folder finished
    the purge, deleting facts outside its write scope in a commit under its name."""
    from test_gate_commit import _interrupted_purge

    from memvault import Vault

    v = add_scopes(vault, '[scopes."agent:logger"]\nread = ["facts/logger/**"]\nwrite = ["facts/logger/**"]\n')
    journal = _interrupted_purge(v)
    head = git(v.root, "rev-parse", "HEAD")
    note = Vault.open(v.root).facts.set("logger/rotation", "Logs rotate at midnight.", source="agent:logger")
    assert not note.quarantined and journal.exists() and (v.root / "facts/web/tip.md").exists()
    assert "purge" not in git(v.root, "log", "--format=%s", f"{head}..HEAD")
    assert any("interrupted" in w for w in note.warnings)  # told, not done


def test_a_folder_pattern_does_not_cover_a_file_of_the_folder_s_name():
    """'procedures/web/' is the folder and what is in it; it also matched a file named procedures/web (a runbook
    without an extension, beside the folder), which 'procedures/web/**' never did."""
    from memvault.rules.scopes import matches

    for pattern in ("procedures/web/", "procedures/web/**", "facts/web/"):
        assert not matches(pattern, pattern.rstrip("/*").rstrip("/")), pattern
        assert matches(pattern, pattern.rstrip("/*").rstrip("/") + "/x.md")
    # a pattern without the slash may name the file itself, as the docs say
    assert matches("procedures/web/reload.sh", "procedures/web/reload.sh") and matches("facts/web", "facts/web")
    assert matches("facts/web", "facts/web/nginx.md") and not matches("facts/web", "facts/webby.md")
    assert matches("facts/web/**/", "facts/web/nginx.md") and matches("facts/*/", "facts/web/nginx.md")
    assert not matches("facts/*/", "facts/nginx.md")


def test_a_path_that_is_not_plain_falls_under_no_pattern():
    """The read test took 'facts/web/../db/main.md' as under 'facts/web/**' (the regex saw a file in facts/web/):
    every path memvault checks today is built from a validated key or a file found, but a check that a '..' passes
    is one refactor from a hole."""
    from memvault.rules.scopes import matches

    for path in ("facts/web/../db/main.md", "facts/web/./x.md", "facts/web//x.md", "facts/web/..", "facts\\web/x.md"):
        assert not matches("facts/web/**", path) and not matches("**", path), path
    assert matches("**", "facts/db/main.md") and matches("facts/web/**", "/facts/web/x.md/")


# ------------------------------------------------------------------------------------ a link inside the vault
def test_a_link_under_a_readable_folder_is_read_as_what_it_points_at(team):
    """facts/web/leak.md -> ../db/main.md and procedures/web/leak.sh -> ../db/restore.sh (a teammate's commit, a
    pull): the path is under the deployer's read paths, the text is not. fact get, fact list, proc show, proc list
    and recall returned db/main's and db/restore's text to it over the CLI and MCP."""
    import os

    v = team
    os.symlink("../db/main.md", v.root / "facts/web/leak.md")
    os.symlink("../db/restore.sh", v.root / "procedures/web/leak.sh")
    for args in (["fact", "get", "web/leak"], ["proc", "show", "web/leak"]):
        out = run(v, *args, source="agent:deployer")
        assert out.exit_code == 1 and "outside its read scope" in out.output, out.output
    for args in (["fact", "list"], ["proc", "list"], ["recall", "db01 primary restore port", "--mode", "keyword"],
                 ["export"]):
        out = run(v, *args, source="agent:deployer")
        assert out.exit_code == 0 and "5432" not in out.output and "pg_restore" not in out.output, (args, out.output)
        assert "web/leak" not in out.output
    # an unscoped reader reads the link as before, and a link whose target is in the scope still reads
    assert "5432" in run(v, "fact", "get", "web/leak", source="user:admin").output
    os.symlink("nginx.md", v.root / "facts/web/alias.md")
    assert "nginx on web01" in run(v, "fact", "get", "web/alias", source="agent:deployer").output


def test_a_50_mb_argument_over_stdio_is_one_line_of_refusal_and_the_server_goes_on(team, tmp_path):
    """The official MCP client over stdio, as an agent's harness runs it: a 50 MB category (a minute of the server's
    one vault thread before), a 50 MB key and a 50 MB episode; each is one line naming its argument, and the next
    call is answered at once."""
    import asyncio

    from test_mcp import stdio

    big = "a b " * (50 << 18)

    async def go():
        with open(tmp_path / "stderr.log", "w") as errlog:
            async with stdio(team.root, "--source", "agent:deployer", errlog=errlog) as client:
                started = time.monotonic()
                answers = [await client.call_tool("set_fact", {"key": "web/x", "text": "hi", "category": big}),
                           await client.call_tool("get_fact", {"key": big.replace(" ", "")}),
                           await client.call_tool("log_episode", {"text": big})]
                after = await client.call_tool("get_fact", {"key": "web/nginx"})
                return answers, after, time.monotonic() - started

    answers, after, took = asyncio.run(go())
    for answer, name in zip(answers, ("category: ", "at most 200 characters", "text: ")):
        text = error_text(answer)
        assert name in text and "\n" not in text and len(text) < 400, text[:400]
    assert not after.is_error and took < 30
    assert not (team.root / "inbox/web/x.md").exists() and not (team.root / "facts/web/x.md").exists()


def test_what_a_write_is_told_names_no_link_to_a_fact_outside_the_read_scope(team):
    """The report of a write names the stored facts it duplicates or contradicts, with the values that differ, when
    the writer may read them: facts/web/leak.md -> ../db/main.md passed for readable by its key, and the deployer
    was told 'conflicts with web/leak: 5432 where it says 6543'."""
    import os

    v = team
    os.symlink("../db/main.md", v.root / "facts/web/leak.md")
    v.index.sync()
    fact = v.facts.set("web/pg", SECRET_DB.replace("5432", "6543"), source="agent:deployer")
    said = repr(fact.similar) + " ".join(fact.warnings)
    assert "web/leak" not in said and "5432" not in said and "outside its read scope" in said


def test_proc_run_outside_the_scope_says_the_same_whether_the_runbook_exists_or_not(team):
    """`proc show` says the same for a runbook outside the scope and for none; `proc run` said 'no procedure named
    db/nothing' for the one and named the other's file (procedures/db/restore.sh) in its refusal."""
    v = team
    lines = {}
    for name in ("db/restore", "db/nothing"):
        out = run(v, "proc", "run", name, source="agent:deployer")
        assert out.exit_code == 1 and "outside its read scope" in out.output, out.output
        lines[name] = out.output.replace(name, "NAME")
    assert lines["db/restore"] == lines["db/nothing"] and ".sh" not in lines["db/restore"]
    ran = run(v, "proc", "run", "web/reload", source="agent:deployer")  # it runs (its exit is nginx's)
    assert "outside its read scope" not in ran.output and "error" not in ran.output


def test_a_superseded_fact_names_no_superseding_key_outside_the_read_scope(team):
    """web/nginx, which the deployer may read, was superseded by db/main, which it may not: `recall
    --include-superseded` returned web/nginx with superseded_by "db/main", the key of a fact outside its scope. The
    reader is told the fact was superseded, not by what; a reader of both still gets the key."""
    v = team
    path = v.root / "facts/web/nginx.md"
    text = path.read_text()
    path.write_text(text.replace("---\n", "---\nsuperseded_by: db/main\n", 1))
    git(v.root, "commit", "-qam", "superseded by hand")
    v.reindex()
    kw = dict(mode="keyword", include_superseded=True, log=False)
    (hit,) = [h for h in v.recall("nginx web01 shop", source="agent:deployer", **kw) if h.id == "web/nginx"]
    assert hit.extra.get("superseded") is True and "superseded_by" not in hit.extra
    out = run(v, "recall", "nginx web01 shop", "--mode", "keyword", "--json", "--include-superseded",
              source="agent:deployer")
    assert out.exit_code == 0 and "db/main" not in out.output and '"superseded": true' in out.output, out.output
    (hit,) = [h for h in v.recall("nginx web01 shop", source="user:admin", **kw) if h.id == "web/nginx"]
    assert hit.extra["superseded_by"] == "db/main" and hit.extra["superseded"] is True
