"""The gate inside every commit, and no secret at rest outside it (issue 23, items 3 and 5).

Every commit memvault makes runs the refusal checks (secrets, keys, front matter, limits, links) on each file it
commits, whichever operation asked: prune, purge, verify, dedup, a model change, a restore. ``--allow-secret`` is
the one waiver. Restore keeps proposals as proposals; opening a vault never writes; reports name a refused item by
its position, never by text the detector flagged; purge leaves no orphan index generation behind; export leaves out
what the detector flags. Real git, real files, the CLI where a person would use it.
"""
from __future__ import annotations

import json
import re
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from conftest import git
from memvault import Vault
from memvault.rules.errors import MemvaultError, SecretRefused

AWS = "AKIA" + "Q3W5E7R9T2Y4U6I8"  # shaped like an AWS access key id, made up


def cli(root: Path, *args: str, source: str | None = None, input: str | None = None):
    from click.testing import CliRunner

    from memvault.interfaces.cli import cli as group

    env = {"MEMVAULT_SOURCE": source} if source else {}
    return CliRunner().invoke(group, ["--vault", str(root), *args], env=env, input=input)


def history(root: Path) -> str:
    """Every commit's patch: what git will push."""
    return git(root, "log", "--all", "-p", "--format=%H %s%n%b")


def plain_commit(root: Path, message: str, *paths: str) -> None:
    """A commit made with plain git, no hooks (as a teammate without memvault's hooks would)."""
    git(root, "add", "-f", "--", *paths)
    git(root, "commit", "-q", "--no-verify", "-m", message, "--", *paths)


#: Past the retention of raw episodes (30 days), within that of summaries (365).
OLD = (datetime.now(timezone.utc) - timedelta(days=40)).replace(microsecond=0)


@pytest.fixture
def tracked(tmp_path) -> Vault:
    """A vault that commits its episodes ([episodes] track_in_git = true), with one episode past retention."""
    v = Vault.init(tmp_path / "tracked", track_episodes=True)
    v.episodes.append("An old note, past retention.", source="user:dev", at=OLD)
    v.episodes.append("A recent note.", source="user:dev")
    return Vault.open(v.root)


def old_file(v: Vault) -> Path:
    """The month file that holds the episode past retention: the one prune rewrites."""
    return next(e.path for e in v.episodes.iter() if e.text.startswith("An old note"))


def hand_append(path: Path, text: str) -> None:
    """A summary appended by hand (an editor, a script) to ``path``, valid JSON, as old as the note prune
    removes (a summary is kept: prune rewrites the file with it)."""
    from memvault.rules.timeutil import format_time

    line = {"id": "01HANDAPPENDED0000000000000", "created_at": format_time(OLD), "source": "user:dev",
            "kind": "summary", "text": text, "tags": [], "meta": {}}
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(line) + "\n")


# ------------------------------------------------------------------------------------------------ the commit step
def test_prune_commits_no_refused_key(tracked):
    files = [old_file(tracked)]
    hand_append(files[0], f"the deploy key is {AWS}")
    before = files[0].read_bytes()
    done = cli(tracked.root, "prune", source="agent:cron")  # prune is allowed to untrusted sources
    assert done.exit_code != 0, done.output
    assert "looks like a secret" in done.output and AWS not in done.output
    assert AWS not in history(tracked.root)
    assert files[0].read_bytes() == before  # all or nothing: the rewrite was put back
    # the one waiver, for a trusted source
    refused = cli(tracked.root, "prune", "--allow-secret", source="agent:cron")
    assert refused.exit_code != 0 and "not trusted" in refused.output
    waived = cli(tracked.root, "prune", "--allow-secret", source="user:dev")
    assert waived.exit_code == 0, waived.output
    assert AWS in history(tracked.root)


def test_purge_commits_no_refused_key(tracked):
    tracked.episodes.append("Scraped claim.", source="web:evil.example", at=OLD)
    hand_append(old_file(tracked), f"the deploy key is {AWS}")
    done = cli(tracked.root, "purge", "--source", "web:*", source="user:dev")
    assert done.exit_code != 0 and "looks like a secret" in done.output, done.output
    assert AWS not in history(tracked.root)
    assert any(e.source == "web:evil.example" for e in Vault.open(tracked.root).episodes.iter())  # nothing purged


def test_purge_checks_its_extra_paths(tracked):
    """A purge finished from its journal commits the paths the journal names: they pass the same checks."""
    (tracked.root / "facts/ops").mkdir(parents=True)
    note = tracked.root / "facts/ops/note.md"
    note.write_text(f"---\nsource: web:evil.example\n---\nKey {AWS}.\n")
    plain_commit(tracked.root, "a note", "facts/ops/note.md")
    other = tracked.root / "facts/ops/other.md"
    other.write_text(f"---\nsource: user:dev\n---\nThe other key is {AWS}.\n")  # changed behind memvault's back
    journal = tracked.state_dir / "purge.json"
    journal.write_text(json.dumps({"pattern": "web:*", "source": "user:dev",
                                   "paths": ["facts/ops/note.md", "facts/ops/other.md"]}))
    head = git(tracked.root, "rev-parse", "HEAD")
    with pytest.raises(SecretRefused):
        tracked.purge("web:*", source="user:dev")
    assert git(tracked.root, "rev-parse", "HEAD") == head
    assert "other.md" not in git(tracked.root, "ls-files", "facts")
    # every write waits for it, and says which purge and the way out
    with pytest.raises(SecretRefused, match="interrupted purge of web:"):
        Vault.open(tracked.root).facts.set("ops/x", "A note.", source="user:dev")
    done = Vault.open(tracked.root).purge("web:*", source="user:dev", allow_secret=True)
    assert not journal.exists() and not note.exists() and any("interrupted" in w for w in done.warnings)
    assert "facts/ops/other.md" in git(tracked.root, "ls-files", "facts")  # waived: committed as it was


def test_verify_commits_no_refused_key(vault):
    vault.facts.set("ops/deploy", "Deploys run from the ci host.", source="user:dev")
    path = vault.root / "facts/ops/deploy.md"
    text = path.read_text().replace("ci host.", f"ci host with {AWS}.")
    path.write_text(re.sub(r"updated: .*", "updated: 2026-01-02T03:04:05Z", text))  # so verify changes it
    plain_commit(vault.root, "a teammate's commit, no hooks", "facts/ops/deploy.md")
    head = git(vault.root, "rev-parse", "HEAD")
    done = cli(vault.root, "verify", "ops/deploy", source="user:dev")
    assert done.exit_code != 0 and "looks like a secret" in done.output, done.output
    assert git(vault.root, "rev-parse", "HEAD") == head
    assert git(vault.root, "status", "--porcelain") == ""


def test_dedup_merge_commits_no_refused_key(vault):
    vault.facts.set("db/a", "The primary database listens on port 5432 at host db1.", source="user:dev",
                    confidence=1.0)  # the survivor: the merge rewrites it
    vault.facts.set("db/b", "The primary database listens on port 5432 at host db1 today.", source="user:dev",
                    confidence=0.5)
    path = vault.root / "facts/db/a.md"
    path.write_text(path.read_text().replace("importance:", f"token: {AWS}\nimportance:"))
    plain_commit(vault.root, "a teammate's commit, no hooks", "facts/db/a.md")
    head = git(vault.root, "rev-parse", "HEAD")
    report = Vault.open(vault.root).dedup(apply=False)
    assert report.groups, "the two facts must be duplicates for this test"
    with pytest.raises(SecretRefused):
        Vault.open(vault.root).dedup(apply=True, source="user:dev")
    assert git(vault.root, "rev-parse", "HEAD") == head


def test_set_model_commits_no_refused_key(vault):
    toml = vault.root / "memvault.toml"
    toml.write_text(toml.read_text() + f"\n# the hub token is {AWS}\n")
    plain_commit(vault.root, "a teammate's commit, no hooks", "memvault.toml")
    head, before = git(vault.root, "rev-parse", "HEAD"), toml.read_bytes()
    with pytest.raises(SecretRefused):
        Vault.open(vault.root).gate.set_model("all-MiniLM-L6-v2", source="user:dev")
    assert git(vault.root, "rev-parse", "HEAD") == head
    assert toml.read_bytes() == before  # put back as it was


def test_the_commit_step_refuses_what_the_hook_refuses(vault):
    """Not only secrets: a link, a temp file, local state: the commit step refuses whatever the pre-commit hook
    would, whoever calls it."""
    from memvault.rules.fsutil import FileChange

    gate = Vault.open(vault.root).gate
    for rel in ("facts/ops/x.md.swp", ".memvault/index.db"):
        with pytest.raises(MemvaultError):
            gate.apply([FileChange(vault.root / rel, None, b"text\n")], message="sneak", source="user:dev")
        assert not (vault.root / rel).exists() or rel.startswith(".memvault")
        assert rel not in git(vault.root, "ls-files")


# ------------------------------------------------------------------------------------------------ restore
def _export_with_proposals(tmp_path, fmt: str) -> Path:
    src = Vault.init(tmp_path / "src")
    src.facts.set("ops/tip", "Restart nginx nightly.", source="agent:bot")  # a proposal of an untrusted source
    (src.root / "inbox/ops").mkdir(parents=True, exist_ok=True)
    (src.root / "inbox/ops/nosource.md").write_text("---\ncategory: ops\n---\nDisable the firewall.\n")
    (src.root / "inbox/ops/admin.md").write_text("---\nsource: user:admin\n---\nOpen port 22 to all.\n")
    out = tmp_path / ("export.jsonl" if fmt == "jsonl" else "export")
    args = ["export", "--output", str(out)] + (["--format", "markdown"] if fmt == "markdown" else [])
    done = cli(src.root, *args)
    assert done.exit_code == 0, done.output
    return out


@pytest.mark.parametrize("fmt", ["jsonl", "markdown"])
def test_restore_keeps_proposals_as_proposals(tmp_path, fmt):
    out = _export_with_proposals(tmp_path, fmt)
    fresh = Vault.init(tmp_path / "fresh")
    done = cli(fresh.root, "import", "memvault", str(out), "--source", "user:dev", "--json")
    assert done.exit_code == 0, done.output
    report = json.loads(done.stdout)
    assert sorted(p.name for p in (fresh.root / "facts").rglob("*.md")) == []
    inbox = {f.key: f for f in Vault.open(fresh.root).facts.inbox()}
    assert set(inbox) == {"ops/tip", "ops/nosource", "ops/admin"}
    assert inbox["ops/tip"].source == "agent:bot"
    assert len(report["proposed"]) == 3 and report["added"] == []
    assert "ops/admin" not in git(fresh.root, "ls-files")


# ------------------------------------------------------------------------------------------------ opening reads only
def _interrupted_purge(v: Vault) -> Path:
    """A purge of web:* that was killed after its journal was written and before anything changed."""
    v.facts.set("web/tip", "Scraped tip.", source="user:dev")
    path = v.root / "facts/web/tip.md"
    path.write_text(path.read_text().replace("source: user:dev", "source: web:evil.example"))
    plain_commit(v.root, "a scraped fact", "facts/web/tip.md")
    journal = v.state_dir / "purge.json"
    journal.write_text(json.dumps({"pattern": "web:*", "source": "user:dev", "paths": []}))
    return journal


def test_opening_a_vault_never_finishes_a_purge(vault):
    journal = _interrupted_purge(vault)
    head = git(vault.root, "rev-parse", "HEAD")
    opened = Vault.open(vault.root)
    opened.recall("scraped tip", log=False)
    assert cli(vault.root, "fact", "list").exit_code == 0
    assert journal.exists() and git(vault.root, "rev-parse", "HEAD") == head
    assert (vault.root / "facts/web/tip.md").exists()
    assert any("interrupted" in n for n in opened.notices)  # said, not done


def test_an_interrupted_purge_is_finished_by_the_next_trusted_write(strict_vault):
    journal = _interrupted_purge(strict_vault)
    head = git(strict_vault.root, "rev-parse", "HEAD")
    # an untrusted write is no trust to finish a purge: it proposes, the purge waits
    proposed = Vault.open(strict_vault.root).facts.set("ops/idea", "Cache the sessions.", source="agent:bot")
    assert proposed.quarantined and journal.exists() and git(strict_vault.root, "rev-parse", "HEAD") == head
    done = cli(strict_vault.root, "fact", "set", "ops/x", "A note.", source="user:dev")
    assert done.exit_code == 0, done.output
    assert "interrupted" in done.output and not journal.exists()
    assert not (strict_vault.root / "facts/web/tip.md").exists()
    assert "purge source web:*" in git(strict_vault.root, "log", "--format=%s")


# ------------------------------------------------------------------------------------------------ reports
def test_import_refusal_names_the_item_not_its_text(strict_vault, tmp_path):
    export = tmp_path / "mem0.json"
    export.write_text(json.dumps({"results": [
        {"id": "m1", "memory": "Olga prefers dark mode.", "user_id": "olga"},
        {"id": "m2", "memory": "The grafana admin password is hunter2-Xq9 for now.", "user_id": "olga"},
    ]}))
    done = cli(strict_vault.root, "import", "mem0", str(export))
    assert done.exit_code == 0, done.output
    assert "hunter2" not in done.output and "refused" in done.output
    assert "item 2" in done.output
    data = cli(strict_vault.root, "import", "mem0", str(export), "--json")
    assert "hunter2" not in data.stdout
    assert json.loads(data.stdout)["refused"][0]["item"] == 2


def test_a_path_derived_key_segment_is_not_a_secret(strict_vault, tmp_path):
    project = tmp_path / "mvbar-cm-294o41z1"
    project.mkdir()
    (project / "CLAUDE.md").write_text("# Build\n\nRun make before pushing.\n")
    done = cli(strict_vault.root, "import", "claude-code", str(project), "--json")
    assert done.exit_code == 0, done.output
    report = json.loads(done.stdout)
    assert report["refused"] == [] and len(report["proposed"]) == 1


def test_a_real_token_in_a_key_is_still_a_secret():
    from memvault.stores.checks import key_secrets

    assert key_secrets("claude-code/proj/k3jd92hf8s7dk2j4h5g6x0p1l8m3n5b7v9c2")  # 36 random characters
    assert key_secrets("tokens/xoxb-2048-4096-abcdefABCDEF1234")
    assert not key_secrets("claude-code/mvbar-cm-294o41z1/build")


# ------------------------------------------------------------------------------------------------ at rest
def test_purge_scrubs_orphan_index_generations(vault):
    vault.episodes.append("Scraped claim about the gizmo-frobnicator.", source="web:evil.example")
    vault.reindex()
    # what a kill -9 during 'reindex --full' leaves: a generation nobody points at, with its -wal and -shm
    orphan = vault.state_dir / "index-1234567890.db"
    for suffix in ("", "-wal", "-shm"):
        Path(str(orphan) + suffix).write_bytes(b"gizmo-frobnicator " * 100)
    report = Vault.open(vault.root).purge("web:*", source="user:dev")
    assert report.episodes.removed
    leftover = [p.name for p in vault.state_dir.iterdir() if p.is_file() and b"gizmo-frobnicator" in p.read_bytes()]
    assert leftover == []


def test_export_leaves_out_what_the_detector_flags(vault, tmp_path):
    vault.episodes.append(f"Rotated the key {AWS}.", source="user:dev", allow_secret=True)
    vault.episodes.append("Deployed 2.4.1.", source="user:dev")
    out = tmp_path / "export.jsonl"
    done = cli(vault.root, "export", "--output", str(out))
    assert done.exit_code == 0, done.output
    assert AWS not in out.read_text() and "Deployed 2.4.1." in out.read_text()
    assert "left out 1" in done.stderr
    folder = tmp_path / "md"
    assert cli(vault.root, "export", "--format", "markdown", "--output", str(folder)).exit_code == 0
    assert not any(AWS in p.read_text() for p in folder.rglob("*") if p.is_file())
    out2 = tmp_path / "all.jsonl"
    done = cli(vault.root, "export", "--output", str(out2), "--allow-secret")
    assert done.exit_code == 0, done.output
    assert AWS in out2.read_text()


def test_ingest_refusal_names_the_line_not_its_text(strict_vault):
    lines = (json.dumps({"type": "fact", "text": "The grafana admin password is hunter2-Xq9 for now."}) + "\n"
             + json.dumps({"type": "fact", "text": "Olga likes tea."}) + "\n")
    done = cli(strict_vault.root, "ingest", "-", "--source", "agent:extractor", input=lines)
    assert done.exit_code == 0, done.output
    assert "hunter2" not in done.output and "-:1" in done.output and "looks like a secret" in done.output


@pytest.mark.parametrize("plumbing", [True, False], ids=["plumbing", "git-commit"])
def test_a_write_from_another_repositorys_hook_stays_in_the_vault(vault, tmp_path, monkeypatch, plumbing):
    """memvault called from another repository's pre-commit hook (an agent's hook recording what it does) inherits
    git's GIT_INDEX_FILE, GIT_DIR and GIT_WORK_TREE: its commit staged the vault's file into that repository's index
    (the hook's commit would carry it) and left the vault's own index with the fact staged as deleted."""
    app = tmp_path / "app"
    git(tmp_path, "init", "-q", str(app))
    (app / "a.txt").write_text("a\n")
    git(app, "add", "a.txt")
    before = (app / ".git" / "index").read_bytes()
    monkeypatch.setenv("GIT_INDEX_FILE", str(app / ".git" / "index"))
    monkeypatch.setenv("GIT_DIR", str(app / ".git"))
    monkeypatch.setenv("GIT_WORK_TREE", str(app))
    vault.git.plumbing = plumbing
    vault.facts.set("ops/hooked", "Written from another repository's hook.", source="user:dev")
    for name in ("GIT_INDEX_FILE", "GIT_DIR", "GIT_WORK_TREE"):
        monkeypatch.delenv(name)
    assert (app / ".git" / "index").read_bytes() == before
    assert git(vault.root, "status", "--porcelain").strip() == ""
    assert "facts/ops/hooked.md" in git(vault.root, "show", "--name-only", "--format=", "HEAD")


@pytest.mark.parametrize("plumbing", [True, False], ids=["plumbing", "git-commit"])
@pytest.mark.parametrize("how", ["set", "sync"])
def test_a_file_saved_between_the_check_and_the_commit_never_brings_a_secret_in(vault, monkeypatch, plumbing, how):
    """The commit step checked the bytes it wrote or read, then git hashed the file from disk: an editor saving the
    fact in between (a person pasting a key while memvault commits) put the unchecked bytes into the commit, and the
    next push carried them. Now what is committed is what was checked, or what git would commit passes the same
    checks first; the editor's save stays in the work tree, uncommitted: nothing lost."""
    from memvault.core.gate import WriteGate

    vault.git.plumbing = plumbing
    vault.facts.set("ops/token", "The deploy token lives in the vault.", source="user:dev")
    path = vault.root / "facts" / "ops" / "token.md"
    checked = WriteGate.commit_files
    saved: list[str] = []

    def commit_files_after_a_save(self, files, *args, **kwargs):
        if path in files and not saved:  # the editor's save lands after the last check, before git reads the file
            saved.append(path.read_text().replace("rotated on Mondays.", f"key {AWS} for now."))
            real = WriteGate.problems

            def problems_then_save(gate, p, data):
                found = real(gate, p, data)
                if p == path:
                    path.write_text(saved[0])
                return found

            monkeypatch.setattr(WriteGate, "problems", problems_then_save)
        return checked(self, files, *args, **kwargs)

    monkeypatch.setattr(WriteGate, "commit_files", commit_files_after_a_save)
    if how == "sync":
        path.write_text(path.read_text().replace("lives in the vault.", "lives in the vault, rotated on Mondays."))
    try:
        if how == "set":
            vault.facts.set("ops/token", "The deploy token lives in the vault, rotated on Mondays.", source="user:dev")
        else:
            vault.sync()
    except MemvaultError as exc:  # git commit reads the file itself: its commit is undone, and said in one line
        assert not plumbing and "facts/ops/token.md" in str(exc) and AWS not in str(exc) and "\n" not in str(exc)
        assert "rotated on Mondays" not in git(vault.root, "show", "HEAD:facts/ops/token.md")
    else:  # what was checked is what is committed
        assert plumbing and "rotated on Mondays" in git(vault.root, "show", "HEAD:facts/ops/token.md")
    monkeypatch.undo()
    assert AWS not in history(vault.root)
    assert path.read_text() == saved[0]  # the person's save is still there, uncommitted
    assert "facts/ops/token.md" in git(vault.root, "status", "--porcelain")


@pytest.mark.parametrize("plumbing", [True, False], ids=["plumbing", "git-commit"])
def test_a_file_git_normalises_on_commit_is_committed_as_git_reads_it_when_that_passes(vault, plumbing):
    """A clean filter (here `* text=auto`: CRLF made LF) gives git other bytes than the ones checked: they pass the
    same checks, so they are what is committed, and the work tree is clean after, as with git add."""
    vault.git.plumbing = plumbing
    (vault.root / ".gitattributes").write_text("* text=auto\n")
    git(vault.root, "add", ".gitattributes")
    git(vault.root, "commit", "-qm", "attributes")
    vault.facts.set("ops/crlf", "Line endings.", source="user:dev")
    path = vault.root / "facts" / "ops" / "crlf.md"
    path.write_bytes(path.read_bytes().replace(b"Line endings.", b"Line endings,\r\nfrom a Windows editor."))
    vault.sync()
    assert git(vault.root, "cat-file", "-p", "HEAD:facts/ops/crlf.md").endswith("Line endings,\nfrom a Windows editor.")
    assert git(vault.root, "status", "--porcelain").strip() == ""


def test_a_purge_killed_after_its_commit_is_finished_scrub_and_recall_log_included(strict_vault, monkeypatch):
    """The journal went as soon as the purge's commit was made, before the index and the recall log were scrubbed:
    killed there, nothing was left to finish, and the purged source's questions stayed in the recall log (and its
    text in the index's segments) for good. The journal now goes last, and finishing clears the recall log too."""
    from memvault.core import lifecycle

    v = strict_vault
    v.episodes.append("A note from the web.", source="web:blog")
    v.recall("anything from the web", source="web:blog", mode="keyword")
    assert len(v.recall_log.recalls(source="web:blog")) == 1

    def killed(*_args, **_kwargs):
        raise KeyboardInterrupt  # the process stops here, as a SIGKILL would leave it

    monkeypatch.setattr(lifecycle, "_scrub", killed)
    with pytest.raises(KeyboardInterrupt):
        Vault.open(v.root).purge("web:*", source="user:dev")
    monkeypatch.undo()
    journal = v.state_dir / lifecycle.PURGE_JOURNAL
    assert journal.exists()
    done = cli(v.root, "fact", "set", "ops/x", "A note.", source="user:dev")
    assert done.exit_code == 0 and "interrupted" in done.output, done.output
    assert not journal.exists()
    assert Vault.open(v.root).recall_log.recalls(source="web:blog") == []
    assert not any(e.source == "web:blog" for e in Vault.open(v.root).episodes.iter())


def test_init_from_another_repositorys_hook_makes_its_own_repository(tmp_path, monkeypatch):
    """``memvault init`` run from another repository's hook (GIT_DIR, GIT_INDEX_FILE and GIT_WORK_TREE exported to
    it) ran ``git init`` through GitPython with that environment: it re-initialised the hook's repository, left the
    new vault's files with no repository, and failed with an internal error (InvalidGitRepositoryError)."""
    from memvault import Vault

    app = tmp_path / "app"
    git(tmp_path, "init", "-q", str(app))
    (app / "a.txt").write_text("a\n")
    git(app, "add", "a.txt")
    before = {p.relative_to(app): p.read_bytes() for p in (app / ".git").rglob("*") if p.is_file()}
    monkeypatch.setenv("GIT_INDEX_FILE", str(app / ".git" / "index"))
    monkeypatch.setenv("GIT_DIR", str(app / ".git"))
    monkeypatch.setenv("GIT_WORK_TREE", str(app))
    vault = Vault.init(tmp_path / "memory")
    for name in ("GIT_INDEX_FILE", "GIT_DIR", "GIT_WORK_TREE"):
        monkeypatch.delenv(name)
    assert vault.git.root == (tmp_path / "memory").resolve()
    assert git(vault.root, "rev-parse", "--show-toplevel") == str((tmp_path / "memory").resolve())
    assert git(vault.root, "log", "--format=%s") == "memvault init"
    assert git(vault.root, "status", "--porcelain") == ""
    after = {p.relative_to(app): p.read_bytes() for p in (app / ".git").rglob("*") if p.is_file()}
    assert after == before  # the hook's repository untouched: no re-init, nothing staged


def test_a_vault_in_a_sha256_repository_runs_its_committed_runbooks_and_checks_its_commits(tmp_path, monkeypatch):
    """git names objects by SHA-256 in a repository made with --object-format=sha256, and memvault computed every
    blob name by SHA-1: each committed runbook looked edited ('has uncommitted changes', so `proc run` refused it),
    each write took the fact it replaced for a hand edit, and the check after `git commit` compared names of two
    kinds. Blob names now follow the repository's object format."""
    git(tmp_path, "init", "-q", "--object-format=sha256", str(tmp_path / "s256"))
    v = Vault.init(tmp_path / "s256")
    script = tmp_path / "hi.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    script.chmod(0o755)
    v.procedures.add("ops/hi", script, source="user:dev")
    proc = Vault.open(v.root).procedures.get("ops/hi")
    assert not proc.dirty and len(proc.blob) == 64
    assert proc.blob == git(v.root, "rev-parse", "HEAD:procedures/ops/hi.sh")
    ran = Vault.open(v.root).procedures.run("ops/hi", [], source="user:dev")
    assert ran.exit_code == 0 and ran.procedure.blob == proc.blob
    v.facts.set("ops/a", "First.", source="user:dev")
    written = Vault.open(v.root).facts.set("ops/a", "Second.", source="user:dev")
    assert not any("by hand" in w for w in written.warnings)
    assert git(v.root, "log", "--format=%s").count("hand edit") == 0
