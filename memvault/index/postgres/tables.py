"""One vault's tables in the shared database: their names, and the vault's row as last read.

Each vault has its own tables (``memvault.v<id>_docs``, ``_chunks``, ``_pending``, ``_lexemes``, ``_files`` and one
``_vec_<model>`` per model). Table names are always formatted with ``psycopg.sql.Identifier``; values are always
parameters.
"""
from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from typing import TYPE_CHECKING, Any

from ...rules.errors import InvalidValue, MemvaultError, SearchIndexError
from ...rules.timeutil import parse_time, to_milliseconds
from ...stores.gitstore import is_commit_id
from .connection import SCHEMA, psycopg_module

if TYPE_CHECKING:
    from ...models.embeddings import ModelIdentity

#: Rows per statement in a write: arrays bigger than this are sent in slices (one transaction all the same).
WRITE_SLICE = 5_000
TABLES = ("docs", "chunks", "pending", "lexemes", "files")


@dataclass(frozen=True)
class VaultState:
    """The vault row as last read."""

    vault_id: int
    live_model: int | None
    live_identity: ModelIdentity | None
    next_model: int | None
    head: str | None
    read_at: float
    #: The migrations recorded, global and the vault's (a name memvault does not know: a newer one migrated it).
    migrations: frozenset[str] = frozenset()


def read_state(conn: Any, vault: str) -> VaultState | None:
    """The row of the vault named ``vault``, or None (not registered, or no schema yet)."""
    from ...models.embeddings import ModelIdentity

    psycopg = psycopg_module()
    try:
        row = conn.execute("SELECT vault_id, live_model, live_identity, next_model, indexed_head, "
                           "ARRAY(SELECT name FROM memvault.vault_migrations m WHERE m.vault_id = v.vault_id) "
                           "|| ARRAY(SELECT name FROM memvault.migrations) "
                           "FROM memvault.vaults v WHERE name = %s", (vault,)).fetchone()
    except psycopg.errors.UndefinedTable:
        return None
    if row is None:
        return None
    try:
        identity = ModelIdentity.from_dict(row[2]) if row[2] else None
    except InvalidValue as exc:  # not what a memvault wrote: the shared index is not used, as when it is down
        raise SearchIndexError(f"the vault {vault!r}'s model identity is not one memvault wrote ({exc})") from None
    return VaultState(int(row[0]), row[1], identity, row[3], commit_id(row[4]), time.monotonic(), frozenset(row[5]))


def commit_id(value: Any) -> str | None:
    """The commit the vault row names, or None when it names none a publish could have written: every host hands
    it to git (diff, merge-base, cat-file), where '--output=<file>' is an option, not a commit. A vault whose
    row holds such a value is as one nobody published yet (the next publish writes a real one)."""
    return value if is_commit_id(value) else None


def table(vault_id: int, name: str) -> Any:
    from psycopg import sql

    return sql.Identifier(SCHEMA, f"v{vault_id}_{name}")


#: The HNSW graph of a vector table (m, ef_construction), and maintenance_work_mem for building it (the graph should
#: fit: ~2 KB per 384-d row).
HNSW_M, HNSW_EF_CONSTRUCTION = 24, 128
BUILD_MEMORY = "512MB"

def vec(vault_id: int, model_id: int) -> Any:
    """The vector table of one model of a vault."""
    return table(vault_id, f"vec_{model_id}")


def vec_tables(state: VaultState) -> list[Any]:
    """The vector tables a write must keep in step: the live model's and the one being built."""
    return [vec(state.vault_id, m) for m in {state.live_model, state.next_model} if m is not None]


def vsql(vault_id: int, text: str, **extra: Any) -> Any:
    """``text`` with {docs}, {chunks}, {pending}, {lexemes}, {files} (and ``extra``) as identifiers."""
    from psycopg import sql

    names = {n: table(vault_id, n) for n in TABLES}
    return sql.SQL(text).format(**names, **extra)


def slices(items: Sequence[Any], size: int = WRITE_SLICE) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start:start + size]


def pending_count(conn: Any, v: int) -> int:
    """Chunks without a vector of the live model, plus docs still cut by words (each at least one chunk)."""
    row = conn.execute(vsql(v, "SELECT (SELECT count(*) FROM {pending}), "
                               "(SELECT count(*) FROM {docs} WHERE cut = 'words')")).fetchone()
    return int(row[0]) + int(row[1])


def to_time(value: str | None, problems: list[str], what: str) -> datetime | None:
    """A doc's time as the index keeps it: to the millisecond, as it is shown and given back (a page's next bound,
    the time recall looks up a turn's neighbours by), as the SQLite index keeps it (``timeutil.INDEX_TIME``)."""
    if value is None:
        return None
    try:
        return to_milliseconds(parse_time(value, what))
    except MemvaultError as exc:
        problems.append(str(exc))
        return None


def to_day(value: str | None, problems: list[str], what: str) -> date | None:
    if value is None:
        return None
    try:
        return date.fromisoformat(value[:10])
    except ValueError:
        problems.append(f"{what}: not a date: {value!r}")
        return None
