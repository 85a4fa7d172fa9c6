"""Imports that never stop half-way: an item nested too deep, too large or of the wrong type is refused with its
position and reason (never its text), every other item comes in, and the report is always printed.

Inputs keep the real shape of each tool's files (tests/fixtures/import): a claude-mem database built from its
schema and rows, mem0's ``get_all`` export, a memvault export; one bad item is slipped in among the good ones."""
from __future__ import annotations

import re

import json
import sqlite3

import pytest

from agent_fixtures import IMPORTS
from memvault.core.transfer import import_items, restore_items
from memvault.interfaces.transfer import read
from memvault.interfaces.transfer.memvault import write_jsonl
from memvault.core.transfer import snapshot
from memvault.rules.errors import InvalidValue
from memvault.rules.jsontext import MAX_DEPTH, array_items, depth_of, loads

DEEP = 100_000
#: Text of the bad items: it must never be echoed by a report or an error.
MARK = "zebra-quokka-marmalade"


def deep(n: int = DEEP) -> str:
    return "[" * n + "]" * n


def claude_mem_db(tmp_path, bad_facts: str) -> str:
    """claude-mem's own schema and rows, plus an observation whose ``facts`` column is ``bad_facts``, placed between
    the fixture's two observations, and one good observation after it."""
    path = tmp_path / "claude-mem.db"
    conn = sqlite3.connect(path)
    conn.executescript((IMPORTS / "claude-mem" / "schema.sql").read_text())
    conn.executescript((IMPORTS / "claude-mem" / "data.sql").read_text())
    insert = ("INSERT INTO observations (memory_session_id, project, text, type, title, subtitle, facts, narrative, "
              "concepts, files_read, files_modified, prompt_number, discovery_tokens, created_at, created_at_epoch, "
              "content_hash) VALUES (?, 'shopfront', NULL, ?, ?, NULL, ?, ?, '[]', '[]', '[]', ?, 100, ?, ?, ?)")
    conn.execute(insert, ("mem-7f3a", "discovery", f"Bad row {MARK}", bad_facts, f"narrative {MARK}", 9,
                          "2026-11-20T09:01:00.000Z", 1795165260000, "bad00000000000001"))
    conn.execute(insert, ("mem-7f3a", "decision", "Cache warmed at boot",
                          '["The product cache is warmed at boot by warm_cache.py"]',
                          "The cache is warmed at boot.", 10, "2026-11-20T09:05:00.000Z", 1795165500000,
                          "c0c0c0c0c0c0c0c0"))
    conn.commit()
    conn.close()
    return str(path)


def refused_lines(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines() if line.strip().startswith("refused:")]


# ------------------------------------------------------------------------------------------------ claude-mem
@pytest.mark.parametrize("bad", [deep(), deep(21), '["ok", {"nested": ' + deep(500) + "}]",
                                 '["a fact", 42, {"x": 1}]', "x" * (2 << 20)],
                         ids=["100k-deep", "21-deep", "deep-inside", "not-strings", "2MiB"])
def test_a_bad_claude_mem_observation_is_refused_and_the_rest_comes_in(invoke, vault, tmp_path, bad):
    db = claude_mem_db(tmp_path, bad)
    r = invoke("import", "claude-mem", db)
    assert r.exit_code == 0, r.output  # partial success: the report says what was refused
    assert r.stdout.startswith("imported from claude-mem as import:claude-mem: ")
    refused = refused_lines(r.stdout)
    assert len(refused) == 1 and ":observations:3" in refused[0], r.stdout
    assert MARK not in r.output and "[[[[" not in r.output and "xxxx" not in r.output
    # everything else came in: the fixture's facts and the good row after the bad one
    inbox = sorted(p.relative_to(vault.root / "inbox").as_posix() for p in (vault.root / "inbox").rglob("*.md"))
    assert len(inbox) == 4 and "claude-mem/shopfront/the-product-cache-is-warmed-at-boot-by-warm-cache.md" in inbox
    episodes = list(vault.episodes.iter(source="import:claude-mem"))
    assert len(episodes) == 4 and not any(MARK in e.text for e in episodes)  # nothing of the bad row


def test_the_report_of_a_refused_claude_mem_row_in_json(invoke, vault, tmp_path):
    r = invoke("import", "claude-mem", claude_mem_db(tmp_path, deep()), "--json")
    assert r.exit_code == 0, r.output
    report = json.loads(r.stdout)
    assert [e["reason"] for e in report["refused"]] == [f"facts: nested deeper than {MAX_DEPTH} levels"]
    assert len(report["proposed"]) == 4 and len(report["added"]) == 4  # 4 facts proposed, 4 episodes


# ------------------------------------------------------------------------------------------------------ mem0
def mem0_export(tmp_path, *bad: object, jsonl: bool = False) -> str:
    """The fixture's get_all export with ``bad`` entries between its first and second memory."""
    good = json.loads((IMPORTS / "mem0" / "export.json").read_text())["results"]
    entries = [json.dumps(good[0]), *[b if isinstance(b, str) else json.dumps(b) for b in bad],
               *[json.dumps(g) for g in good[1:]]]
    path = tmp_path / ("export.jsonl" if jsonl else "export.json")
    path.write_text("\n".join(entries) + "\n" if jsonl else '{\n  "results": [\n    ' + ",\n    ".join(entries)
                    + "\n  ]\n}\n")
    return str(path)


BAD_MEM0 = [
    {"id": "1", "memory": f"Likes {MARK}", "hash": "x", "metadata": "notadict", "user_id": "alex"},
    '{"id": "2", "memory": "Likes ' + MARK + '", "metadata": {"deep": ' + deep() + '}, "user_id": "alex"}',
    {"id": "3", "memory": f"Likes {MARK}", "metadata": None, "categories": "notalist", "user_id": "alex"},
    {"id": "4", "memory": {"text": MARK}, "user_id": "alex"},
    {"id": "5", "memory": f"Likes {MARK}", "user_id": ["alex"]},
    42,
    '{"id": "7", "memory": "Likes ' + MARK + '", "user_id": "alex", "categories": [' + deep(30) + "]}",
]


@pytest.mark.parametrize("jsonl", [False, True], ids=["json", "jsonl"])
def test_odd_mem0_entries_are_refused_by_position_and_the_rest_comes_in(invoke, vault, tmp_path, jsonl):
    r = invoke("import", "mem0", mem0_export(tmp_path, *BAD_MEM0, jsonl=jsonl))
    assert r.exit_code == 0, r.output
    refused = refused_lines(r.stdout)
    assert len(refused) == len(BAD_MEM0), r.stdout
    where = [re.search(r"\(([^()]*):(\d+)\)", line) for line in refused]  # "item N (FILE:LINE)": by position
    assert [w.group(2) if w else None for w in where] == [str(n) for n in range(2, 2 + len(BAD_MEM0))], refused
    assert MARK not in r.output and "notadict" not in r.output and "[[[[" not in r.output
    assert "metadata: must be a JSON object" in refused[0] and "nested deeper than" in refused[1]
    inbox = sorted(p.relative_to(vault.root / "inbox").as_posix() for p in (vault.root / "inbox").rglob("*.md"))
    assert inbox == ["mem0/alex/is-allergic-to-peanuts.md", "mem0/alex/prefers-vegetarian-restaurants.md",
                     "mem0/ops-bot/deploys-the-billing-service-every-tuesday.md"]


def test_a_dry_run_reports_the_same_and_writes_nothing(invoke, vault, tmp_path):
    path = mem0_export(tmp_path, *BAD_MEM0)
    head = vault.git.run("rev-parse", "HEAD")
    r = invoke("import", "mem0", path, "--dry-run")
    assert r.exit_code == 0 and len(refused_lines(r.stdout)) == len(BAD_MEM0) and "3 proposed" in r.stdout
    assert vault.git.run("rev-parse", "HEAD") == head and not (vault.root / "inbox").exists() or \
        not any((vault.root / "inbox").rglob("*.md"))


def test_a_file_that_is_not_a_list_of_memories_is_one_error_and_nothing_written(invoke, vault, tmp_path):
    head = vault.git.run("rev-parse", "HEAD")
    for text in ["{" * DEEP, '{"results": "notalist"}', '{"results": [{"memory": "a"}, ', "[1, 2] trailing"]:
        path = tmp_path / "bad.json"
        path.write_text(text)
        r = invoke("import", "mem0", str(path))
        assert r.exit_code == 1 and r.stderr.count("\n") == 1 and "bad.json" in r.stderr, (text[:20], r.output)
    assert vault.git.run("rev-parse", "HEAD") == head


def test_library_import_never_raises_on_odd_items(strict_vault, tmp_path):
    report = import_items(strict_vault, read("mem0", __import__("pathlib").Path(mem0_export(tmp_path, *BAD_MEM0))),
                          fmt="mem0", source="import:mem0")
    assert len(report.refused) == len(BAD_MEM0) and len(report.proposed) == 3


# ------------------------------------------------------------------------------------------ markdown readers
@pytest.mark.parametrize("fmt, folder, bad", [
    ("markdown", "markdown", "deep.md"),
    ("basic-memory", "basic-memory", "deep.md"),
    ("openclaw", "openclaw/workspace", "memory/2026-11-21.md"),
    ("claude-code", "claude-code/home/.claude", "projects/-home-dev-src-shopfront/memory/deep.md"),
])
@pytest.mark.parametrize("depth", [30, 990, DEEP])
def test_front_matter_nested_too_deep_is_refused_by_file(invoke, vault, tmp_path, fmt, folder, bad, depth):
    from agent_fixtures import copy_tree

    pristine = copy_tree(IMPORTS / folder, tmp_path / "pristine")
    before = invoke("import", fmt, str(pristine), "--dry-run", "--json")
    assert before.exit_code == 0, before.output
    tree = copy_tree(IMPORTS / folder, tmp_path / "tree")
    (tree / bad).parent.mkdir(parents=True, exist_ok=True)
    (tree / bad).write_text(f"---\nname: {deep(depth)}\ndescription: {MARK}\n---\n{MARK} is the answer.\n")
    r = invoke("import", fmt, str(tree), "--json")
    assert r.exit_code == 0, r.output
    report, expected = json.loads(r.stdout), json.loads(before.stdout)
    mine = [(e["origin"], e["reason"]) for e in report["refused"] if e["origin"].startswith(str(tree / bad))]
    if depth == DEEP:  # YAML that cannot be read at all is no front matter: the file is text, and too large
        assert len(mine) <= 1
    else:
        assert mine == [(str(tree / bad), f"front matter: nested deeper than {MAX_DEPTH} levels")]
    assert len(report["refused"]) == len(expected["refused"]) + len(mine)
    assert MARK not in r.output
    assert len(report["proposed"]) + len(report["added"]) == len(expected["proposed"]) + len(expected["added"])


# -------------------------------------------------------------------------------------------------- memvault
def test_a_memvault_export_with_a_deep_line_restores_the_rest(vault, tmp_path, models):
    from memvault import Vault

    vault.facts.set("db/primary", "The primary database listens on 10.8.0.4.", source="user:admin")
    vault.episodes.append("Deployed 2.4.1.", source="user:admin")
    export = tmp_path / "export.jsonl"
    with open(export, "w") as f:
        write_jsonl(snapshot(vault), f, "v")
    lines = export.read_text().splitlines()
    bad = ['{"type": "episode", "episode": ' + deep() + "}",
           '{"type": "episode", "episode": {"id": "01J0000000000000000000000Z", "text": "' + MARK + '", "meta": "x"}}',
           '{"type": "fact", "key": ["not", "a", "string"], "content": "x"}']
    export.write_text("\n".join([lines[0], *bad, *lines[1:]]) + "\n")
    fresh = Vault.init(tmp_path / "fresh", embedder_factory=models)
    report = restore_items(fresh, read("memvault", export), source="user:admin")
    assert [e["origin"].rsplit(":", 1)[1] for e in report.refused] == ["2", "3", "4"], report.refused
    assert not any(MARK in json.dumps(e) for e in report.refused)
    assert fresh.facts.get("db/primary").text.startswith("The primary database")
    assert [e.text for e in fresh.episodes.iter()] == ["Deployed 2.4.1."]


# ---------------------------------------------------------------------------------------------- rules.jsontext
def test_depth_is_measured_without_recursion_and_ignores_brackets_in_strings():
    assert depth_of(deep()) == DEEP
    assert depth_of('{"a": "[[[[[[", "b": [1, {"c": "]]]"}]}') == 3
    assert depth_of('"\\"[["') == 0 and depth_of("42") == 0
    with pytest.raises(InvalidValue, match="nested deeper than 20 levels"):
        loads(deep(), "x")
    with pytest.raises(InvalidValue, match="not standard JSON"):
        loads('{"a": NaN}', "x")
    assert loads(deep(MAX_DEPTH), "x") is not None


def test_array_items_parses_each_item_on_its_own():
    text = '{"other": {"results": 1}, "results": [1, ' + deep() + ', {"a": "],["}, [}, "s"]}'
    got = list(array_items(text, "f", keys=("results",)))
    assert [n for n, _ in got] == [1, 2, 3, 4, 5]
    assert got[0][1] == 1 and isinstance(got[1][1], InvalidValue) and got[2][1] == {"a": "],["}
    assert isinstance(got[3][1], InvalidValue) and got[4][1] == "s"
    with pytest.raises(InvalidValue):
        list(array_items('{"results": 3}', "f", keys=("results",)))
    with pytest.raises(InvalidValue):
        list(array_items('[1, 2', "f"))


def test_array_items_reads_a_shallow_file_whole_and_a_bad_item_in_it_alone():
    assert list(array_items('{"results": [{"a": 1}, "b"]}', "f", keys=("results",))) == [(1, {"a": 1}), (2, "b")]
    got = list(array_items('[{"a": NaN}, {"a": 2}, {"a": 3,}]', "f"))  # parsed whole fails: item by item says which
    assert [n for n, _ in got] == [1, 2, 3] and got[1][1] == {"a": 2}
    assert all(isinstance(v, InvalidValue) for _, v in (got[0], got[2]))
    item = "[" * MAX_DEPTH + "]" * MAX_DEPTH
    assert list(array_items(f"[{item}]", "f")) == [(1, loads(item, "x"))]  # the deepest allowed, either way
    assert isinstance(list(array_items(f'{{"results": [[{item}]]}}', "f", keys=("results",)))[0][1], InvalidValue)
