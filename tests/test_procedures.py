from __future__ import annotations

import os
import stat

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
