from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from memvault import Vault
from memvault.rules.errors import FactNotFound, FactParseError, GitError, InvalidKey, InvalidValue
from conftest import git


def test_set_get_roundtrip_and_commit(vault):
    fact = vault.facts.set(
        "db/primary",
        "The primary database listens on 10.8.0.4:5432.",
        category="database",
        importance=0.8,
        source="agent:deployer",
        tags=["postgres"],
        valid_until="2027-01-31",
    )
    assert fact.path == vault.root / "facts/db/primary.md"
    got = vault.facts.get("db/primary")
    assert got.text == "The primary database listens on 10.8.0.4:5432."
    assert (got.category, got.importance, got.confidence) == ("database", 0.8, 0.7)
    assert got.source == "agent:deployer" and got.tags == ["postgres"]
    assert got.valid_until.isoformat() == "2027-01-31"
    msg = git(vault.root, "log", "-1", "--format=%an%n%B")
    assert msg.splitlines()[0] == "agent:deployer"
    assert "Memvault-Key: db/primary" in msg and "Memvault-Source: agent:deployer" in msg
    assert git(vault.root, "status", "--porcelain") == ""


def test_update_replaces_body_keeps_fields_and_old_value_is_gone(vault):
    vault.facts.set("db/primary", "listens on 5432", category="database", importance=0.9, tags=["pg"])
    before = vault.facts.get("db/primary")
    after = vault.facts.set("db/primary", "listens on 6432 via pgbouncer")
    assert after.text == "listens on 6432 via pgbouncer"
    assert (after.category, after.importance, after.tags) == ("database", 0.9, ["pg"])
    assert after.created == before.created and after.updated >= before.updated
    on_disk = after.path.read_text()
    assert "5432" not in on_disk
    history = vault.facts.history("db/primary")
    assert len(history) == 2
    assert "-listens on 5432" in history[0].diff and "+listens on 6432 via pgbouncer" in history[0].diff
    log = git(vault.root, "log", "-p", "--format=%s", "--", "facts/db/primary.md")
    assert "-listens on 5432" in log


def test_unknown_keys_comments_and_order_survive_rewrite(vault):
    path = vault.root / "facts/web/web1.md"
    path.parent.mkdir(parents=True)
    path.write_text(textwrap.dedent("""\
        ---
        owner: maria            # who to ask
        category: web
        importance: 0.4   # low: host is redundant
        ticket: OPS-44
        tags:
          - nginx
          - edge
        runbook: procedures/web/drain-host.sh
        ---
        web1 serves the public site on 10.8.0.11.
        """))
    vault.facts.set("web/web1", "web1 serves the public site on 10.8.0.12.", importance=0.6, source="user:maria")
    text = path.read_text()
    lines = text.splitlines()
    assert lines[1] == "owner: maria            # who to ask"
    assert lines[2] == "category: web"
    assert lines[3] == "importance: 0.6   # low: host is redundant"
    assert lines[4] == "ticket: OPS-44"
    assert lines[5:8] == ["tags:", "  - nginx", "  - edge"]
    assert lines[8] == "runbook: procedures/web/drain-host.sh"
    fact = vault.facts.get("web/web1")
    assert fact.extra == {"owner": "maria", "ticket": "OPS-44", "runbook": "procedures/web/drain-host.sh"}
    assert fact.tags == ["nginx", "edge"]
    assert fact.text.endswith("10.8.0.12.")


def test_hand_written_file_gets_defaults_and_is_not_rewritten(vault):
    path = vault.root / "facts/dns/resolver.md"
    path.parent.mkdir(parents=True)
    path.write_text("Internal DNS resolvers are 10.8.0.2 and 10.8.0.3.\n")
    os.utime(path, (1_700_000_000, 1_700_000_000))
    before = path.read_bytes(), path.stat().st_mtime_ns
    fact = vault.facts.get("dns/resolver")
    vault.facts.list()
    assert (fact.importance, fact.confidence, fact.category, fact.source, fact.tags) == (0.5, 1.0, None, None, [])
    assert fact.updated.year == 2023
    assert (path.read_bytes(), path.stat().st_mtime_ns) == before


@pytest.mark.parametrize(
    "key",
    ["../escape", "/etc/passwd", "a//b", "a/", "Upper/case", "back\\slash", "nul\0byte", "", "a/./b", "x" * 201,
     ".hidden", "-dash", "spa ce"],
)
def test_refused_keys_write_nothing(vault, key):
    before = sorted(p.relative_to(vault.root) for p in vault.root.rglob("*") if ".git" not in p.parts)
    head = git(vault.root, "rev-parse", "HEAD")
    with pytest.raises(InvalidKey):
        vault.facts.set(key, "text")
    after = sorted(p.relative_to(vault.root) for p in vault.root.rglob("*") if ".git" not in p.parts)
    assert after == before
    assert git(vault.root, "rev-parse", "HEAD") == head


def test_key_through_symlink_outside_facts_is_refused(vault, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (vault.root / "facts" / "link").symlink_to(outside)
    with pytest.raises(InvalidKey, match="outside facts"):
        vault.facts.set("link/evil", "text")
    assert list(outside.iterdir()) == []


def test_key_of_200_characters_is_accepted(vault):
    key = "a" * 100 + "/" + "b" * 99
    assert len(key) == 200
    vault.facts.set(key, "long key")
    assert vault.facts.get(key).text == "long key"


@pytest.mark.parametrize(
    "kwargs, name",
    [({"importance": 1.5}, "importance"), ({"confidence": -0.1}, "confidence"), ({"valid_until": "soon"}, "valid_until")],
)
def test_bad_values_are_refused(vault, kwargs, name):
    with pytest.raises(InvalidValue, match=name):
        vault.facts.set("x/y", "text", **kwargs)
    assert not (vault.root / "facts/x/y.md").exists()


def test_malformed_facts_are_reported_by_name_and_line_and_the_rest_listed(vault):
    vault.facts.set("a/good", "good one")
    vault.facts.set("c/good", "another good one")
    broken = vault.root / "facts/b/broken.md"
    broken.parent.mkdir()
    broken.write_text("---\ncategory: db\ntags: [unclosed\n---\nbody\n")
    badnum = vault.root / "facts/b/badnum.md"
    badnum.write_text("---\ncategory: db\nimportance: high\n---\nbody\n")
    problems = []
    facts = vault.facts.list(problems=problems)
    assert [f.key for f in facts] == ["a/good", "c/good"]
    by_path = {p.path.name: p for p in problems}
    assert by_path["badnum.md"].line == 3 and "importance" in by_path["badnum.md"].reason
    assert by_path["broken.md"].line in (3, 4) and "YAML" in by_path["broken.md"].reason
    with pytest.raises(FactParseError) as err:
        vault.facts.get("b/badnum")
    assert str(err.value).startswith(f"{badnum}:3: importance")


def test_delete_commits_removal(vault):
    vault.facts.set("tmp/thing", "temporary")
    vault.facts.delete("tmp/thing")
    assert not (vault.root / "facts/tmp").exists()
    with pytest.raises(FactNotFound):
        vault.facts.get("tmp/thing")
    assert git(vault.root, "log", "-1", "--format=%s").startswith("fact rm tmp/thing")
    assert git(vault.root, "status", "--porcelain") == ""
    with pytest.raises(FactNotFound):
        vault.facts.delete("tmp/thing")


def test_killed_write_leaves_old_fact_intact(vault):
    vault.facts.set("db/primary", "old value 5432")
    path = vault.root / "facts/db/primary.md"
    before = path.read_bytes()
    script = textwrap.dedent(f"""
        import os
        from memvault import Vault
        real_fsync = os.fsync
        def die(fd):
            real_fsync(fd)
            os._exit(9)   # killed after the temp file is written, before the rename
        os.fsync = die
        Vault.open({str(vault.root)!r}).facts.set("db/primary", "new value 6543")
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True)
    assert proc.returncode == 9
    assert path.read_bytes() == before
    assert vault.facts.get("db/primary").text == "old value 5432"
    assert [f.key for f in vault.facts.list()] == ["db/primary"]


def test_commit_refused_by_hook_restores_the_old_file(vault):
    vault.facts.set("db/primary", "old value")
    hook = vault.root / ".git/hooks/pre-commit"
    hook.write_text("#!/bin/sh\necho 'refused by policy' >&2\nexit 1\n")
    hook.chmod(0o755)
    from memvault.rules.errors import GitError

    with pytest.raises(GitError, match="refused by policy"):
        vault.facts.set("db/primary", "new value")
    assert vault.facts.get("db/primary").text == "old value"
    with pytest.raises(GitError):
        vault.facts.set("db/new", "brand new")
    assert not (vault.root / "facts/db/new.md").exists()


def test_concurrent_setters_never_corrupt(vault):
    script = textwrap.dedent(f"""
        import sys
        from memvault import Vault
        v = Vault.open({str(vault.root)!r})
        for i in range(8):
            v.facts.set("shared/counter", f"writer {{sys.argv[1]}} round {{i}}", source="agent:w" + sys.argv[1])
            v.facts.set(f"own/w{{sys.argv[1]}}", f"round {{i}}", source="agent:w" + sys.argv[1])
    """)
    start = int(git(vault.root, "rev-list", "--count", "HEAD"))
    procs = [subprocess.Popen([sys.executable, "-c", script, str(n)]) for n in range(4)]
    assert all(p.wait(timeout=120) == 0 for p in procs)
    fact = vault.facts.get("shared/counter")
    assert fact.text.startswith("writer ") and fact.text.endswith("round 7")
    assert len(vault.facts.list()) == 5
    assert git(vault.root, "status", "--porcelain") == ""
    assert int(git(vault.root, "rev-list", "--count", "HEAD")) == start + 4 * 8 * 2


def test_commit_without_git_identity_still_works(vault, tmp_path, monkeypatch):
    empty = tmp_path / "empty-gitconfig"
    empty.write_text("")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(empty))
    monkeypatch.setenv("EMAIL", "")
    v = Vault.open(vault.root)
    v.facts.set("a/b", "works", source="agent:x")
    assert git(vault.root, "log", "-1", "--format=%an|%cn") == "agent:x|memvault"


def refuse_commits(vault):
    hook = vault.root / ".git" / "hooks" / "pre-commit"
    hook.write_text("#!/bin/sh\necho 'policy says no' >&2\nexit 1\n")
    hook.chmod(0o755)


def status(vault):
    return git(vault.root, "status", "--porcelain")


def test_refused_delete_accept_and_reject_put_files_and_the_git_index_back(strict_vault):
    v = strict_vault
    v.facts.set("db/primary", "The primary listens on 5432.", source="user:admin")
    v.facts.set("db/primary", "The primary moved to 6432.", source="agent:scraper")  # a proposal
    toml = v.root / "memvault.toml"
    toml.write_text(toml.read_text().replace("share_inbox = false", "share_inbox = true"))
    git(v.root, "commit", "-qm", "share the inbox", "--", "memvault.toml")
    v = Vault.open(v.root)
    v.facts.set("web/lb", "The balancer is lb1.", source="agent:scraper")  # a committed proposal this time
    before = {p: p.read_bytes() for p in v.root.rglob("*.md") if ".git" not in p.parts}
    refuse_commits(v)
    for action in (lambda: v.facts.delete("db/primary", source="user:admin"),
                   lambda: v.facts.accept("db/primary", source="user:admin"),
                   lambda: v.facts.reject("web/lb", source="user:admin")):
        with pytest.raises(GitError, match="policy says no"):
            action()
        after = {p: p.read_bytes() for p in v.root.rglob("*.md") if ".git" not in p.parts}
        assert after == before
        assert status(v) == "" or all(line.startswith("??") for line in status(v).splitlines()), status(v)
        assert "fact" not in git(v.root, "diff", "--cached", "--name-only")


def _bloom_statistics(trace) -> list[dict]:
    """The changed-path Bloom filter counts of every revision walk git traced (trace2 event format)."""
    import json

    out = []
    for line in trace.read_text().splitlines():
        event = json.loads(line)
        if event.get("category") == "bloom" and event.get("key") == "statistics":
            out.append(event["value"])
    return out


def test_fact_history_skips_the_commits_that_did_not_touch_it_and_still_follows_a_rename(vault, tmp_path,
                                                                                         monkeypatch):
    """Six months in (30k commits), `fact history KEY` of a fact written once took 11 s: `git log --follow` reads
    every commit of the repository (git uses no changed-path filter with --follow) and no commit-graph was ever
    written outside the web view, so even the walk of one path diffed every commit. Now the commit-graph is kept up
    to date by the history call and the walk is one path-limited `git log` per name the file had: git's trace
    counts the commits it skipped by their Bloom filter instead of diffing them."""
    vault.facts.set("db/main", "listens on 5432")
    vault.facts.set("db/main", "listens on 6432")
    git(vault.root, "mv", "facts/db/main.md", "facts/db/moved.md")
    git(vault.root, "commit", "-qm", "moved")
    vault.facts.set("db/moved", "listens on 7432")
    for i in range(30):
        vault.facts.set(f"other/f{i}", f"unrelated fact number {i}")
    vault.facts.history("db/moved")  # the first call starts git's first commit-graph in a process of its own
    assert vault.git.graph_writer is not None and vault.git.graph_writer.wait() == 0
    trace = tmp_path / "trace2.json"
    monkeypatch.setenv("GIT_TRACE2_EVENT", str(trace))
    history = vault.facts.history("db/moved")
    subjects = [e.message.splitlines()[0] for e in history]
    assert len(subjects) == 4 and subjects[1] == "moved" and "db/main" in subjects[2], subjects
    assert "+listens on 7432" in history[0].diff
    assert "rename from facts/db/main.md" in history[1].diff  # the rename, as git log --follow shows it
    assert "-listens on 5432" in history[2].diff and "+listens on 6432" in history[2].diff
    walks = _bloom_statistics(trace)
    skipped = sum(w["definitely_not"] for w in walks)
    diffed = sum(w["maybe"] + w["filter_not_present"] for w in walks)
    assert skipped >= 30 and diffed <= 8, walks


def test_the_background_commit_graph_writer_leaves_no_zombie_in_a_long_lived_process(vault):
    """A server (MCP, the web view) that once asked for a fact's history kept git's finished commit-graph writer as a
    zombie for as long as it ran: nobody waited for it. It is reaped when it ends."""
    import time
    from pathlib import Path

    vault.facts.set("db/primary", "listens on 5432", source="user:a")
    writer = vault.git.update_commit_graph(wait=False)
    assert writer is not None
    stat = Path(f"/proc/{writer.pid}/stat")

    def state() -> str | None:
        try:
            return stat.read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return None  # gone: reaped

    deadline = time.monotonic() + 30
    while state() not in (None, "Z") and time.monotonic() < deadline:  # git writing the graph
        time.sleep(0.05)
    deadline = time.monotonic() + 5
    while state() is not None and time.monotonic() < deadline:  # ended: reaped by then, or a zombie
        time.sleep(0.05)
    assert not stat.exists(), "the finished writer is left a zombie"
