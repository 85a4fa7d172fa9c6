"""One connection to the team's PostgreSQL: opened on first use, set up for memvault, reopened after a break, and
every error a one-line :class:`~memvault.rules.errors.SearchIndexError` that names the server but never a password.

psycopg is imported inside functions: importing this package costs nothing, and a missing psycopg is a
SearchIndexError saying how to install it.
"""
from __future__ import annotations

import contextlib
import sys
import threading
from array import array
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from ...rules.errors import PlansChanged, SearchIndexError

SCHEMA = "memvault"
#: Advisory lock classes (the first key; the second is the vault id). 28022 = 0x6d76, "mv".
LOCK_WRITE = 28022   # transaction lock: every write of a vault; (28022, 0) = the global migrations
LOCK_SWITCH = 28023  # session lock: the one host building a vault's next model
LOCK_EMBED = 28024   # session lock: the one host embedding a vault's pending chunks

#: hnsw.ef_search. At 1M rows (m=24, ef_construction=128) through this module, 2 loaded cores: 400 gives
#: recall@10 0.946-0.966 across three builds (too close to 0.95), 600 gives 0.966 (facts only 0.969) at 11.6 ms
#: p50, 800 gives 0.989 at 22 ms (bench/bench_pgindex.py --ef 400,600,800; docs/scaling.md).
EF_SEARCH = 600
CONNECT_TIMEOUT = 10

NEEDS_PSYCOPG = "PostgreSQL support needs psycopg: pip install 'psycopg[binary]'"


def psycopg_module() -> Any:
    """The psycopg module, imported on first use."""
    try:
        import psycopg
    except ImportError:
        raise SearchIndexError(NEEDS_PSYCOPG) from None
    return psycopg


def one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), type(exc).__name__)
    return line if len(line) <= 300 else line[:297] + "..."


def where(url: str) -> str:
    """The URL without its password, for messages (parsed here: no psycopg needed to say where it failed)."""
    try:
        parts = urlsplit(url)
        query = dict(parse_qsl(parts.query))
        host = parts.hostname or query.get("host") or "localhost"
        port = parts.port or query.get("port")
    except ValueError:
        return "the given URL"
    user = unquote(parts.username) if parts.username else query.get("user")
    dbname = unquote(parts.path.lstrip("/")) or query.get("dbname") or ""
    return f"postgresql://{user + '@' if user else ''}{host}{':' + str(port) if port else ''}/{dbname}"


def scrub(message: str, url: str) -> str:
    """``message`` with any password of ``url`` (as written, or percent-decoded) replaced by ``***``: a server or
    driver message may quote the connection string it was given."""
    from ...rules.config import url_passwords

    for secret in sorted(url_passwords(url), key=len, reverse=True):
        message = message.replace(secret, "***")
    return message


class Vector(bytes):
    """float32 little-endian bytes, sent to PostgreSQL as a pgvector ``vector`` in its binary format."""


def _swap(data: bytes) -> bytes:
    """float32 bytes between this machine's order and network order (pgvector's binary format)."""
    if sys.byteorder == "big":
        return bytes(data)
    values = array("f")
    values.frombytes(data)
    values.byteswap()
    return values.tobytes()


def _register_vector(conn: Any, type_name: str) -> bool:
    """Teach this connection pgvector's binary format: Vector params, vector results as float32 LE bytes.
    False when the extension is not installed."""
    from psycopg.adapt import Dumper, Loader
    from psycopg.pq import Format
    from psycopg.types import TypeInfo

    info = TypeInfo.fetch(conn, type_name)
    if info is None:
        return False
    info.register(conn)  # the array type too: lists of Vector are sent as vector[]

    class VectorDumper(Dumper):
        format = Format.BINARY
        oid = info.oid

        def dump(self, obj: Any) -> bytes:
            data = bytes(obj)
            return (len(data) // 4).to_bytes(2, "big") + b"\x00\x00" + _swap(data)

    class VectorLoader(Loader):
        format = Format.BINARY

        def load(self, data: Any) -> bytes:
            dims = int.from_bytes(bytes(data[:2]), "big")
            return _swap(bytes(data[4:4 + 4 * dims]))

    conn.adapters.register_dumper(Vector, VectorDumper)
    conn.adapters.register_loader(info.oid, VectorLoader)
    return True


def connect(url: str) -> Any:
    """A new autocommit connection, set up for memvault (search settings, pgvector types when installed)."""
    psycopg = psycopg_module()
    try:
        conn = psycopg.connect(url, autocommit=True, connect_timeout=CONNECT_TIMEOUT,
                               application_name="memvault")
    except psycopg.Error as exc:
        raise SearchIndexError(scrub(f"cannot connect to PostgreSQL at {where(url)}: {one_line(exc)}", url)) from None
    try:
        setup(conn)
    except psycopg.Error as exc:
        conn.close()
        raise SearchIndexError(scrub(f"PostgreSQL at {where(url)}: {one_line(exc)}", url)) from None
    except BaseException:
        conn.close()
        raise
    return conn


def setup(conn: Any) -> bool:
    """Per-connection settings; True when pgvector is installed (and its types registered)."""
    from psycopg import sql

    row = conn.execute("SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace "
                       "WHERE e.extname = 'vector'").fetchone()
    # One round trip: recall reads ~10 neighbours with a kind filter; relaxed_order keeps filtered recall and
    # results are re-sorted here. The planner must find pgvector's type and operators where it was installed.
    settings = sql.SQL("SET hnsw.ef_search = {}; SET hnsw.iterative_scan = relaxed_order").format(
        sql.Literal(EF_SEARCH))
    if row is not None:
        settings = sql.SQL("SET search_path TO {}; ").format(sql.Identifier(row[0])) + settings
    conn.execute(settings)
    if row is None:
        return False
    return _register_vector(conn, f'"{row[0]}".vector')


class Connected:
    """One autocommit connection to the team's PostgreSQL, opened on first use (:meth:`_on_connect` then runs,
    e.g. the migrations) and reopened after it breaks; every database error a one-line :class:`SearchIndexError`
    that names :attr:`what` and the server (never its password)."""

    what = "PostgreSQL"

    def __init__(self, url: str) -> None:
        self.url = url
        self._conn: Any = None
        self._lock = threading.RLock()

    def _on_connect(self, conn: Any) -> None:
        """Run on a new connection before it is used."""

    def _forget(self) -> None:
        """Drop what was cached for the connection (called when it is opened, broken or closed)."""

    def _connection(self) -> Any:
        if self._conn is None or self._conn.closed or self._conn.broken:
            conn = connect(self.url)
            try:
                self._on_connect(conn)
            except BaseException:
                conn.close()
                raise
            self._conn = conn
            self._forget()
        return self._conn

    @contextlib.contextmanager
    def _errors(self, what: str) -> Iterator[Any]:
        psycopg = psycopg_module()
        with self._lock:
            try:
                yield self._connection()
            except psycopg.Error as exc:
                # A prepared query whose table another host altered (a migration) fails on this connection for ever:
                # PostgreSQL refuses a cached plan whose result columns changed. A new connection prepares afresh.
                changed = isinstance(exc, psycopg.errors.FeatureNotSupported) and "cached plan" in str(exc)
                if self._conn is not None and (self._conn.broken or changed
                                               or isinstance(exc, psycopg.OperationalError)):
                    with contextlib.suppress(Exception):
                        self._conn.close()
                    self._conn = None
                self._forget()
                raise (PlansChanged if changed else SearchIndexError)(
                    scrub(f"{self.what} at {where(self.url)}: {what}: {one_line(exc)}", self.url)) from None

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                with contextlib.suppress(Exception):
                    self._conn.close()
            self._conn = None
            self._forget()
