"""The shared index on a database that orders text as people's databases do (``en_US.UTF-8``, or ICU's ``en-US``)
gives what the SQLite index gives for the same files: SQLite compares text by its bytes, PostgreSQL by the
database's collation wherever a query does not say ``COLLATE "C"``. Ids that differ only in case or punctuation
(``t-B``, ``t_b``, ``T-b``, ``t1``) are in another order under a locale: ``t1 t-b t_b tb t-B tB T-b`` in
``en_US.UTF-8`` against the bytes' ``T-b t-B t-b t1 tB t_b tb``. The rest of the PostgreSQL tests run on a ``--no-locale`` (C) server, where the
two orders are one.
"""
from __future__ import annotations

import itertools
import json
import re
import subprocess

import pytest

from fake_embedder import FakeEmbedder
from memvault.index.listings import EpisodeQuery, FactQuery
from memvault.index.postgres.tables import vsql
from pgserver import pg_server, start_postgres  # noqa: F401
from test_postgres import apply, opened  # noqa: F401  (opened: a fixture)

psycopg = pytest.importorskip("psycopg")
pg = pytest.importorskip("memvault.index.postgres")

#: Turns of one source at one time (an import writes a conversation's lines with the same second), ids differing
#: only in case and punctuation, between a turn before and a turn after.
BURST_AT = "2026-11-21T08:00:00Z"
BURST = ["t-B", "t_b", "t-b", "T-b", "t1", "tB", "tb"]
TURNS = [("s0", "2026-11-21T07:59:00Z"), *((i, BURST_AT) for i in BURST), ("u0", "2026-11-21T08:01:00Z")]
#: Fact keys whose punctuation a locale passes over at first ('-' '.' '/' '_' are below the digits in bytes).
KEYS = ["net/a-b", "net/a.b", "net/a/b", "net/a_b", "net/ab", "net/a1", "net/a-c", "net/ac"]
TAGS = ["db-x", "db_x", "dbx", "db1", "db.x"]


# ------------------------------------------------------------------------------------------------ a collating server
_COUNTER = itertools.count()


def new_database(server, hint: str, clause: str) -> str:
    """A fresh database created with ``clause`` (its encoding and locale); its URL."""
    name = f"c{next(_COUNTER)}_" + re.sub(r"\W+", "_", hint.lower())[:40]
    with psycopg.connect(server.url_for("postgres"), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}" TEMPLATE template0 ENCODING \'UTF8\' {clause}')
    return server.url_for(name)


def _differs_from_bytes(url: str) -> bool:
    """Whether the database puts 'a' before 'B' (bytes put every capital first; every locale, libc or ICU, not)."""
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute("SELECT 'a' < 'B'").fetchone()[0]


@pytest.fixture(scope="module")
def collating(pg_server):  # noqa: F811
    """(server, the CREATE DATABASE clause) of a database collating as a locale does: ICU where the server has it,
    else a libc locale it knows, else a server of its own with en_US.UTF-8 compiled by localedef (this wheel's
    PostgreSQL has no ICU, and a slim image has no locale but C). Skipped only when none of the three is there."""
    tried: list[str] = []
    for clause in ("LOCALE_PROVIDER icu ICU_LOCALE 'en-US' LOCALE 'C'",
                   *(f"LOCALE '{name}'" for (name,) in _libc_locales(pg_server))):
        try:
            url = new_database(pg_server, "probe", clause)
        except psycopg.Error as exc:
            tried.append(f"{clause}: {str(exc).strip()}")
            continue
        if _differs_from_bytes(url):
            yield pg_server, clause
            return
        tried.append(f"{clause}: orders as bytes do")
    try:
        server = start_postgres(locales=("en_US.UTF-8",))
    except (RuntimeError, subprocess.SubprocessError, OSError) as exc:
        pytest.skip("no collation but C on this machine: " + "; ".join([*tried, str(exc)]))
    try:
        yield server, "LOCALE 'en_US.UTF-8'"
    finally:
        server.stop()


def _libc_locales(server) -> list[tuple[str]]:
    with psycopg.connect(server.url, autocommit=True) as conn:
        return conn.execute("SELECT collcollate FROM pg_collation WHERE collprovider = 'c' AND collencoding IN "
                            "(-1, 6) AND collcollate NOT IN ('C', 'POSIX') AND collcollate NOT ILIKE 'C.%' "
                            "AND collcollate ILIKE '%utf%8%' ORDER BY collcollate <> 'en_US.utf8' LIMIT 3").fetchall()


@pytest.fixture
def collated(collating, request, opened):  # noqa: F811
    """A shared index in a database of its own that collates as a locale does."""
    server, clause = collating
    url = new_database(server, request.node.name, clause)
    assert _differs_from_bytes(url)
    index = opened(pg.SharedIndex(url, "team"))
    index.ensure()
    return index


@pytest.fixture
def both(tmp_path, collated):
    """(SQLite index, shared index) of one vault: the turns and facts above, read from files."""
    from memvault.index import Index
    from memvault.index.documents import Sources, read_docs
    from memvault.index.update import scan
    from memvault.stores.episodes import EpisodeLog
    from memvault.stores.facts import FactStore
    from memvault.stores.procedures import ProcedureStore

    root = tmp_path / "vault"
    (root / "episodes").mkdir(parents=True)
    (root / "procedures").mkdir()
    with (root / "episodes" / "2026-11.jsonl").open("w", encoding="utf-8") as fh:
        for item_id, at in TURNS:
            fh.write(json.dumps({"id": item_id, "created_at": at, "source": "import:chat", "kind": "raw",
                                 "text": f"turn {item_id} of the imported chat"}) + "\n")
    for n, key in enumerate(KEYS):
        path = root / "facts" / f"{key}.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"---\nsource: user:ops\ntags: [{TAGS[n % len(TAGS)]}]\n---\nFact {key} holds.\n")
    sources = Sources(root, FactStore(root), EpisodeLog(root, tmp_path / "episodes.lock"),
                      ProcedureStore(root, lambda: None))
    local = Index(tmp_path / "state", sources)
    fake = FakeEmbedder(32)
    local.sync(splitter=fake)
    docs, problems = [], []
    for rel, (kind, *_stat) in sorted(scan(sources).items()):
        docs += read_docs(sources, rel, kind, problems)
    assert not problems and not apply(collated, docs, splitter=fake).problems
    yield local, collated
    local.close()


def neighbours(index, chunk_ids) -> dict[str, list[str]]:
    """turn id -> the ids of the turns recall reads beside it (before, then after)."""
    docs = index.chunk_docs(chunk_ids)
    found = index.episode_neighbours(docs)
    ids = {cid: d["id"] for cid, d in docs.items()}
    ids.update({cid: d["id"] for cid, d in index.chunk_docs([c for cs in found.values() for c in cs]).items()})
    return {ids[cid]: [ids[c] for c in cs] for cid, cs in found.items()}


# ------------------------------------------------------------------------------------------------ tests
def test_the_turns_beside_a_turn_of_the_same_time_are_the_sqlite_indexs(both):
    """Recall reads a turn with the turns just before and after it from the same source; in a burst of one time,
    which turn is "before" is decided by the id, in byte order on SQLite."""
    local, shared = both
    v = shared._read_state(shared._connection()).vault_id
    mine = neighbours(shared, [cid for (cid,) in shared._connection().execute(vsql(
        v, "SELECT chunk_id FROM {chunks} c JOIN {docs} d USING (doc_id) WHERE d.kind = 'episode' AND c.chunk = 0"))])
    theirs = neighbours(local, [r for (r,) in local.connection().execute(
        "SELECT c.rowid FROM chunks c JOIN docs d ON d.doc = c.doc WHERE d.kind = 'episode' AND c.chunk = 0")])
    in_bytes = sorted(BURST, key=str.encode)
    assert theirs["s0"] == [in_bytes[0]] and theirs[in_bytes[0]] == ["s0", in_bytes[1]]
    assert mine == theirs


def test_listings_and_their_pages_are_in_the_sqlite_indexs_order(both):
    """Newest episodes (a page of two ending inside the burst, then the next from its last id), a time window, fact
    keys under a prefix, pages of facts by offset, tags of one count: the SQLite index's order, bytes."""
    local, shared = both
    for index in (local, shared):
        seen, before, before_id = [], None, None
        while True:
            rows = index.list_episodes(EpisodeQuery(source="import:chat", before=before, before_id=before_id), 2)
            seen += [r["id"] for r in rows]
            if len(rows) < 2:
                break
            before, before_id = rows[-1]["created"], rows[-1]["id"]
        assert seen == ["u0", *sorted(BURST, key=str.encode, reverse=True), "s0"], index
    assert [e["id"] for e in shared.episodes_between(None, None, 50)] == \
        [e["id"] for e in local.episodes_between(None, None, 50)]
    assert shared.fact_keys("net") == local.fact_keys("net") == sorted(KEYS, key=str.encode)
    assert shared.fact_keys("net/a") == local.fact_keys("net/a")
    for offset in range(0, len(KEYS), 3):
        mine, n = shared.list_facts(FactQuery(prefix="net"), 3, offset)
        theirs, m = local.list_facts(FactQuery(prefix="net"), 3, offset)
        assert [f["key"] for f in mine] == [f["key"] for f in theirs] and n == m == len(KEYS)
    assert shared.fact_tags() == local.fact_tags()


def test_0005_puts_an_existing_vaults_ids_in_byte_order_in_place(both):
    """A vault indexed before 0005 (ids in the database's collation) answers in byte order all the same (the
    queries say COLLATE "C"); 0005 changes the column's collation without rewriting the table, and its indexes,
    the unique key among them, are rebuilt in that order."""
    local, shared = both
    conn = shared._connection()
    v = shared._read_state(conn).vault_id
    docs = f"memvault.v{v}_docs"

    def collation() -> str:
        return conn.execute("SELECT c.collname FROM pg_attribute a JOIN pg_collation c ON c.oid = a.attcollation "
                            "WHERE a.attrelid = %s::regclass AND a.attname = 'item_id'", (docs,)).fetchone()[0]

    def turns() -> dict[str, list[str]]:
        return neighbours(shared, [cid for (cid,) in conn.execute(vsql(
            v, "SELECT chunk_id FROM {chunks} c JOIN {docs} d USING (doc_id) WHERE d.kind = 'episode' AND c.chunk = 0"))])

    assert collation() == "C"
    expected = turns()
    # as the release before left it
    conn.execute(f'ALTER TABLE {docs} ALTER COLUMN item_id TYPE text COLLATE "default"')
    conn.execute("DELETE FROM memvault.vault_migrations WHERE vault_id = %s AND name = '0005_ids_in_byte_order'", (v,))
    assert collation() == "default"
    assert turns() == expected and shared.fact_keys("net") == local.fact_keys("net")
    table_file = conn.execute("SELECT pg_relation_filenode(%s::regclass)", (docs,)).fetchone()[0]
    assert pg.migrations.migrate_vault(conn, v) == ["0005_ids_in_byte_order"]
    assert collation() == "C"
    assert conn.execute("SELECT pg_relation_filenode(%s::regclass)", (docs,)).fetchone()[0] == table_file
    keys = {r[0]: r[1] for r in conn.execute(
        "SELECT i.relname, pg_get_indexdef(i.oid) FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid "
        "WHERE x.indrelid = %s::regclass", (docs,))}
    assert "UNIQUE" in keys[f"v{v}_docs_kind_item_id_key"] and f"v{v}_docs_turns" in keys
    assert turns() == expected and shared.fact_keys("net") == local.fact_keys("net")


def test_the_indexes_serve_the_id_order_on_a_collating_database(collated):
    """Read with EXPLAIN ANALYZE on a few thousand rows: a turn's neighbours come from the (source, created,
    item_id) index, one row each way, even for a source whose turns are far apart among another's; a page of facts
    and the keys under a prefix are a range of UNIQUE (kind, item_id), in its order (no sort). Before 0005 a
    COLLATE "C" the indexes lacked sent the first to the time index (every other source's turns read between) and
    made the others read every fact and sort it."""
    from datetime import datetime, timedelta, timezone

    from memvault.index.postgres.listings import KEY_RANGE, facts_sql
    from memvault.index.postgres.reads import NEIGHBOURS_SQL
    from test_postgres import actual_rows, episode, fact, sql

    t0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
    at = lambda s: (t0 + timedelta(seconds=s)).strftime("%Y-%m-%dT%H:%M:%SZ")  # noqa: E731
    docs = [episode(f"b{i:05d}-{'aB_-'[i % 4]}", f"busy {i}", at(2 * i), source="import:busy",
                    ekind="raw") for i in range(4000)]
    docs += [episode(f"r{i:02d}", f"rare {i}", at(400 * i), source="import:rare", ekind="raw") for i in range(20)]
    docs += [fact(f"k{i % 20}/f-{i:04d}{['a', 'b', '_x', '-y'][i % 4]}", f"fact {i}") for i in range(2000)]
    apply(collated, docs)
    sql(collated.url, "VACUUM ANALYZE")
    conn = collated._connection()
    v = collated._read_state(conn).vault_id
    rare = conn.execute(vsql(v, "SELECT c.chunk_id, d.source, d.created, d.item_id FROM {docs} d JOIN {chunks} c "
                                "ON c.doc_id = d.doc_id AND c.chunk = 0 WHERE d.source = 'import:rare'")).fetchall()

    def plan(query, args) -> str:
        return "\n".join(r[0] for r in conn.execute(vsql(v, "EXPLAIN ANALYZE " + query), args))

    turns = plan(NEIGHBOURS_SQL, [list(col) for col in zip(*rare)])
    assert f"Index Scan Backward using v{v}_docs_turns" in turns and f"Index Scan using v{v}_docs_turns" in turns, \
        turns
    assert "Sort" not in turns and actual_rows(turns, "docs_turns") <= 1, turns
    for query in (facts_sql(v, FactQuery(prefix="k7")), facts_sql(v, FactQuery())):
        page = plan(query[0] + ' ORDER BY item_id COLLATE "C" LIMIT 50', query[1])
        assert f"Index Scan using v{v}_docs_kind_item_id_key" in page and "item_id >=" in page, page
        assert "Sort" not in page and actual_rows(page, "docs_kind_item_id_key") == 50, page
    keys = plan("SELECT item_id FROM {docs} WHERE kind = 'fact' AND " + KEY_RANGE + ' ORDER BY item_id COLLATE "C"',
                ["k7/", "k70"])
    assert "docs_kind_item_id_key" in keys and "Sort" not in keys and actual_rows(keys, "Index") == 100, keys
