"""The shared index on a real PostgreSQL 18 + pgvector (tests/pgserver.py): migrations, the two phases, every
search, the embedding cache, concurrent hosts, a model switch under load, query plans, and the errors people see.

Each test gets a database of its own (``url``); vault names are per test too. The fake embedder counts what it
embeds, so a test can prove that a text was *not* embedded again.
"""
from __future__ import annotations

import itertools
import random
import re
import subprocess
import sys
import threading
import time
from datetime import datetime, timedelta, timezone

import numpy as np
import pytest

from fake_embedder import FakeEmbedder
from memvault.rules.errors import InvalidValue, SearchIndexError
from memvault.index.documents import KINDS, Doc
from memvault.index.listings import EpisodeQuery
from memvault.index.search import DOC_FIELDS
from memvault.index.update import mean_vector, vector_blob, with_context
from pgserver import pg_server  # noqa: F401

psycopg = pytest.importorskip("psycopg")
pg = pytest.importorskip("memvault.index.postgres")

_COUNTER = itertools.count()


# ------------------------------------------------------------------------------------------------ fixtures
def new_database(server, hint: str) -> str:
    """A fresh database; its URL (pgvector is installed by ensure(): the test server's role is a superuser)."""
    name = "t" + str(next(_COUNTER)) + "_" + re.sub(r"\W+", "_", hint.lower())[:40]
    with psycopg.connect(server.url_for("postgres"), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return server.url_for(name)


def dbname(url: str) -> str:
    return psycopg.conninfo.conninfo_to_dict(url)["dbname"]


@pytest.fixture
def url(pg_server, request) -> str:  # noqa: F811
    """A database of this test's own."""
    return new_database(pg_server, request.node.name)


@pytest.fixture
def opened():
    """Closes every SharedIndex / EmbeddingCache a test opens (no server connection outlives its test)."""
    objects: list = []

    def track(obj):
        objects.append(obj)
        return obj

    yield track
    for obj in objects:
        obj.close()


@pytest.fixture
def ix(url, opened):
    index = opened(pg.SharedIndex(url, "team"))
    index.ensure()
    return index


def sql(url: str, query: str, params: tuple = ()) -> list[tuple]:
    with psycopg.connect(url, autocommit=True) as conn:
        cur = conn.execute(query, params)
        return cur.fetchall() if cur.description is not None else []


# ------------------------------------------------------------------------------------------------ docs
def fact(key: str, body: str, **fields) -> Doc:
    return Doc("fact", key, f"facts/{key}.md", key.replace("/", " "), body, fields.pop("importance", 0.5),
               0.9, "user:ops", "2026-11-20T10:00:00Z", fields.pop("updated", "2026-11-20T10:00:00Z"), **fields)


def episode(item: str, body: str, created: str, *, path: str = "episodes/2026-11.jsonl", source: str = "user:ops",
            **fields) -> Doc:
    return Doc("episode", item, path, "", body, 0.5, 0.8, source, created, created, **fields)


def procedure(name: str, body: str) -> Doc:
    return Doc("procedure", name, f"procedures/{name}.sh", f"{name} — a runbook", body, 0.5, 1.0, None,
               "2026-11-20T10:00:00Z", "2026-11-20T10:00:00Z")


def apply(index, docs, *, blob: str = "blob-1", gone=(), head: str | None = None, splitter=None):
    paths: dict[str, str | None] = {d.path: blob for d in docs}
    paths.update({p: None for p in gone})
    return index.apply(docs, paths, head=head, splitter=splitter)


def corpus() -> list[Doc]:
    return [
        fact("db/primary", "The primary database host listens on port 5432 at 10.8.0.4.", valid_until="2027-03-01"),
        fact("web/lb", "The load balancer host forwards port 443 to the web servers."),
        fact("dns/resolvers", "Internal resolvers are 10.8.0.2 and 10.8.0.3 running unbound."),
        episode("01JEP0000000000000000000A1", "Restarted the server on host web1 after the deploy.",
                "2026-11-21T09:00:00Z"),
        episode("01JEP0000000000000000000A2", "Ran restart-pgbouncer on db1.", "2026-11-22T09:00:00Z",
                ekind="procedure_run", ref="restart-pgbouncer", meta='{"commit": "abc123", "exit_code": 0}'),
        procedure("restart-pgbouncer", "#!/bin/sh\n# Restart pgbouncer and check its pools.\n"
                  + "\n".join(f"step {i}: check pool {i} on the bouncer" for i in range(20))
                  + "\nsystemctl restart pgbouncer\n"),
    ]


def consistent(url: str, index) -> dict:
    """Every derived number matches the rows it summarises; returns counts for the caller's own checks."""
    state = index._read_state(index._connection())
    v = state.vault_id
    n, words = sql(url, "SELECT nchunks, nwords FROM memvault.vaults WHERE vault_id = %s", (v,))[0]
    chunks, windows, real_words = sql(url, "SELECT count(*), count(*) FILTER (WHERE chunk >= 0), "
                                           f"coalesce(sum(nwords), 0) FROM memvault.v{v}_chunks")[0]
    assert (n, words) == (windows, real_words)  # BM25's totals: a runbook's steps (below 0) have no words
    stored = dict(sql(url, f"SELECT lexeme, df FROM memvault.v{v}_lexemes WHERE df <> 0"))
    real = dict(sql(url, f"SELECT u.lexeme, count(*) FROM memvault.v{v}_chunks c, unnest(c.tsv) u GROUP BY 1"))
    assert stored == real, "document frequencies drifted from the chunks"
    out = {"chunks": chunks, "docs": sql(url, f"SELECT count(*) FROM memvault.v{v}_docs")[0][0]}
    if state.live_model is not None:
        vec = f"memvault.v{v}_vec_{state.live_model}"
        orphans = sql(url, f"SELECT count(*) FROM {vec} x WHERE NOT EXISTS (SELECT 1 FROM memvault.v{v}_chunks c "
                           "WHERE c.chunk_id = x.chunk_id)")[0][0]
        assert orphans == 0, "vectors of chunks that are gone"
        both = sql(url, f"SELECT count(*) FROM memvault.v{v}_pending p JOIN {vec} x USING (chunk_id)")[0][0]
        assert both == 0, "a chunk both pending and with a vector"
        out["vectors"] = sql(url, f"SELECT count(*) FROM {vec}")[0][0]
        out["pending"] = sql(url, f"SELECT count(*) FROM memvault.v{v}_pending")[0][0]
        assert out["vectors"] + out["pending"] == chunks, "a chunk with neither a vector nor a pending row"
    return out


def ids_of(index, hits) -> list[str]:
    docs = index.chunk_docs([h if isinstance(h, int) else h[0] for h in hits])
    return [docs[h if isinstance(h, int) else h[0]]["id"] for h in hits]


# ------------------------------------------------------------------------------------------------ errors, imports
def test_importing_the_module_does_not_import_psycopg():
    out = subprocess.run([sys.executable, "-c", "import sys, memvault.index.postgres; print('psycopg' in sys.modules)"],
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_missing_psycopg_is_one_clear_line(monkeypatch, url):
    monkeypatch.setitem(sys.modules, "psycopg", None)  # what `import psycopg` sees when it is not installed
    expected = "PostgreSQL support needs psycopg: pip install 'psycopg[binary]'"
    with pytest.raises(SearchIndexError) as info:
        pg.SharedIndex(url, "team").exists()
    assert str(info.value) == expected
    with pytest.raises(SearchIndexError) as info:
        pg.EmbeddingCache(url).get(FakeEmbedder().identity, ["x"])
    assert str(info.value) == expected


@pytest.mark.parametrize("target", ["postgresql://memvault:hunter2@127.0.0.1:1/memvault",
                                    "postgresql://memvault@/memvault?host=/nonexistent-dir&port=5432"])
def test_unreachable_server_is_one_line_without_the_password(target):
    with pytest.raises(SearchIndexError) as info:
        pg.SharedIndex(target, "team").ensure()
    message = str(info.value)
    assert message.startswith("cannot connect to PostgreSQL at postgresql://memvault@")
    assert "\n" not in message and "hunter2" not in message
    assert info.value.__suppress_context__  # no psycopg traceback chained for the user to read
    with pytest.raises(SearchIndexError, match="^cannot connect to PostgreSQL"):
        pg.EmbeddingCache(target).put(FakeEmbedder().identity, [("x", bytes(128))])


def test_a_failing_query_is_a_search_index_error_not_a_psycopg_traceback(ix, url):
    apply(ix, corpus())
    v = ix._read_state(ix._connection()).vault_id
    sql(url, f"ALTER TABLE memvault.v{v}_chunks RENAME TO v{v}_gone")
    with pytest.raises(SearchIndexError, match="keyword search: relation .* does not exist") as info:
        ix.search_keywords("primary database", KINDS, 5)
    assert "\n" not in str(info.value) and info.value.__suppress_context__


def test_a_role_that_may_not_install_pgvector_is_told_who_can(pg_server, url):  # noqa: F811
    sql(url, "CREATE ROLE app LOGIN")
    sql(url, f'GRANT ALL ON DATABASE "{dbname(url)}" TO app')
    app_url = url.replace("postgresql://postgres@", "postgresql://app@")
    with pytest.raises(SearchIndexError, match="a superuser must run CREATE EXTENSION vector"):
        pg.SharedIndex(app_url, "team").ensure()


# ------------------------------------------------------------------------------------------------ migrations
def test_migrations_are_recorded_once_and_idempotent(url, opened):
    index = opened(pg.SharedIndex(url, "team"))
    assert not index.exists()
    index.ensure()
    index.ensure()
    assert index.exists()
    assert [r[0] for r in sql(url, "SELECT name FROM memvault.migrations ORDER BY name")] == \
        [name for name, _ in pg.GLOBAL_MIGRATIONS]
    assert [r[0] for r in sql(url, "SELECT name FROM memvault.vault_migrations")] == \
        [name for name, _ in pg.VAULT_MIGRATIONS]


@pytest.mark.parametrize("table", ["vault_migrations", "migrations"])
def test_a_shared_index_a_newer_memvault_migrated_is_refused_by_an_older_one(ix, url, table):
    """A team shares one PostgreSQL index; a teammate on a newer memvault migrates it: this older one stops, with
    one line, instead of writing rows in the form the migration replaced — on its next open (ensure) and, being
    a long-running process, on its next read of the vault row (every STATE_TTL)."""
    from memvault.rules.errors import SchemaTooNew

    v = ix._read_state(ix._connection()).vault_id
    if table == "vault_migrations":
        sql(url, "INSERT INTO memvault.vault_migrations(vault_id, name) VALUES (%s, '9999_newer')", (v,))
    else:
        sql(url, "INSERT INTO memvault.migrations(name) VALUES ('9999_newer')")
    with pytest.raises(SchemaTooNew) as info:
        ix.head(fresh=True)
    assert "9999_newer" in str(info.value) and "\n" not in str(info.value)
    assert "password" not in str(info.value)
    with pytest.raises(SchemaTooNew):
        ix.ensure()


def test_concurrent_first_starts_neither_race_nor_duplicate(url, opened):
    """Eight hosts start at once on an empty database, four vaults: one schema, one row per vault."""
    barrier = threading.Barrier(8)
    errors: list[BaseException] = []

    def start(i: int) -> None:
        index = opened(pg.SharedIndex(url, f"vault-{i % 4}"))
        barrier.wait()
        try:
            index.ensure()
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=start, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert sql(url, "SELECT count(*) FROM memvault.migrations")[0][0] == len(pg.GLOBAL_MIGRATIONS)
    assert sorted(r[0] for r in sql(url, "SELECT name FROM memvault.vaults")) == [f"vault-{i}" for i in range(4)]
    assert sql(url, "SELECT count(*) FROM memvault.vault_migrations")[0][0] == 4 * len(pg.VAULT_MIGRATIONS)


def before_0005(ix, url) -> int:
    """Put the vault back as the release before 0005 left it (ids in the database's collation); its id."""
    v = ix._read_state(ix._connection()).vault_id
    sql(url, f'ALTER TABLE memvault.v{v}_docs ALTER COLUMN item_id TYPE text COLLATE "default"')
    sql(url, "DELETE FROM memvault.vault_migrations WHERE vault_id = %s AND name = '0005_ids_in_byte_order'", (v,))
    return v


def test_two_hosts_upgrading_at_once_apply_0005_once(ix, url, opened):
    """Two hosts of the new release register the vault at once: one applies 0005, the other waits for the vault's
    write lock, then finds it recorded; each goes on."""
    v = before_0005(ix, url)
    conns = [opened(pg.SharedIndex(url, "team"))._connection() for _ in range(2)]
    barrier = threading.Barrier(2)
    applied: list[list[str]] = []

    def upgrade(conn) -> None:
        barrier.wait()
        applied.append(pg.migrations.migrate_vault(conn, v))

    threads = [threading.Thread(target=upgrade, args=(c,)) for c in conns]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(applied) == [[], ["0005_ids_in_byte_order"]]
    assert sql(url, "SELECT count(*) FROM memvault.vault_migrations WHERE vault_id = %s AND name = "
                    "'0005_ids_in_byte_order'", (v,)) == [(1,)]


def test_a_migration_does_not_wait_for_ever_behind_an_open_transaction(ix, url, monkeypatch):
    """ALTER TABLE waits for every session that read the table in a transaction still open (an older memvault in
    the middle of one, a backup, a psql session), and every recall of the vault queues behind it meanwhile: the
    migration gives up after MIGRATION_LOCK_TIMEOUT, in one line, nothing migrated, and is tried again at the next
    ensure()."""
    v = before_0005(ix, url)
    monkeypatch.setattr(pg.migrations, "MIGRATION_LOCK_TIMEOUT", "300ms")
    with psycopg.connect(url) as reader:  # a transaction left open after reading the docs
        reader.execute(f"SELECT count(*) FROM memvault.v{v}_docs").fetchone()
        started = time.monotonic()
        with pytest.raises(SearchIndexError) as info:
            ix.ensure()
        assert time.monotonic() - started < 5
        assert "0005_ids_in_byte_order" in str(info.value) and "\n" not in str(info.value)
        reader.rollback()
    assert "0005_ids_in_byte_order" not in ix._read_state(ix._connection()).migrations
    ix.ensure()
    assert "0005_ids_in_byte_order" in ix._read_state(ix._connection()).migrations
    # the vault's readers are not left under a lock timeout
    assert sql(url, "SHOW lock_timeout") == [("0",)] and ix._connection().execute("SHOW lock_timeout").fetchone() \
        == ("0",)


# ------------------------------------------------------------------------------------------------ round trip
def test_apply_embed_and_every_search_round_trip(ix, url):
    fake = FakeEmbedder(32)
    report = apply(ix, corpus(), head="c0ffee", splitter=fake)
    assert (report.docs_added, report.docs_changed, report.docs_removed) == (6, 0, 0)
    assert ix.head() == "c0ffee"
    assert ix.files() == {d.path: "blob-1" for d in corpus()}
    assert ix.identity() is None and ix.pending() == report.chunks_pending > 6  # the runbook is several chunks
    # Keyword search works before any vector exists (phase 1 alone).
    assert ids_of(ix, ix.search_keywords("which port does the primary database use", KINDS, 3))[0] == "db/primary"

    done = ix.embed(fake)
    assert done.chunks_embedded == fake.embedded == report.chunks_pending and ix.pending() == 0
    assert ix.identity() == fake.identity

    hits = ix.search_keywords("which host and port", KINDS, 10)
    assert set(ids_of(ix, hits)) >= {"db/primary", "web/lb"} and all(s > 0 for _, s in hits)
    assert hits == sorted(hits, key=lambda h: -h[1])
    assert ids_of(ix, ix.search_phrases("where does the load balancer forward", KINDS, 5))[0] == "web/lb"
    assert ids_of(ix, ix.search_exact("listens on port 5432", KINDS, 5)) == ["db/primary"]
    assert ix.search_exact("port 5432 listens", KINDS, 5) == []
    assert ix.search_exact("port 5432", KINDS, 5) == []  # two words are not a quote
    assert ids_of(ix, ix.search_keywords("10.8.0.4", KINDS, 5))[0] == "db/primary"  # words split as in FTS5

    query = fake.embed_query("primary database port")
    vec = ix.search_vectors(query, KINDS, 5)
    assert ids_of(ix, vec)[0] == "db/primary" and vec == sorted(vec, key=lambda h: -h[1])
    sims = ix.similarities(query, [cid for cid, _ in vec])
    assert all(abs(sims[cid] - score) < 1e-6 for cid, score in vec)

    doc = ix.chunk_docs([vec[0][0]])[vec[0][0]]
    assert doc == {"kind": "fact", "id": "db/primary", "path": "facts/db/primary.md",
                   "body": "The primary database host listens on port 5432 at 10.8.0.4.", "importance": 0.5,
                   "confidence": 0.9, "source": "user:ops", "created": "2026-11-20T10:00:00Z",
                   "updated": "2026-11-20T10:00:00Z", "chunk": 0, "valid_until": "2027-03-01",
                   "review_after": None, "ekind": None, "ref": None, "doc": doc["doc"]}
    assert list(doc) == list(DOC_FIELDS)
    runs = ix.runs_of(["restart-pgbouncer", "unknown"])
    assert runs == {"restart-pgbouncer": [{"id": "01JEP0000000000000000000A2", "created": "2026-11-22T09:00:00Z",
                                           "text": "Ran restart-pgbouncer on db1.", "path": "episodes/2026-11.jsonl",
                                           "meta": {"commit": "abc123", "exit_code": 0}, "source": "user:ops"}],
                    "unknown": []}
    proc = ix.procedure_docs(["restart-pgbouncer", "unknown"])
    assert list(proc) == ["restart-pgbouncer"] and proc["restart-pgbouncer"]["chunk"] == 0
    eps = ix.episodes_between(datetime(2026, 11, 22, tzinfo=timezone.utc), None, 10)
    assert [e["id"] for e in eps] == ["01JEP0000000000000000000A2"] and eps[0]["chunk"] == 0
    assert [e["id"] for e in ix.episodes_between(None, None, 10)] == ["01JEP0000000000000000000A2",
                                                                    "01JEP0000000000000000000A1"]
    primary = ix.search_exact("listens on port 5432", KINDS, 1)[0]
    assert ix.coverage("primary database port", primary) == 1.0
    assert 0 < ix.coverage("primary database resolvers", primary) < 1
    assert ix.coverage("unbound", primary) == 0.0
    stats = ix.stats()
    assert stats["items"] == {"fact": 3, "episode": 2, "procedure": 1}
    assert stats["vectors"] == stats["chunks"] and stats["pending_vectors"] == 0 and stats["hnsw_bytes"] > 0
    assert consistent(url, ix)["pending"] == 0


def test_fields_are_the_ones_the_sqlite_index_gives_for_the_same_vault(sample, ix, url):
    """The repository's sample vault read into docs and applied: chunk_docs, runs_of and episodes_between match the
    SQLite index of the same files field for field, and both cut the same chunks."""
    local, docs = sample
    fake = FakeEmbedder(32)
    report = apply(ix, docs, splitter=fake)
    assert not report.problems
    conn = local.connection()
    rowids = [r[0] for r in conn.execute("SELECT rowid FROM chunks")]
    theirs = {(f["kind"], f["id"], f["chunk"]): f for f in local.chunk_docs(rowids).values()}
    v = ix._read_state(ix._connection()).vault_id
    mine = {(f["kind"], f["id"], f["chunk"]): f
            for f in ix.chunk_docs([r[0] for r in sql(url, f"SELECT chunk_id FROM memvault.v{v}_chunks")]).values()}
    assert mine.keys() == theirs.keys() and len(mine) > 20
    for key, fields in theirs.items():
        assert {k: x for k, x in mine[key].items() if k != "doc"} == {k: x for k, x in fields.items() if k != "doc"}
    names = [d.item_id for d in docs if d.kind == "procedure"]
    strip = lambda runs: {n: [{k: x for k, x in r.items()} for r in rs] for n, rs in runs.items()}  # noqa: E731
    assert strip(ix.runs_of(names, 3)) == strip(local.runs_of(names, 3))
    since = datetime(2026, 10, 1, tzinfo=timezone.utc)
    assert [(e["id"], e["created"]) for e in ix.episodes_between(since, None, 50)] == \
        [(e["id"], e["created"]) for e in local.episodes_between(since, None, 50)]


def test_times_written_in_any_form_list_and_filter_the_same_on_both_indexes(sample_times, ix):
    """Lines giving their time with an offset, a fraction or as a bare date: both indexes order, filter and show
    them the same (PostgreSQL keeps a timestamptz; SQLite its fixed-width UTC text)."""
    from test_index_times import NEWEST_FIRST, SHOWN

    local, docs = sample_times
    assert not apply(ix, docs, splitter=FakeEmbedder(32)).problems
    for query in (EpisodeQuery(source="import:chat"), EpisodeQuery(source="import:chat", before="2026-11-20T10:00:00Z"),
                  EpisodeQuery(source="import:chat", after="2026-11-20T12:00:00+02:00")):
        mine = [(e["id"], e["created"]) for e in ix.list_episodes(query, 50)]
        assert mine == [(e["id"], e["created"]) for e in local.list_episodes(query, 50)]
        assert {i for i, _c in mine} <= set(NEWEST_FIRST) and all(SHOWN[i] == c for i, c in mine)
    assert [e["id"] for e in local.list_episodes(EpisodeQuery(source="import:chat"), 50)] == NEWEST_FIRST
    for since, until in ((datetime(2026, 11, 20, 9, tzinfo=timezone.utc), datetime(2026, 11, 20, 10, 0, 0, 300000,
                                                                                      tzinfo=timezone.utc)),
                         (datetime(2026, 11, 20, tzinfo=timezone.utc), datetime(2026, 11, 21, tzinfo=timezone.utc))):
        mine = [(e["id"], e["created"]) for e in ix.episodes_between(since, until, 50)]
        assert mine and mine == [(e["id"], e["created"]) for e in local.episodes_between(since, until, 50)]
    # open windows hold every year, on both (PostgreSQL's ended on 9999-12-30)
    for since, until in ((None, None), (datetime(2026, 11, 21, tzinfo=timezone.utc), None),
                         (None, datetime(2000, 1, 1, tzinfo=timezone.utc))):
        mine = [(e["id"], e["created"]) for e in ix.episodes_between(since, until, 1000)]
        assert mine == [(e["id"], e["created"]) for e in local.episodes_between(since, until, 1000)]
        assert ("01JT000000000000000000000A", "9999-12-31T23:59:59.999Z") in mine or until is not None
        assert ("01JT0000000000000000000007", "0999-03-04T05:06:07Z") in mine or since is not None
    # pages that end inside a run of lines of one time: both go on after the last line shown
    for index in (ix, local):
        seen, before, before_id = [], None, None
        while True:
            rows = index.list_episodes(EpisodeQuery(source="import:burst", before=before, before_id=before_id), 2)
            seen += [r["id"] for r in rows]
            if len(rows) < 2:
                break
            before, before_id = rows[-1]["created"], rows[-1]["id"]
        assert sorted(seen) == sorted(i for i, _w, _s in BURST) and len(seen) == len(BURST), index
        assert seen == [r["id"] for r in index.list_episodes(EpisodeQuery(source="import:burst"), 50)], index
    # a bound without a zone is UTC on both, whatever zone the server's session is in
    ix._connection().execute("SET timezone = 'America/New_York'")
    for query in (EpisodeQuery(source="import:chat", before="2026-11-20T10:00:00"),
                  EpisodeQuery(source="import:burst", after="2026-11-21")):
        mine = [(e["id"], e["created"]) for e in ix.list_episodes(query, 50)]
        assert mine and mine == [(e["id"], e["created"]) for e in local.list_episodes(query, 50)], query
    assert ix.episode_days("2026-11-20") == local.episode_days("2026-11-20")
    with pytest.raises(InvalidValue, match="^before: not an RFC 3339 time"):
        ix.list_episodes(EpisodeQuery(before="soon"), 5)


@pytest.fixture
def sample(tmp_path):
    """The repository's sample vault, indexed by the SQLite index (through the stores, not the Vault facade), and
    the docs its files hold as phase 1 reads them."""
    yield from sample_vault(tmp_path)


@pytest.fixture
def sample_times(tmp_path):
    """The sample vault with a hand-written episode file whose lines give their times in other forms
    (tests/test_index_times.py)."""
    yield from sample_vault(tmp_path, with_times=True)


#: Five lines of one time from one source (an import): a page of two ends inside the run; then lines whose times have
#: microseconds (shown, and given back as the next page's bound, to the millisecond).
BURST = [(f"01JT00000000000000000000B{n}", "2026-11-21T08:00:00Z", "2026-11-21T08:00:00Z") for n in range(5)] + \
    [(f"01JT00000000000000000000C{n}", "2026-11-21T07:00:00.123456Z", "2026-11-21T07:00:00.123Z") for n in range(3)] + \
    [("01JT00000000000000000000D0", "2026-11-21T07:00:00.123400Z", "2026-11-21T07:00:00.123Z"),
     ("01JT00000000000000000000D1", "2026-11-21T06:00:00Z", "2026-11-21T06:00:00Z")]


def sample_vault(tmp_path, with_times=False):
    import shutil
    from pathlib import Path

    from memvault.stores.episodes import EpisodeLog
    from memvault.stores.facts import FactStore
    from memvault.index import Index
    from memvault.index.documents import Sources, read_docs
    from memvault.index.update import scan
    from memvault.stores.procedures import ProcedureStore

    root = tmp_path / "vault"
    shutil.copytree(Path(__file__).resolve().parents[1] / "vault", root)
    if with_times:
        from test_index_times import write_lines

        write_lines(root, name="2026-12.jsonl")
        write_lines(root, BURST, name="2026-12.jsonl", source="import:burst")
    sources = Sources(root, FactStore(root), EpisodeLog(root, tmp_path / "episodes.lock"),
                      ProcedureStore(root, lambda: None))
    local = Index(tmp_path / "state", sources)
    fake = FakeEmbedder(32)
    local.sync(splitter=fake)
    docs: list[Doc] = []
    problems: list[str] = []
    for rel, (kind, *_stat) in sorted(scan(sources).items()):
        docs += read_docs(sources, rel, kind, problems)
    assert docs and not problems
    yield local, docs
    local.close()


# ------------------------------------------------------------------------------------------------ phase 1 + 2
def test_kind_filters_hold_on_every_search(ix):
    fake = FakeEmbedder(32)
    apply(ix, corpus(), splitter=fake)
    ix.embed(fake)
    for kinds in (["fact"], ["episode"], ["procedure"], ["fact", "episode"]):
        found = [h[0] for h in ix.search_keywords("host restart pgbouncer port", kinds, 20)]
        found += [h[0] for h in ix.search_phrases("restart pgbouncer on the host", kinds, 20)]
        found += [h[0] for h in ix.search_vectors(fake.embed_query("restart pgbouncer host"), kinds, 20)]
        found += ix.search_exact("Restarted the server on host web1", kinds, 20)
        assert found and {d["kind"] for d in ix.chunk_docs(found).values()} <= set(kinds)
    assert ix.search_keywords("host", [], 5) == [] and ix.search_vectors(fake.embed_query("x"), [], 5) == []


def test_metadata_only_change_embeds_nothing(ix, url):
    fake = FakeEmbedder(32)
    docs = corpus()
    apply(ix, docs, splitter=fake)
    ix.embed(fake)
    fake.reset_counts()
    docs[0] = fact("db/primary", docs[0].body, valid_until="2028-01-01", importance=0.95)
    report = apply(ix, docs[:1], blob="blob-2", splitter=fake)
    assert (report.metadata_only, report.docs_changed, report.chunks_pending) == (1, 0, 0)
    assert ix.embed(fake).chunks_embedded == 0 and fake.embedded == 0
    hit = ix.search_keywords("primary database", ["fact"], 1)[0][0]
    assert ix.chunk_docs([hit])[hit]["valid_until"] == "2028-01-01"
    assert ix.chunk_docs([hit])[hit]["importance"] == 0.95
    assert ix.files()["facts/db/primary.md"] == "blob-2"


def test_a_changed_text_re_embeds_only_its_chunk(ix, url):
    fake = FakeEmbedder(32)
    docs = corpus()
    apply(ix, docs, splitter=fake)
    ix.embed(fake)
    fake.reset_counts()
    runbook = docs[-1]
    edited = procedure("restart-pgbouncer", runbook.body.replace("step 19: check pool 19", "step 19: drain pool 19"))
    report = apply(ix, [edited], blob="blob-2", splitter=fake)
    assert report.docs_changed == 1
    done = ix.embed(fake)
    assert fake.embedded == 1 and done.chunks_embedded == 1, fake.texts  # the other chunks come from the cache
    assert "drain pool 19" in fake.texts[0]
    assert ix.search_keywords("drain", KINDS, 5) and ix.search_keywords("drain", KINDS, 5)[0][0]
    assert consistent(url, ix)["pending"] == 0


def test_a_removed_path_deletes_its_docs_chunks_and_vectors(ix, url):
    fake = FakeEmbedder(32)
    docs = corpus()
    apply(ix, docs, splitter=fake)
    ix.embed(fake)
    before = consistent(url, ix)
    report = apply(ix, [], gone=["procedures/restart-pgbouncer.sh", "facts/web/lb.md"])
    assert (report.docs_removed, report.files_removed) == (2, 2)
    assert "procedures/restart-pgbouncer.sh" not in ix.files() and "facts/web/lb.md" not in ix.files()
    assert ix.search_keywords("pgbouncer pools balancer", ["procedure", "fact"], 10) == []
    after = consistent(url, ix)
    assert after["docs"] == before["docs"] - 2 and after["vectors"] == after["chunks"] < before["chunks"]
    # An episode file that lost one line: the docs of that path not given are gone.
    apply(ix, [docs[3]], blob="blob-3")
    assert [e["id"] for e in ix.episodes_between(None, None, 10)] == [docs[3].item_id]
    assert ix.runs_of(["restart-pgbouncer"]) == {"restart-pgbouncer": []}
    consistent(url, ix)


def test_duplicate_ids_and_docs_outside_the_paths(ix):
    docs = corpus()
    report = ix.apply(docs[:1] + docs[:1], {docs[0].path: "b"}, head=None)
    assert report.docs_added == 1 and "duplicate fact id 'db/primary'" in report.problems[0]
    with pytest.raises(InvalidValue, match="facts/web/lb.md .* is not among the paths applied"):
        ix.apply(docs[:2], {docs[0].path: "b"}, head=None)


def test_docs_cut_by_words_are_re_cut_by_the_model_before_embedding(ix, url):
    fake = FakeEmbedder(32)
    long_body = " ".join(f"word{i}" for i in range(400))
    apply(ix, [procedure("long", long_body)])  # no model at hand: cut by words
    v = ix._read_state(ix._connection()).vault_id
    assert sql(url, f"SELECT cut FROM memvault.v{v}_docs")[0][0] == "words"
    words_chunks = consistent(url, ix)["chunks"]
    assert ix.pending() == words_chunks + 1  # the chunks, plus the doc still to re-cut
    ix.embed(fake)
    assert sql(url, f"SELECT cut FROM memvault.v{v}_docs")[0][0] == "model"
    state = consistent(url, ix)
    assert state["chunks"] > words_chunks and state["pending"] == 0 and ix.pending() == 0


STEPPED = ("# aconnect\n\n> Manage ALSA sequencer connections.\n\n- List all ports:\n\n`aconnect -a`\n\n"
           "- List readable input ports:\n\n`aconnect -i`\n\n- Display help for every option:\n\n`aconnect`\n")


def step_rows(url: str, v: int) -> list[tuple]:
    return sql(url, f"SELECT c.chunk, c.tsv = ''::tsvector, c.nwords FROM memvault.v{v}_chunks c "
                    f"JOIN memvault.v{v}_docs d USING (doc_id) WHERE d.kind = 'procedure' AND c.chunk < 0 "
                    "ORDER BY c.chunk")


def test_a_runbooks_steps_are_vectors_without_lexemes_as_in_sqlite(ix, url):
    """Issue 27: the shared index holds a runbook's steps as the SQLite index does (chunks below 0, vectors only),
    and a shared index from before them re-cuts every runbook once, which gives it its steps."""
    fake = FakeEmbedder(32)
    apply(ix, [procedure("audio/aconnect", STEPPED), fact("audio/card", "The sound card is on the second USB port.")],
          splitter=fake)
    v = ix._read_state(ix._connection()).vault_id
    assert step_rows(url, v) == [(-4, True, 0), (-3, True, 0), (-2, True, 0), (-1, True, 0)]
    ix.embed(fake)
    consistent(url, ix)
    found = ix.search_keywords("readable input ports", KINDS, 10)
    assert found and all(d["chunk"] >= 0 for d in ix.chunk_docs([c for c, _ in found]).values())
    step = "audio/aconnect — a runbook\n- List readable input ports:\n\n`aconnect -i`"  # as it is embedded
    best = ix.search_vectors(fake.embed_query(step), KINDS, 1)[0][0]
    assert ix.chunk_docs([best])[best]["chunk"] < 0  # the step is nearer than the whole page
    # recall reads every step of a runbook it found by any chunk, as (chunk id -> the runbook's key), nothing more
    steps = {r for r, in sql(url, f"SELECT c.chunk_id FROM memvault.v{v}_chunks c JOIN memvault.v{v}_docs d "
                                  "USING (doc_id) WHERE d.item_id = 'audio/aconnect' AND c.chunk < 0")}
    window = found[0][0]
    assert ix.runbook_steps(ix.chunk_docs([window])) == {r: ("procedure", "audio/aconnect") for r in steps}
    card = ix.search_keywords("sound card second USB port", ["fact"], 1)[0][0]
    assert ix.runbook_steps(ix.chunk_docs([card])) == {}  # a fact has no steps
    # the shared index as the release before left it: no steps, the migration not recorded
    live = ix._read_state(ix._connection()).live_model
    sql(url, f"DELETE FROM memvault.v{v}_vec_{live} WHERE chunk_id IN (SELECT chunk_id FROM memvault.v{v}_chunks "
             "WHERE chunk < 0)")
    sql(url, f"DELETE FROM memvault.v{v}_chunks WHERE chunk < 0")
    sql(url, "DELETE FROM memvault.vault_migrations WHERE vault_id = %s AND name = '0003_runbook_steps'", (v,))
    with ix._connection() as conn:
        assert pg.migrations.migrate_vault(conn, v) == ["0003_runbook_steps"]
    report = ix.embed(fake)  # the team's embedding cache holds every text already: nothing is computed again
    assert len(step_rows(url, v)) == 4 and report.chunks_from_cache >= 4 and ix.pending() == 0
    assert consistent(url, ix)["vectors"] == consistent(url, ix)["chunks"]


def test_a_turn_with_context_gets_the_mean_of_both_vectors(ix):
    fake = FakeEmbedder(32)
    first = episode("01JT1", "Which port does the primary listen on?", "2026-11-20T10:00:00Z", ekind="raw")
    second = episode("01JT2", "It listens on 5432.", "2026-11-20T10:01:00Z", ekind="raw", context=first.body)
    apply(ix, [first, second], splitter=fake)
    ix.embed(fake)
    expected = mean_vector(vector_blob(fake.embed_documents([second.body])[0]),
                           vector_blob(fake.embed_documents([with_context(second.body, first.body)])[0]))
    cid = ix.search_exact("It listens on 5432", ["episode"], 1)[0]
    assert ix.similarities(np.frombuffer(expected, dtype=np.float32), [cid])[cid] == pytest.approx(1.0, abs=1e-5)
    neighbours = ix.episode_neighbours(ix.chunk_docs([cid]))
    assert ids_of(ix, neighbours[cid]) == ["01JT1"]


def test_an_embedder_of_another_model_is_refused(ix):
    fake = FakeEmbedder(32)
    apply(ix, corpus(), splitter=fake)
    ix.embed(fake, limit=3)
    other = FakeEmbedder(16, name="fake-other")
    report = ix.embed(other)
    assert other.embedded == 0 and "holds vectors of fake-hash" in report.warnings[0]
    assert report.chunks_pending == ix.pending() > 0
    with pytest.raises(SearchIndexError, match="32-dimension vectors of fake-hash; the query vector has 16"):
        ix.search_vectors(other.embed_query("x"), KINDS, 3)


def test_embed_limit_and_progress_and_pending_only_shrinks(ix):
    fake = FakeEmbedder(32)
    apply(ix, corpus(), splitter=fake)
    total = ix.pending()
    seen: list[tuple[int, int]] = []
    ix.embed(fake, limit=4, progress=lambda done, goal: seen.append((done, goal)))
    assert ix.pending() == total - 4 and seen[-1] == (4, 4)
    ix.embed(fake)
    assert ix.pending() == 0 and fake.embedded == total


# ------------------------------------------------------------------------------------------------ the cache
def test_the_cache_is_shared_by_two_vaults(url, opened):
    first, second = opened(pg.SharedIndex(url, "team-a")), opened(pg.SharedIndex(url, "team-b"))
    first.ensure()
    second.ensure()
    a, b = FakeEmbedder(32), FakeEmbedder(32)
    apply(first, corpus(), splitter=a)
    apply(second, corpus(), splitter=b)
    assert first.embed(a).chunks_embedded == a.embedded > 0
    report = second.embed(b)
    assert b.embedded == 0 and report.chunks_embedded == 0 and report.chunks_from_cache == a.embedded
    q = a.embed_query("primary database port")
    assert ids_of(first, first.search_vectors(q, KINDS, 3)) == ids_of(second, second.search_vectors(q, KINDS, 3))


def test_the_cache_alone_get_put_in_one_round_trip_keyed_without_query_prefix(url, opened):
    cache = opened(pg.EmbeddingCache(url))
    fake = FakeEmbedder(32)
    texts = [f"text number {i}" for i in range(1000)]
    vectors = [vector_blob(v) for v in fake.embed_documents(texts)]
    statements: list[str] = []
    conn = cache._connection()
    real = conn.execute

    def counting(query, *args, **kwargs):
        statements.append(str(query))
        return real(query, *args, **kwargs)

    conn.execute = counting
    cache.put(fake.identity, list(zip(texts, vectors)))
    assert len(statements) <= 2  # the model's row (first put only), the vectors
    statements.clear()
    cache.put(fake.identity, list(zip(texts, vectors)))  # already there: kept, no error
    assert len(statements) == 1
    statements.clear()
    got = cache.get(fake.identity, texts + ["never cached"])
    assert len(statements) == 1 and len(got) == 1000 and got[texts[7]] == vectors[7]
    prefixed = FakeEmbedder(32, query_prefix="query: ")  # same document vectors
    assert cache.get(prefixed.identity, texts[:3]) == {t: v for t, v in zip(texts[:3], vectors[:3])}
    assert cache.get(FakeEmbedder(32, revision="2").identity, texts[:3]) == {}
    with pytest.raises(InvalidValue):
        cache.put(fake.identity, [("short", bytes(8))])


def test_an_index_with_a_cache_in_another_database(url, pg_server, opened):  # noqa: F811
    cache_url = new_database(pg_server, "cache")
    first = opened(pg.SharedIndex(url, "team", cache=opened(pg.EmbeddingCache(cache_url))))
    first.ensure()
    a = FakeEmbedder(32)
    apply(first, corpus(), splitter=a)
    first.embed(a)
    second = opened(pg.SharedIndex(new_database(pg_server, "other"), "team",
                                   cache=opened(pg.EmbeddingCache(cache_url))))
    second.ensure()
    b = FakeEmbedder(32)
    apply(second, corpus(), splitter=b)
    assert second.embed(b).chunks_from_cache > 0 and b.embedded == 0
    q = a.embed_query("restart pgbouncer")
    assert second.search_vectors(q, KINDS, 3) and \
        ids_of(first, first.search_vectors(q, KINDS, 3)) == ids_of(second, second.search_vectors(q, KINDS, 3))


# ------------------------------------------------------------------------------------------------ concurrency
def writer_docs(w: int, i: int, version: int) -> Doc:
    return fact(f"w{w}/f{i:03d}", f"Writer {w} fact {i} version {version}: host h{i % 7} serves port {8000 + i}.")


def test_four_concurrent_writers_lose_and_duplicate_nothing(url, opened):
    index = opened(pg.SharedIndex(url, "team"))
    index.ensure()
    fake = FakeEmbedder(32)
    barrier = threading.Barrier(4)
    errors: list[BaseException] = []
    expected: dict[str, str] = {}
    lock = threading.Lock()

    def work(w: int) -> None:
        mine = opened(pg.SharedIndex(url, "team"))  # a connection of its own, as another host would have
        rng = random.Random(w)
        live: dict[int, Doc] = {}
        barrier.wait()
        try:
            for round_ in range(6):
                batch = []
                for i in rng.sample(range(40), 12):
                    if round_ and i in live and rng.random() < 0.3:
                        mine.apply([], {live.pop(i).path: None}, head=None)
                        continue
                    live[i] = writer_docs(w, i, round_)
                    batch.append(live[i])
                apply(mine, batch, blob=f"r{round_}", splitter=fake)
                if round_ % 2:
                    mine.embed(FakeEmbedder(32), wait=True)
            with lock:
                expected.update({d.item_id: d.body for d in live.values()})
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    v = index._read_state(index._connection()).vault_id
    stored = dict(sql(url, f"SELECT item_id, body FROM memvault.v{v}_docs"))
    assert stored == expected
    assert sql(url, f"SELECT count(*), count(DISTINCT doc_id) FROM memvault.v{v}_chunks")[0] == (len(expected),) * 2
    index.embed(fake)
    state = consistent(url, index)
    assert state["vectors"] == state["chunks"] == len(expected)


def test_overlapping_writers_of_the_same_files_keep_one_row_each(url, opened):
    barrier = threading.Barrier(4)
    errors: list[BaseException] = []
    docs = [writer_docs(0, i, 1) for i in range(20)]

    def work(_w: int) -> None:
        mine = opened(pg.SharedIndex(url, "team"))
        try:
            mine.ensure()
            barrier.wait()
            apply(mine, docs)
            apply(mine, [writer_docs(0, i, 2) for i in range(10)], blob="blob-2")
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    index = opened(pg.SharedIndex(url, "team"))
    v = index._read_state(index._connection()).vault_id
    assert sql(url, f"SELECT count(*), count(DISTINCT (kind, item_id)) FROM memvault.v{v}_docs")[0] == (20, 20)
    assert sql(url, f"SELECT count(*) FROM memvault.v{v}_docs WHERE body LIKE '%%version 2%%'")[0][0] == 10
    assert consistent(url, index)["chunks"] == 20


class SlowEmbedder(FakeEmbedder):
    """Takes its time, so other hosts get to write while it works."""

    def embed_documents(self, texts, batch_size=32):
        time.sleep(0.05)
        return super().embed_documents(texts, batch_size)


def test_a_model_switch_while_writers_apply_leaves_one_consistent_index(url, opened, monkeypatch):
    monkeypatch.setattr(pg.vectors, "FETCH_BATCH", 64)  # many batches: writers interleave with the build
    monkeypatch.setattr(pg.vectors, "EMBED_GROUP", 16)
    index = opened(pg.SharedIndex(url, "team"))
    index.ensure()
    old = FakeEmbedder(32)
    apply(index, [writer_docs(9, i, 0) for i in range(300)], splitter=old)
    index.embed(old)
    new = SlowEmbedder(16, name="fake-other")
    stop = threading.Event()
    errors: list[BaseException] = []
    read_models: set[int] = set()

    def write(w: int) -> None:
        mine = opened(pg.SharedIndex(url, "team"))
        rng = random.Random(w)
        n = 0
        try:
            while not stop.is_set() or n < 5:
                i = rng.randrange(60)
                if rng.random() < 0.25:
                    mine.apply([], {writer_docs(w, i, 0).path: None}, head=None)
                else:
                    apply(mine, [writer_docs(w, i, n)], blob=f"b{n}")
                n += 1
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    def read() -> None:
        mine = opened(pg.SharedIndex(url, "team"))
        try:
            while not stop.is_set():
                assert mine.search_keywords("writer host port", KINDS, 5)
                identity = mine.identity()
                emb = old if identity == old.identity else new
                try:
                    if mine.search_vectors(emb.embed_query("writer host"), KINDS, 5):
                        read_models.add(identity.dims)
                except SearchIndexError as exc:  # the flip happened between identity() and the search
                    assert "query vector has" in str(exc)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(w,)) for w in range(3)] + [threading.Thread(target=read)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 30
    while 32 not in read_models and time.monotonic() < deadline and not errors:
        time.sleep(0.05)  # the reader has found something on the old model before the switch
    report = index.switch_model(new)
    deadline = time.monotonic() + 10
    while 16 not in read_models and time.monotonic() < deadline and not errors:
        time.sleep(0.05)  # let the reader see the flip
    stop.set()
    for t in threads:
        t.join()
    assert not errors, errors
    assert not report.warnings and index.identity() == new.identity
    assert read_models == {32, 16}  # recall kept working on the old model, then on the new one
    v = index._read_state(index._connection()).vault_id
    tables = [r[0] for r in sql(url, "SELECT tablename FROM pg_tables WHERE tablename LIKE %s", (f"v{v}\\_vec\\_%",))]
    assert len(tables) == 1  # the old model's table is gone
    index.embed(new)  # whatever writers added after the flip
    state = consistent(url, index)
    assert state["vectors"] == state["chunks"] and state["pending"] == 0
    v_model = index._read_state(index._connection()).live_model
    dims = sql(url, f"SELECT DISTINCT vector_dims(embedding) FROM memvault.v{v}_vec_{v_model}")
    assert dims == [(16,)]


def test_a_second_switch_returns_or_waits(ix, url):
    fake = FakeEmbedder(32)
    apply(ix, corpus(), splitter=fake)
    ix.embed(fake)
    v = ix._read_state(ix._connection()).vault_id
    holder = psycopg.connect(url, autocommit=True)
    holder.execute("SELECT pg_advisory_lock(%s, %s)", (pg.LOCK_SWITCH, v))
    new = FakeEmbedder(16, name="fake-other")
    report = ix.switch_model(new)
    assert "another host is switching" in report.warnings[0] and ix.identity() == fake.identity
    started = time.monotonic()
    threading.Timer(0.5, lambda: holder.execute("SELECT pg_advisory_unlock(%s, %s)", (pg.LOCK_SWITCH, v))).start()
    report = ix.switch_model(new, wait=True)
    assert time.monotonic() - started >= 0.5 and not report.warnings and ix.identity() == new.identity
    holder.close()
    # The same document vectors with another query prefix: recorded, nothing re-embedded.
    prefixed = FakeEmbedder(16, name="fake-other", query_prefix="query: ")
    ix.switch_model(prefixed)
    assert ix.identity() == prefixed.identity and prefixed.embedded == 0


def test_drop_removes_the_vault_and_ensure_starts_over(ix, url):
    fake = FakeEmbedder(32)
    apply(ix, corpus(), splitter=fake)
    ix.embed(fake)
    v = ix._read_state(ix._connection()).vault_id
    ix.drop()
    assert not ix.exists()
    assert sql(url, "SELECT count(*) FROM pg_tables WHERE tablename LIKE %s", (f"v{v}\\_%",))[0][0] == 0
    with pytest.raises(SearchIndexError, match="no vault named 'team'"):
        ix.search_keywords("host", KINDS, 3)
    ix.ensure()
    assert ix.exists() and ix.pending() == 0 and ix.identity() is None and ix.stats()["chunks"] == 0


def test_times_written_to_the_microsecond_are_kept_to_the_millisecond(ix, url):
    """A shared index written before 0004 kept a line's microseconds; shown to the millisecond and given back as a
    bound, its time sorted below itself. 0004 truncates them; tables.to_time does from then on."""
    apply(ix, [episode(f"01JU{i:022d}", f"line {i}", "2026-11-20T10:00:00.123456Z", source="import:chat")
               for i in range(4)])
    v = ix._read_state(ix._connection()).vault_id
    assert {r[0] for r in sql(url, f"SELECT to_char(created, 'US') FROM memvault.v{v}_docs")} == {"123000"}
    # as the release before left it
    sql(url, f"UPDATE memvault.v{v}_docs SET created = created + interval '456 microseconds', "
             "updated = updated + interval '456 microseconds'")
    sql(url, "DELETE FROM memvault.vault_migrations WHERE vault_id = %s AND name = '0004_times_to_milliseconds'", (v,))
    with ix._connection() as conn:
        assert pg.migrations.migrate_vault(conn, v) == ["0004_times_to_milliseconds"]
    assert set(sql(url, f"SELECT to_char(created, 'US'), to_char(updated, 'US') FROM memvault.v{v}_docs")) == \
        {("123000", "123000")}
    seen, before, before_id = [], None, None
    while True:
        rows = ix.list_episodes(EpisodeQuery(before=before, before_id=before_id), 2)
        seen += [r["id"] for r in rows]
        if len(rows) < 2:
            break
        before, before_id = rows[-1]["created"], rows[-1]["id"]
    assert seen == [f"01JU{i:022d}" for i in (3, 2, 1, 0)]


def test_a_page_of_episodes_reads_the_time_index_not_every_episode(ix):
    """The newest episodes (a timeline page, the next page, one source) come from the backward scan of the index on
    episode time, in the order it gives. "created DESC NULLS LAST" is not an order that index (ascending, nulls
    last) gives backward: every episode was read and sorted for each page (24.5 ms at 60k episodes, 0.07 ms from
    the index; an episode always has its time)."""
    from memvault.index.postgres.listings import EPISODE_ORDER, episodes_sql
    from memvault.index.postgres.tables import vsql

    t0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
    apply(ix, [episode(f"01JX{i:022d}", f"line {i}", (t0 + timedelta(seconds=17 * i)).strftime("%Y-%m-%dT%H:%M:%SZ"),
                       source=f"s{i % 7}") for i in range(5000)])
    v = ix._read_state(ix._connection()).vault_id
    conn = ix._connection()
    conn.execute(vsql(v, "ANALYZE {docs}"))
    for query in (EpisodeQuery(), EpisodeQuery(before="2026-01-10T00:00:00Z", before_id="01JX9"),
                  EpisodeQuery(source="s3")):
        sql_text, args = episodes_sql(v, query)
        plan = "\n".join(r[0] for r in conn.execute(vsql(v, f"EXPLAIN ANALYZE {sql_text} ORDER BY {EPISODE_ORDER} "
                                                             "LIMIT 100"), args).fetchall())
        assert f"Index Scan Backward using v{v}_docs_episodes" in plan, plan
        assert "Seq Scan" not in plan and actual_rows(plan, "Index Scan Backward") < 1000, plan
    rows = ix.list_episodes(EpisodeQuery(), 3)
    assert [r["id"] for r in rows] == [f"01JX{i:022d}" for i in (4999, 4998, 4997)]


def test_the_last_runs_of_a_runbook_read_the_run_index_not_every_run(ix):
    """A runbook run every five minutes for a month has ~8,600 runs; a recall that returns it shows its last three,
    read from the backward scan of the index on (ref, created) (they were read and sorted, all of them)."""
    from memvault.index.postgres.reads import RUNS_SQL
    from memvault.index.postgres.tables import vsql

    t0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
    apply(ix, [episode(f"01JR{i:022d}", f"ran rotate-logs ({i})", (t0 + timedelta(minutes=5 * i)).strftime(
        "%Y-%m-%dT%H:%M:%SZ"), ekind="procedure_run", ref="rotate-logs" if i % 4 else "other")
        for i in range(4000)])
    v = ix._read_state(ix._connection()).vault_id
    conn = ix._connection()
    conn.execute(vsql(v, "ANALYZE {docs}"))
    plan = "\n".join(r[0] for r in conn.execute(vsql(v, "EXPLAIN ANALYZE " + RUNS_SQL), (["rotate-logs"], 3)))
    assert f"Index Scan Backward using v{v}_docs_runs" in plan and "Sort" not in plan, plan
    assert actual_rows(plan, "Index Scan Backward") == 3, plan
    assert [r["id"] for r in ix.runs_of(["rotate-logs"], 3)["rotate-logs"]] == \
        [f"01JR{i:022d}" for i in (3999, 3998, 3997)]


# ------------------------------------------------------------------------------------------------ bounded search
def actual_rows(plan: str, node: str) -> int:
    """Rows a plan node really produced (EXPLAIN ANALYZE), not the planner's estimate."""
    line = next(ln for ln in plan.splitlines() if node in ln)
    return int(float(re.search(r"actual time=\S+ rows=([\d.]+)", line).group(1)))


def test_common_words_do_not_rank_every_matching_chunk(ix, monkeypatch):
    monkeypatch.setattr(pg.keywords, "CANDIDATE_BUDGET", 10)
    monkeypatch.setattr(pg.keywords, "SCAN_CAP", 15)
    docs = [fact(f"hosts/h{i:03d}", f"Host h{i} listens on port {8000 + i} and serves the api.") for i in range(200)]
    # Same length each (BM25 normalises by length): only b2 also holds the common words.
    docs += [fact(f"bouncers/b{i}", f"Service b{i} runs pgbouncer on " + ("host b2, port 6432." if i == 2 else
                                                                          f"rack b{i}, shelf 6432."))
             for i in range(5)]
    apply(ix, docs)
    # Every word common: candidates come from a bounded scan (at most 2 * SCAN_CAP rows are ever scored).
    plan = ix.explain("search_keywords", "which host and port", KINDS, 10, analyze=True)
    scored = actual_rows(plan, "CTE Scan on cand")
    assert scored <= 2 * 15, plan
    assert len(ix.search_keywords("which host and port", KINDS, 10)) == 10
    # A rare word generates the candidates, the common ones only score them.
    hits = ix.search_keywords("pgbouncer host port", KINDS, 50)
    assert sorted(ids_of(ix, hits)) == [f"bouncers/b{i}" for i in range(5)]
    assert ids_of(ix, hits)[0] == "bouncers/b2"  # the common words still score: it has them, the others not
    plan = ix.explain("search_keywords", "pgbouncer host port", KINDS, 50, analyze=True)
    assert actual_rows(plan, "CTE Scan on cand") == 5
    # Phrases and quotes are bounded the same way.
    assert len(ix.search_phrases("host h1 listens on port", KINDS, 50)) <= 15
    assert ids_of(ix, ix.search_exact("Host h7 listens on port 8007", KINDS, 5)) == ["hosts/h007"]


# ------------------------------------------------------------------------------------------------ plans
@pytest.fixture
def big(url, opened):
    """2,000 facts embedded, vacuumed and analysed (what autovacuum does soon after a load): enough rows that the
    planner picks the indexes by itself. Before the vacuum, new GIN entries sit in the index's pending list,
    which the planner prices high enough to prefer a scan of this small table."""
    index = opened(pg.SharedIndex(url, "team"))
    index.ensure()
    fake = FakeEmbedder(32)
    rng = random.Random(5)
    words = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet"]
    docs = [fact(f"k/f{i:04d}", f"Service {rng.choice(words)} {rng.choice(words)} on host h{i} port {i} "
                 + ("uses pgbouncer." if i % 100 == 0 else "is fine.")) for i in range(2000)]
    apply(index, docs, splitter=fake)
    index.embed(fake)
    sql(url, "VACUUM ANALYZE")
    return index, fake


def test_plans_use_the_gin_and_hnsw_indexes(big, url):
    index, fake = big
    v = index._read_state(index._connection()).vault_id
    gin, hnsw = f"v{v}_chunks_tsv", f"v{v}_vec_1_hnsw"
    plan = index.explain("search_keywords", "what uses pgbouncer", KINDS, 10)
    assert f"Bitmap Index Scan on {gin}" in plan, plan
    plan = index.explain("search_keywords", "pgbouncer", ["fact", "episode"], 10)
    assert f"Bitmap Index Scan on {gin}" in plan and "kind fact" in plan, plan
    plan = index.explain("search_exact", "on host h1500 port 1500", KINDS, 10)
    assert f"Bitmap Index Scan on {gin}" in plan, plan
    plan = index.explain("search_phrases", "host h1500", KINDS, 10)
    assert f"Bitmap Index Scan on {gin}" in plan, plan
    # 2,000 vectors of 32 dims are 70 pages: pgvector's cost model rightly prefers an exact scan of so little, so
    # the HNSW plan is read with enable_seqscan off here (bench/bench_pgindex.py shows it chosen unforced at 100k).
    query = fake.embed_query("alpha service")
    plan = index.explain("search_vectors", query, KINDS, 10, force_index=True)
    assert f"Index Scan using {hnsw}" in plan and "Sort" not in plan, plan
    plan = index.explain("search_vectors", query, ["fact"], 10, force_index=True)
    assert f"Index Scan using {hnsw}" in plan and "Filter: (kind = ANY" in plan, plan
    # the steps of the runbooks recall found (reads.runbook_steps): the (doc_id, chunk) index, never the table
    steps = "\n".join(r[0] for r in sql(url, f"EXPLAIN SELECT chunk_id, doc_id FROM memvault.v{v}_chunks "
                                             "WHERE doc_id = ANY(%s::bigint[]) AND chunk < 0", ([5, 50, 500],)))
    assert f"Index Scan using v{v}_chunks_doc_id_chunk_key" in steps and "Seq Scan" not in steps, steps
    # the vectors of the docs of a few chunks (docs_vectors: the runbooks' feedback, the hub test, generality): the
    # chunks' key, their (doc_id, chunk) index and the vector table's key, never a scan
    from psycopg import sql as psql

    from memvault.index.postgres.vectors import docs_vectors_sql

    with psycopg.connect(url) as conn:
        query = psql.SQL("EXPLAIN ") + docs_vectors_sql(v, 1)
        plan = "\n".join(r[0] for r in conn.execute(query, ([5, 50, 500],)).fetchall())
    assert all(f"Index Scan using {name}" in plan for name in (f"v{v}_chunks_pkey", f"v{v}_chunks_doc_id_chunk_key",
                                                                f"v{v}_vec_1_pkey")), plan
    assert "Seq Scan" not in plan, plan


def test_plans_on_a_tiny_table_can_use_the_indexes(ix):
    """Six docs: the planner rightly reads the few pages (a seq scan), so the plan is read with enable_seqscan off
    to show the queries are written so that the indexes apply."""
    fake = FakeEmbedder(32)
    apply(ix, corpus(), splitter=fake)
    ix.embed(fake)
    plan = ix.explain("search_keywords", "which host and port", ["fact"], 10, force_index=True)
    assert "Bitmap Index Scan on v1_chunks_tsv" in plan, plan
    plan = ix.explain("search_vectors", fake.embed_query("host"), ["fact"], 10, force_index=True)
    assert "Index Scan using v1_vec_1_hnsw" in plan, plan
