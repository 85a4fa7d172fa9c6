"""What a user six months into a vault ran into: hand edits, old episodes, a changed model, killed work."""
from __future__ import annotations

from pathlib import Path

from memvault.rules import frontmatter_edit as fm
from conftest import use_editor


def test_a_key_given_twice_by_hand_takes_the_new_value_when_it_is_changed():
    # A person's editor left "importance" twice; YAML reads the last. `fact set --importance 0.1` rewrote only the
    # first line and said "set", while the file still read 0.9: the change asked for was silently not made.
    doc = fm.parse("---\ncategory: redis\nimportance: 0.2\nowner: maria\nimportance: 0.9\n---\nEviction is allkeys-lru.\n")
    assert doc.meta["importance"] == 0.9
    changed = fm.update(doc, {"importance": 0.1}, [], doc.body)
    again = fm.parse(changed.render())
    assert again.meta["importance"] == 0.1
    assert changed.fm_lines == ["category: redis", "importance: 0.1", "owner: maria"]


def test_fact_edit_that_cannot_be_written_keeps_the_edit_and_names_where(invoke, vault, tmp_path, monkeypatch):
    # While the person's editor was open, the file was broken on disk (another hand, a pull): the write was
    # refused (that uncommitted broken edit cannot be committed first) and the temp file holding what the person
    # had typed was deleted.
    invoke("fact", "set", "redis/cache", "maxmemory 4gb on cache1")
    path = vault.root / "facts/redis/cache.md"
    use_editor(monkeypatch, tmp_path / "ed.py",
               f"f = pathlib.Path({str(path)!r})\nf.write_text(f.read_text().replace('source:', 'tags: [x\\nsource:'))\n"
               "p.write_text(p.read_text().replace('4gb', '6gb'))\n")
    r = invoke("fact", "edit", "redis/cache")
    assert r.exit_code == 1 and "cannot be committed" in r.stderr
    assert "tags: [x" in path.read_text()
    kept = [line.split(" kept in ", 1)[1].strip() for line in r.stderr.splitlines() if " kept in " in line]
    assert kept, r.stderr
    assert "6gb" in Path(kept[0]).read_text()


def test_a_model_directory_in_the_shared_config_is_told_the_command_that_really_exists():
    # The warning sent the person to `memvault model set --model DIR`, a command memvault does not have.
    from memvault.interfaces.cli import cli
    from memvault.rules.config import host_only

    found = host_only({"embedding": {"model": "/srv/models/mine"}, "recall": {"reranker": "./models/ce"}})
    assert len(found) == 2
    for _section, _key, why in found:
        for quoted in why.split("`")[1::2]:
            if quoted.startswith("memvault "):
                assert quoted.split()[1] in cli.commands, why
    assert "memvault reindex --model" in found[0][2]


def test_a_model_set_for_this_host_is_not_said_to_come_from_memvault_toml(tmp_path):
    # After `reindex --model DIR` was killed, recall warned "memvault.toml asks for model '/models/mine'" while
    # memvault.toml still named all-MiniLM-L6-v2: the person looked in the wrong file.
    from memvault import Vault
    from memvault.rules import config
    from memvault.rules.fsutil import atomic_write

    v = Vault.init(tmp_path / "vault")
    toml = v.root / "memvault.toml"
    assert config.load(toml).model_from == "memvault.toml"
    local = config.local_path(toml)
    atomic_write(local, config.set_local_model(toml, str(tmp_path / "models/mine")).encode())
    loaded = config.load(toml)
    assert loaded.model == str(tmp_path / "models/mine")
    assert loaded.model_from == "this host's local.toml"


def test_a_month_file_saved_with_a_byte_order_mark_keeps_its_first_line():
    # An editor on Windows saved episodes/2026-12.jsonl with a BOM (and CRLF): line 1 was "not valid JSON at
    # column 1" from then on, so it was out of recall, and prune kept it for ever as unreadable.
    from memvault.stores.episodes import parse_line

    line = '\ufeff{"id": "01M95H2GFK2TQ60XEBEWT9HAYH", "created_at": "2026-12-01T10:00:00Z", "source": "user:maria", ' \
           '"kind": "raw", "text": "disk at 91% on db1"}\r'
    episode = parse_line(line, Path("episodes/2026-12.jsonl"), 1)
    assert episode.text == "disk at 91% on db1" and episode.source == "user:maria"


def test_memvault_toml_saved_with_a_byte_order_mark_is_told_as_such(tmp_path):
    # Saved as "UTF-8 with BOM": every command failed with "invalid TOML: Invalid statement (at line 1, column 1)"
    # on a line that looks right in any editor.
    import pytest

    from memvault.rules import config
    from memvault.rules.errors import ConfigError

    path = tmp_path / "memvault.toml"
    text = '[retention]\nraw = "60d"\n'
    path.write_bytes(b"\xef\xbb\xbf" + text.encode())
    for read in (lambda: config.load(path), lambda: config.from_text("\ufeff" + text, path)):
        with pytest.raises(ConfigError) as caught:
            read()
        assert "byte-order mark" in str(caught.value) and str(path) in str(caught.value)


def test_a_restore_killed_before_its_commit_is_committed_by_the_next_one(vault, tmp_path):
    # `memvault import memvault export.jsonl` killed after writing files but before its one commit: the next run
    # found them "already here", skipped them, and they stayed out of git (untracked) until someone ran sync.
    from memvault import Vault
    from memvault.core.transfer import restore_items, snapshot
    from memvault.interfaces.transfer import read
    from memvault.interfaces.transfer.memvault import write_jsonl

    vault.facts.set("db/primary", "db1 listens on 5432", source="user:maria")
    vault.facts.set("db/replica", "db2 follows db1", source="user:maria")
    out = tmp_path / "export.jsonl"
    with open(out, "w") as f:
        write_jsonl(snapshot(vault), f, "old")
    fresh = Vault.init(tmp_path / "fresh")
    written = fresh.root / "facts/db/primary.md"  # what the killed run had written, uncommitted
    written.parent.mkdir(parents=True)
    written.write_bytes((vault.root / "facts/db/primary.md").read_bytes())
    restore_items(fresh, read("memvault", out), source="user:maria")
    assert fresh.git.run("status", "--porcelain", "--", "facts").strip() == ""
    tracked = fresh.git.run("ls-files", "facts").split()
    assert "facts/db/primary.md" in tracked and "facts/db/replica.md" in tracked


def test_a_time_that_may_be_an_age_says_an_age_would_do():
    # `episode list --since yesterday` answered "not an RFC 3339 time or date", though --since takes 30d, 12h, 2w.
    import pytest

    from memvault.rules.errors import InvalidValue
    from memvault.rules.timeutil import parse_time_or_age

    with pytest.raises(InvalidValue) as caught:
        parse_time_or_age("yesterday", "--since")
    assert "30d" in str(caught.value) and "--since" in str(caught.value)


def six_months_of_disk_lines(vault, models, source: str, *, lines: int = 720, narrow: bool = True):
    """Six months of "disk at N%" summaries from ``source``, every 6 hours up to now; ``narrow``: searches of 20
    rows, so that a few days of them are not among the searches' first rows."""
    from datetime import timedelta

    from memvault import Vault
    from memvault.rules.timeutil import format_time, now

    if narrow:
        toml = vault.root / "memvault.toml"
        toml.write_text(toml.read_text().replace("\ncandidates = 100\n", "\ncandidates = 20\n")
                        .replace("\nvector_candidates = 50\n", "\nvector_candidates = 20\n"))
    v = Vault.open(vault.root, embedder_factory=models)
    start = now() - timedelta(days=180)
    v.episodes.append_many([{"text": f"disk at {50 + i % 40}% on web{i % 7}", "kind": "summary",
                             "at": format_time(start + timedelta(hours=180 * 24 / lines * i))}
                            for i in range(lines)], source=source)
    return v


def test_recall_since_a_few_days_finds_them_among_months_of_like_episodes(vault, models):
    # Six months of "disk at N%" lines from monitoring: `recall disk --since 2d` said "no memory matches the query
    # in that time" with dozens there, because the searches took the vault's best rows first and the window
    # filtered them afterwards; those best rows were all older.
    from datetime import timedelta

    from memvault.rules.timeutil import now

    v = six_months_of_disk_lines(vault, models, "agent:monitor")
    recent = [e for e in v.episodes.iter() if e.time >= now() - timedelta(days=2)]
    assert len(recent) >= 5
    hits = v.recall("disk", k=5, kinds=["episode"], since="2d")
    assert len(hits) == 5, hits.nothing_found


def test_a_time_in_the_question_finds_that_days_episodes_among_months_of_like_ones(vault, models):
    # "what happened with redis yesterday" answered with facts and old episodes: yesterday's were not among the
    # searches' best rows of six months, so the time named had none of its own to rank first.
    from datetime import timedelta

    from memvault.rules.timeutil import now, parse_time

    v = six_months_of_disk_lines(vault, models, "user:maria")
    yesterday = (now() - timedelta(days=1)).date()
    hits = v.recall("disk yesterday", k=3, kinds=["episode"])
    assert hits and all(parse_time(h.created, "created").date() == yesterday for h in hits), \
        [h.created for h in hits]


def test_fact_edit_mends_a_front_matter_broken_by_hand(invoke, vault, tmp_path, monkeypatch):
    # The natural way to mend a fact one broke in an editor is `fact edit`: it opened the broken file, and the mend
    # was refused because the broken edit "cannot be committed first". The editor started from those very bytes,
    # so the mend carries them forward: nothing is thrown away.
    invoke("fact", "set", "redis/cache", "maxmemory 4gb on cache1")
    path = vault.root / "facts/redis/cache.md"
    path.write_text(path.read_text().replace("source:", "tags: [redis, cache\nsource:"))
    use_editor(monkeypatch, tmp_path / "ed.py", "p.write_text(p.read_text().replace('[redis, cache', '[redis, cache]'))\n")
    r = invoke("fact", "edit", "redis/cache")
    assert r.exit_code == 0, r.stderr
    assert vault.facts.get("redis/cache").tags == ["redis", "cache"]
    assert vault.git.run("status", "--porcelain", "--", "facts").strip() == ""


def test_a_model_named_by_hand_that_cannot_load_keeps_the_index_of_the_old_one(vault, models):
    # memvault.toml edited by hand to a model this host does not have: `reindex` swapped in a keyword-only index for
    # six months of vectors (6 minutes of embedding at 50k episodes), and going back meant all of it again.
    from memvault import Vault

    v = Vault.open(vault.root, embedder_factory=models)
    v.facts.set("db/primary", "db1 listens on 5432", source="user:maria")
    v.reindex()
    before = v.index.identity()
    assert before is not None
    toml = vault.root / "memvault.toml"
    toml.write_text(toml.read_text().replace(f'model = "{before.name}"', 'model = "not-here/model"'))
    models.unavailable.add("not-here/model")
    v = Vault.open(vault.root, embedder_factory=models)
    report = v.reindex()
    assert v.index.identity() is not None and v.index.identity().name == before.name
    assert any("kept" in w and "not-here/model" in w for w in report.warnings), report.warnings


def test_a_time_that_holds_no_episode_is_not_searched_wider(vault, models, monkeypatch):
    # A question naming a time the vault has no memory of (LoCoMo's "in June", of 2023's conversations, read as this
    # year's June) found nothing in its window, so the wider searches ran up to their end for every such question:
    # a few times slower, and a different ranking of the rest. They run only while the window holds more.
    from memvault.core import windows

    v = six_months_of_disk_lines(vault, models, "user:maria", lines=200, narrow=False)
    calls = []
    real = windows.gather
    monkeypatch.setattr(windows, "gather", lambda *a, **kw: calls.append(a[2]) or real(*a, **kw))
    v.recall("disk in March 2019", k=3, kinds=["episode"])
    v.recall("disk", k=3, kinds=["episode"], since="2019-03-01", until="2019-04-01")
    assert calls == []  # the first search is recall's own; no wider one
