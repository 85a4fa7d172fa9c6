"""A team's usage state (what the frequency factor counts) beside its shared index."""
from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from ...rules.timeutil import decayed, from_timestamp
from .connection import Connected
from .migrations import migrate_global


class SharedState(Connected):
    """A team's usage state (:class:`memvault.stores.state.State`'s interface) in the shared PostgreSQL, per vault name:
    a memory fetched on one host and shown on another counts once for the team.

    Counters decay as in the local state (value at its last update, decayed when read). A bump is one
    ``INSERT .. ON CONFLICT DO UPDATE`` for all the memories of a call that decays and adds in the server, so
    hosts bumping the same row at once never lose a count. An untrusted source's use reports count once per
    memory per source per day, team-wide (``usage_reports``).
    """

    def __init__(self, url: str, vault: str, *, half_life: float = 90 * 86400) -> None:
        super().__init__(url)
        self.vault = vault
        self.what = f"usage state of {vault!r}"
        self.half_life = half_life
        self.warnings: list[str] = []

    def _on_connect(self, conn: Any) -> None:
        migrate_global(conn, self.url)  # the tables it uses are global ones

    def get(self, keys: Any, at: datetime | None = None) -> dict[tuple[str, str], Any]:
        from ...stores.state import Usage

        keys = list(dict.fromkeys(keys))
        if not keys:
            return {}
        t = (at or datetime.now(timezone.utc)).timestamp()
        with self._errors("get") as conn:
            rows = conn.execute(
                "SELECT u.kind, u.item_id, u.uses, u.used_at, u.shown, u.shown_at FROM memvault.usage u "
                "JOIN unnest(%s::text[], %s::text[]) AS k(kind, item_id) USING (kind, item_id) WHERE u.vault = %s",
                ([k for k, _ in keys], [i for _, i in keys], self.vault)).fetchall()
        stamp = from_timestamp
        return {(kind, item_id): Usage(decayed(uses, used_at, t, self.half_life),
                                       decayed(shown, shown_at, t, self.half_life), stamp(used_at), stamp(shown_at))
                for kind, item_id, uses, used_at, shown, shown_at in rows}

    def recalled_hashes(self) -> set[str]:
        with self._errors("recalled") as conn:
            return {r[0] for r in conn.execute("SELECT hash FROM memvault.recalled WHERE vault = %s", (self.vault,))}

    def _bump(self, conn: Any, column: str, weights: dict[tuple[str, str], float], t: float) -> None:
        from psycopg import sql

        if not weights:
            return
        stamp = "used_at" if column == "uses" else "shown_at"
        names = {"c": sql.Identifier(column), "s": sql.Identifier(stamp)}
        conn.execute(sql.SQL(
            "INSERT INTO memvault.usage AS u (vault, kind, item_id, {c}, {s}) "
            "SELECT %s, k, i, w, %s FROM unnest(%s::text[], %s::text[], %s::float8[]) AS x(k, i, w) "
            "ON CONFLICT (vault, kind, item_id) DO UPDATE SET "
            "{c} = COALESCE(u.{c} * power(0.5, greatest(0, excluded.{s} - u.{s}) / %s), 0) + excluded.{c}, "
            "{s} = greatest(u.{s}, excluded.{s})").format(**names),
            (self.vault, t, [k for k, _ in weights], [i for _, i in weights], list(weights.values()),
             float(self.half_life)))

    def record_shown(self, weights: dict[tuple[str, str], float], *, texts: Any = (),
                     at: datetime | None = None) -> None:
        when = at or datetime.now(timezone.utc)
        texts = {h: (k, i) for h, k, i in texts}
        with self._errors("record shown") as conn, conn.transaction():
            self._bump(conn, "shown", dict(weights), when.timestamp())
            if texts:
                conn.execute(
                    "INSERT INTO memvault.recalled (vault, hash, kind, item_id, at) "
                    "SELECT %s, h, k, i, %s FROM unnest(%s::text[], %s::text[], %s::text[]) AS x(h, k, i) "
                    "ON CONFLICT (vault, hash) DO UPDATE SET kind = excluded.kind, item_id = excluded.item_id, "
                    "at = excluded.at",
                    (self.vault, when, list(texts), [k for k, _ in texts.values()], [i for _, i in texts.values()]))

    def record_use(self, keys: Any, *, source: str | None = None, limited: bool = False,
                   at: datetime | None = None) -> list[tuple[str, str]]:
        when = at or datetime.now(timezone.utc)
        keys = list(dict.fromkeys(keys))
        if not keys:
            return []
        with self._errors("record use") as conn, conn.transaction():
            if limited:
                rows = conn.execute(
                    "INSERT INTO memvault.usage_reports (vault, source, kind, item_id, day) "
                    "SELECT %s, %s, k, i, %s FROM unnest(%s::text[], %s::text[]) AS x(k, i) "
                    "ON CONFLICT DO NOTHING RETURNING kind, item_id",
                    (self.vault, source or "", when.date(), [k for k, _ in keys], [i for _, i in keys])).fetchall()
                counted = {(r[0], r[1]) for r in rows}
                keys = [key for key in keys if key in counted]
            self._bump(conn, "uses", {key: 1.0 for key in keys}, when.timestamp())
        return keys

    def forget(self, keys: Any) -> None:
        keys = list(dict.fromkeys(keys))
        if not keys:
            return
        with self._errors("forget") as conn, conn.transaction():
            for table in ("usage", "usage_reports", "recalled"):
                conn.execute(f"DELETE FROM memvault.{table} t USING unnest(%s::text[], %s::text[]) AS x(k, i) "
                             "WHERE t.vault = %s AND t.kind = x.k AND t.item_id = x.i",
                             ([k for k, _ in keys], [i for _, i in keys], self.vault))
