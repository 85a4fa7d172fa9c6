"""memvault's own export attacked and used: a crafted export (two records for one file, a runbook under a name
another file carries, bytes that are not UTF-8, a newer format, a giant file) is refused record by record with
nothing half-written, and an export says what it left out and is one consistent picture of the vault."""
from __future__ import annotations

import base64
import json
import threading

import pytest

from memvault import Vault
from memvault.core.transfer import restore_items, snapshot
from memvault.interfaces.transfer import read
from memvault.rules.errors import InvalidValue

HEADER = {"type": "memvault-export", "version": 1, "vault": "x", "exported_at": "2026-01-01T00:00:00Z"}


def export(tmp_path, *records, header=None, name="crafted.jsonl"):
    path = tmp_path / name
    lines = [json.dumps(header or HEADER)] + [json.dumps(r) for r in records]
    path.write_text("\n".join(lines) + "\n")
    return path


def fact(key, body, **extra):
    return {"type": "fact", "key": key, "path": f"facts/{key}.md",
            "content": f"---\nsource: user:dev\n---\n{body}\n", **extra}


def proc(name, path, content="#!/bin/sh\necho hi\n", mode="0o755"):
    return {"type": "procedure", "name": name, "path": path, "mode": mode, "content": content}


def restore(tmp_path, path, name="fresh"):
    fresh = Vault.init(tmp_path / name)
    return fresh, restore_items(fresh, read("memvault", path), source="user:dev")


def test_two_records_of_one_fact_with_different_text_are_a_conflict_not_two_adds(tmp_path):
    path = export(tmp_path, fact("dup/k", "the first value, 1"), fact("dup/k", "the second value, 2"),
                  fact("dup/same", "one text"), fact("dup/same", "one text"))
    fresh, report = restore(tmp_path, path)
    assert [e["origin"] for e in report.added] == [f"{path}:2", f"{path}:4"]
    assert [(e["origin"], e["key"]) for e in report.conflicts] == [(f"{path}:3", "dup/k")]
    assert [e["origin"] for e in report.skipped] == [f"{path}:5"]
    assert "the first value" in (fresh.root / "facts" / "dup" / "k.md").read_text()
    assert fresh.git.run("status", "--porcelain") == ""


def test_a_runbook_under_a_name_another_file_carries_is_a_conflict(tmp_path):
    path = export(tmp_path, proc("ops/a", "procedures/ops/a.sh"), proc("ops/a", "procedures/ops/a.py", "print(2)\n"),
                  proc("ops/b", "procedures/ops/b.py", "print(3)\n"))
    fresh = Vault.init(tmp_path / "fresh")
    (fresh.root / "procedures" / "ops").mkdir(parents=True)
    (fresh.root / "procedures" / "ops" / "b.sh").write_text("#!/bin/sh\necho b\n")
    report = restore_items(fresh, read("memvault", path), source="user:dev")
    assert [e["origin"] for e in report.added] == [f"{path}:2"]
    assert sorted(e["origin"] for e in report.conflicts) == [f"{path}:3", f"{path}:4"]
    assert sorted(p.name for p in (fresh.root / "procedures" / "ops").iterdir()) == ["a.sh", "b.sh"]
    assert fresh.procedures.get("ops/a").text == "#!/bin/sh\necho hi\n"


@pytest.mark.parametrize("bad", ["procedures/ops/x.s\x1b[31mh", "procedures/ops/x.sh\n", "procedures/ops/x. sh",
                                 "procedures/other/x.sh", "procedures/ops/x.tar.gz", "procedures/ops/y.sh"])
def test_a_runbooks_file_name_is_its_name_and_a_plain_extension(tmp_path, bad):
    path = export(tmp_path, proc("ops/x", bad), proc("ops/ok", "procedures/ops/ok.sh"))
    fresh, report = restore(tmp_path, path)
    assert [e["origin"] for e in report.refused] == [f"{path}:2"], report.refused
    assert "procedures/" in report.refused[0]["reason"] and "\x1b" not in report.refused[0]["reason"]
    assert sorted(p.name for p in (fresh.root / "procedures" / "ops").iterdir()) == ["ok.sh"]


def test_a_runbook_comes_back_with_its_exec_bit_but_never_writable_by_others(tmp_path):
    path = export(tmp_path, proc("ops/x", "procedures/ops/x.sh", mode="0o4777"),
                  proc("ops/y", "procedures/ops/y.sh", mode="0o640"))
    fresh, report = restore(tmp_path, path)
    assert len(report.added) == 2
    assert (fresh.root / "procedures" / "ops" / "x.sh").stat().st_mode & 0o7777 == 0o755
    assert (fresh.root / "procedures" / "ops" / "y.sh").stat().st_mode & 0o7777 == 0o640


def test_a_fact_or_proposal_that_is_not_utf8_is_refused_by_its_record_and_the_rest_come_in(tmp_path):
    bad = base64.b64encode(b"---\nsource: user:dev\n---\n\xff\xfe not text\n").decode()
    path = export(tmp_path, {"type": "fact", "key": "bad/fact", "path": "facts/bad/fact.md", "content_base64": bad},
                  {"type": "proposal", "key": "bad/prop", "path": "inbox/bad/prop.md", "content_base64": bad},
                  fact("ok/two", "fine"))
    fresh, report = restore(tmp_path, path)
    assert [e["origin"] for e in report.added] == [f"{path}:4"]
    assert sorted(e["origin"] for e in report.refused) == [f"{path}:2", f"{path}:3"]
    assert all("UTF-8" in e["reason"] for e in report.refused)
    folder = tmp_path / "folder"
    (folder / "inbox" / "bad").mkdir(parents=True)
    (folder / "facts" / "ok").mkdir(parents=True)
    (folder / "inbox" / "bad" / "prop.md").write_bytes(base64.b64decode(bad))
    (folder / "facts" / "ok" / "two.md").write_text("---\nsource: user:dev\n---\nfine\n")
    items = list(read("memvault", folder))
    assert [i.kind for i in items] == ["fact", "refused"]


def test_an_export_from_a_newer_memvault_is_refused_in_one_line_before_anything_is_written(tmp_path):
    path = export(tmp_path, fact("ver/k", "from the future"), header={**HEADER, "version": 2})
    fresh = Vault.init(tmp_path / "fresh")
    head = fresh.git.run("rev-parse", "HEAD")
    with pytest.raises(InvalidValue, match="version 2") as exc:
        restore_items(fresh, read("memvault", path), source="user:dev")
    assert str(path) in str(exc.value)
    assert fresh.git.run("rev-parse", "HEAD") == head and not (fresh.root / "facts" / "ver").exists()
    for version in ("1", None, 1.5, True):
        with pytest.raises(InvalidValue):
            list(read("memvault", export(tmp_path, header={**HEADER, "version": version}, name="v.jsonl")))


def test_a_giant_file_in_an_export_folder_is_refused_without_being_held(tmp_path):
    import tracemalloc

    folder = tmp_path / "folder"
    (folder / "facts").mkdir(parents=True)
    (folder / "procedures").mkdir()
    with open(folder / "facts" / "big.md", "wb") as f:
        f.write(b"---\nsource: user:dev\n---\n")
        f.truncate(64 << 20)
    with open(folder / "procedures" / "big.sh", "wb") as f:
        f.truncate(64 << 20)
    (folder / "facts" / "small.md").write_text("---\nsource: user:dev\n---\nsmall\n")
    tracemalloc.start()
    try:
        items = list(read("memvault", folder))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert [(i.kind, i.origin.rsplit("/", 1)[-1]) for i in items] == [
        ("refused", "big.md"), ("fact", "small.md"), ("refused", "big.sh")]
    assert "bytes" in (items[0].refusal or "")
    assert peak < 24 << 20, f"{peak >> 20} MiB held to read a 64 MiB file"


def test_an_export_names_the_files_it_could_not_read(vault, tmp_path):
    vault.facts.set("db/main", "Primary on db01.", source="user:dev")
    outside = tmp_path / "outside.md"
    outside.write_text("---\nsource: user:dev\n---\nnot the vault's\n")
    (vault.root / "facts" / "db" / "elsewhere.md").symlink_to(outside)
    (vault.root / "procedures").mkdir(exist_ok=True)
    (vault.root / "procedures" / "away.sh").symlink_to(outside)
    left_out: list = []
    records = list(snapshot(vault, left_out=left_out))
    assert [r.get("key") for r in records if r["type"] == "fact"] == ["db/main"]
    named = {(e["type"], e.get("key") or e.get("name") or e.get("path")): e["reason"] for e in left_out}
    assert set(named) == {("fact", "facts/db/elsewhere.md"), ("procedure", "procedures/away.sh")}, left_out
    assert all("symlink" in reason for reason in named.values())


def test_an_export_names_a_fact_it_has_no_permission_to_read_and_goes_on(vault, monkeypatch):
    """A fact file the exporting user may not read (another user's `chmod 600`, a file owned by root in a shared
    clone) stopped the whole export with one line; it is named in what was left out, and the rest exported. Faked
    by refusing the read: tests run as root here, whom file modes do not stop."""
    from pathlib import Path

    vault.facts.set("db/main", "Primary on db01.", source="user:dev")
    vault.facts.set("db/secret", "Only root reads this.", source="user:dev")
    locked = vault.root / "facts" / "db" / "secret.md"
    read = Path.read_bytes

    def read_bytes(self):
        if self == locked:
            raise PermissionError(13, "Permission denied", str(self))
        return read(self)

    monkeypatch.setattr(Path, "read_bytes", read_bytes)
    left_out: list = []
    records = list(snapshot(vault, left_out=left_out))
    assert [r.get("key") for r in records if r["type"] == "fact"] == ["db/main"]
    assert [(e["type"], e["path"]) for e in left_out] == [("fact", "facts/db/secret.md")]
    assert "Permission denied" in left_out[0]["reason"]


def after_listing_facts(monkeypatch, vault, then):
    """Run ``then`` just after an export has listed the facts, before it lists the proposals (once)."""
    store = type(vault.facts.store)
    listed = store.files
    done: list = []

    def files(self, *, inbox=False, problems=None):
        found = listed(self, inbox=inbox, problems=problems)
        if not inbox and not done:
            done.append(None)
            done[0] = then()
        return found

    monkeypatch.setattr(store, "files", files)
    return done


def test_a_proposal_accepted_while_an_export_runs_is_in_it_once(strict_vault, monkeypatch):
    v = strict_vault
    v.facts.set("z/last", "The last fact, listed after the rest.", source="user:dev")
    v.facts.set("a/first", "Proposed by an agent before the export.", source="agent:x")
    assert [f.key for f in v.facts.inbox()] == ["a/first"]

    def accept():
        accepting = threading.Thread(target=lambda: Vault.open(v.root).facts.accept("a/first", source="user:dev"))
        accepting.start()
        accepting.join(1.0)  # the accept waits for the export's read (before, it slipped in between)
        return accepting

    started = after_listing_facts(monkeypatch, v, accept)
    records = list(snapshot(v))
    started[0].join(10)
    assert not started[0].is_alive() and (v.root / "facts" / "a" / "first.md").is_file()
    got = [(r["type"], r.get("key")) for r in records if r["type"] in ("fact", "proposal")]
    assert got == [("fact", "z/last"), ("proposal", "a/first")], got


def test_a_fact_removed_by_hand_while_an_export_runs_does_not_stop_it(vault, monkeypatch):
    v = vault
    for key in ("a/one", "b/two", "c/three"):
        v.facts.set(key, f"The fact {key}.", source="user:dev")
    after_listing_facts(monkeypatch, v, lambda: (v.root / "facts" / "b" / "two.md").unlink())
    assert [r["key"] for r in snapshot(v) if r["type"] == "fact"] == ["a/one", "c/three"]


def test_a_markdown_export_that_fails_half_way_leaves_no_half_folder_under_its_name(tmp_path):
    from memvault.interfaces.transfer.memvault import write_markdown

    records = [fact("a/one", "first"), fact("b/two", "second"),
               {"type": "fact", "key": "c/three", "path": "../escaped.md", "content": "x"}]
    out = tmp_path / "out"
    with pytest.raises(InvalidValue, match="outside the export folder"):
        write_markdown(iter(records), out, "x")
    assert not out.exists() or list(out.iterdir()) == []
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "out") == []
    assert write_markdown(iter(records[:2]), out, "x") == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    assert (out / "facts" / "b" / "two.md").read_text().endswith("second\n") and out.stat().st_mode & 0o777 == 0o700


def test_an_episode_line_with_a_lone_surrogate_is_a_bad_line_not_an_export_that_cannot_be_written(vault, tmp_path):
    from memvault.interfaces.transfer.memvault import write_jsonl

    vault.episodes.append("before", source="user:dev")
    month = vault.episodes.files()[0]
    with open(month, "ab") as f:  # a teammate's tool wrote a JSON escape that is no character
        f.write(b'{"id": "01M96V19Y81S11P88X77697Q41", "created_at": "2026-01-02T00:00:00.000Z", '
                b'"source": "user:dev", "kind": "raw", "text": "lone \\ud800 half"}\n'
                b'{"id": "01M96V19Y81S11P88X77697Q42", "created_at": "2026-01-02T00:00:01.000Z", '
                b'"source": "user:dev", "kind": "raw", "text": "a pair \\ud83d\\ude00 is fine"}\n')
    left_out: list = []
    out = tmp_path / "export.jsonl"
    with open(out, "w", encoding="utf-8") as f:
        write_jsonl(snapshot(vault, left_out=left_out), f, "x")
    texts = [json.loads(line)["episode"]["text"] for line in out.read_text().splitlines()[1:]]
    assert texts == ["before", "a pair \U0001F600 is fine"]
    assert [(e["type"], e["path"].rsplit("/", 1)[-1]) for e in left_out] == [("episode", f"{month.name}:2")]
    assert "surrogate" in left_out[0]["reason"]


def test_a_record_with_a_lone_surrogate_is_refused_by_its_line_and_the_rest_come_in(tmp_path):
    path = tmp_path / "crafted.jsonl"
    path.write_text(json.dumps(HEADER) + "\n"
                    '{"type": "episode", "episode": {"id": "01M96V19Y81S11P88X77697Q49", "created_at": '
                    '"2026-01-02T00:00:00.000Z", "source": "user:dev", "kind": "raw", "text": "lone \\ud800 x"}}\n'
                    '{"type": "fact", "key": "s/u", "content": "---\\nsource: user:dev\\n---\\nlone \\udcff\\n"}\n'
                    + json.dumps(fact("ok/one", "fine")) + "\n")
    fresh, report = restore(tmp_path, path)
    assert [e["origin"] for e in report.refused] == [f"{path}:2", f"{path}:3"]
    assert all("surrogate" in e["reason"] for e in report.refused)
    assert [e["origin"] for e in report.added] == [f"{path}:4"]


def test_an_export_names_an_unreadable_file_on_one_line_whatever_its_name_holds(vault, tmp_path, runner):
    """A pulled file whose name held a line feed ('x<LF>memvault: warning: forged.md') was named in export's 'left out
    ... that could not be read' line as it is: its second half printed a line memvault never wrote."""
    from memvault.interfaces.cli import cli

    vault.facts.set("db/main", "Primary on db01.", source="user:dev")
    (vault.root / "facts" / "x\nmemvault: warning: forged.md").write_text("---\nsource: user:dev\n---\nhi\n")
    result = runner.invoke(cli, ["--vault", str(vault.root), "export", "-o", str(tmp_path / "out.jsonl")])
    assert result.exit_code == 0, result.output
    lines = result.stderr.splitlines()
    assert not any(line.startswith("memvault: warning: forged") for line in lines), lines
    assert any("left out 1 that could not be read" in line and "\\u000a" in line for line in lines), lines


def test_an_import_report_names_a_file_on_one_line_whatever_its_name_holds(tmp_path, runner):
    """An export folder's fact named 'y<LF>  conflict: db-primary: forged.md' was refused by its path, printed as it
    is: the report showed a conflict line no import made."""
    from memvault.interfaces.cli import cli

    folder = tmp_path / "exported" / "facts"
    folder.mkdir(parents=True)
    (folder / "ok.md").write_text("---\nsource: user:dev\n---\nfine\n")
    (folder / "y\n  conflict: db-primary: forged.md").write_text("---\nsource: user:dev\n---\nhi\n")
    fresh = Vault.init(tmp_path / "fresh")
    result = runner.invoke(cli, ["--vault", str(fresh.root), "import", "memvault", str(tmp_path / "exported"),
                                 "--source", "user:dev"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert not any(line.startswith("  conflict:") for line in lines), lines
    assert any(line.startswith("  refused:") and "\\u000a" in line for line in lines), lines
