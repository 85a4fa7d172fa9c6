"""What the CLI's exit code and its "nothing" lines tell a pipeline or a person: a total refusal is a failure, an
interrupt is 130, and an empty answer says so."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from conftest import git

AWS = "AKIA" + "IOSFODNN7EXAMPLE"


def write_lines(path: Path, *items: object) -> str:
    path.write_text("".join((i if isinstance(i, str) else json.dumps(i)) + "\n" for i in items))
    return str(path)


# --------------------------------------------------------------------------------------------- ingest / import
def test_ingest_where_every_line_is_refused_exits_1_with_its_report(invoke, tmp_path):
    src = write_lines(tmp_path / "bad.jsonl", "not json", {"type": "fact", "key": "a/b", "text": f"key {AWS}"},
                      {"type": "nope", "text": "x"})
    r = invoke("ingest", src, "--json")
    assert r.exit_code == 1, r.output
    report = json.loads(r.stdout)  # the report is still printed whole
    assert len(report["skipped"]) == 3 and not report["added"]
    assert "nothing was stored" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_ingest_with_one_good_line_or_only_duplicates_exits_0(invoke, tmp_path):
    good = {"type": "fact", "key": "a/b", "text": "the build runs on port 8080"}
    r = invoke("ingest", write_lines(tmp_path / "mixed.jsonl", "not json", good))
    assert r.exit_code == 0, r.output
    # the same again: merged into what is there (already stored) beside a refused line: success
    r = invoke("ingest", write_lines(tmp_path / "again.jsonl", good, "not json"))
    assert r.exit_code == 0, r.output
    # nothing at all to read is not a failure either
    assert invoke("ingest", write_lines(tmp_path / "empty.jsonl", "")).exit_code == 0


def test_ingest_of_only_recalled_text_is_not_a_failure(invoke, vault, tmp_path):
    invoke("fact", "set", "a/b", "the build runs on port 8080")
    invoke("recall", "build port")
    recalled = {"type": "fact", "text": "the build runs on port 8080"}
    r = invoke("ingest", write_lines(tmp_path / "r.jsonl", recalled), "--json")
    skipped = json.loads(r.stdout)["skipped"]
    assert [e["reason"] for e in skipped] == ["text: text is a memory recall returned"]
    assert r.exit_code == 0, r.output  # already in the vault: not a refusal


def test_import_where_every_item_is_refused_exits_1(invoke, vault, tmp_path):
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "one.md").write_text(f"aws key {AWS}\n")
    r = invoke("import", "markdown", str(folder), "--json")
    report = json.loads(r.stdout)
    assert report["refused"] and not (report["added"] or report["proposed"] or report["merged"]), report
    assert r.exit_code == 1, r.output
    assert "nothing was stored" in r.stderr


def test_import_again_is_success_even_beside_a_refused_item(invoke, vault, tmp_path):
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "one.md").write_text("the deploy host is build-01\n")
    (folder / "two.md").write_text(f"aws key {AWS}\n")
    first = invoke("import", "markdown", str(folder), "--json")
    assert first.exit_code == 0, first.output
    again = invoke("import", "markdown", str(folder), "--json")
    report = json.loads(again.stdout)
    assert report["refused"] and not (report["added"] or report["proposed"]), report
    assert again.exit_code == 0, again.output  # what is already there counts: importing twice is not a failure


def test_the_exit_rule_is_in_the_help(invoke):
    for command in ("ingest", "import"):
        text = " ".join(invoke(command, "--help").stdout.split())
        assert "exits 1" in text.lower(), command


# --------------------------------------------------------------------------------------------------- ^C
def _blocked_on_read(pid: int) -> bool:
    try:
        return "pipe" in Path(f"/proc/{pid}/wchan").read_text() or "wait" in Path(f"/proc/{pid}/wchan").read_text()
    except OSError:
        return False


def test_an_interrupt_exits_130_with_one_line(vault):
    env = {**os.environ, "MEMVAULT_NO_DAEMON": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "memvault", "--vault", str(vault.root), "ingest", "-"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    try:
        deadline = time.monotonic() + 30
        # blocked reading its stdin, which never comes (the vault is open by then: the command is running)
        while time.monotonic() < deadline and not _blocked_on_read(proc.pid):
            time.sleep(0.05)
        time.sleep(0.3)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert err.decode().strip() == "memvault: interrupted"


# ------------------------------------------------------------------------------------------------ "nothing"
def test_fact_list_of_a_category_no_fact_has_says_so(invoke):
    invoke("fact", "set", "a/one", "one", "-c", "db")
    r = invoke("fact", "list", "-c", "nosuch")
    assert r.exit_code == 0 and r.stdout == ""
    assert r.stderr.strip() == "memvault: no facts in category nosuch"
    r = invoke("fact", "list", "-c", "db", "-t", "nosuch")
    assert r.exit_code == 0 and r.stderr.strip() == "memvault: no facts in category db with tag nosuch"
    r = invoke("fact", "list", "-c", "nosuch", "--json")
    assert r.exit_code == 0 and json.loads(r.stdout) == [] and "no facts" in r.stderr
    r = invoke("fact", "list", "-c", "db")
    assert "a/one" in r.stdout and r.stderr == ""


def test_hooks_uninstall_twice_says_there_is_nothing_to_remove(invoke, vault):
    assert invoke("hooks", "install").exit_code == 0
    first = invoke("hooks", "uninstall")
    assert first.exit_code == 0 and "removed" in first.stdout
    second = invoke("hooks", "uninstall")
    assert second.exit_code == 0, second.output
    assert (second.stdout + second.stderr).strip() == "memvault: no memvault hooks installed here"
    assert git(vault.root, "status", "--porcelain") == ""
