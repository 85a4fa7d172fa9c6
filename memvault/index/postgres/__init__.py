"""A team's shared index on PostgreSQL + pgvector, and the embedding cache every host can use.

One PostgreSQL database serves many vaults (git repositories shared by teams) and every host of each vault. It
holds what the team has pushed; each host keeps what it has not pushed in its local SQLite index (the wiring is
:mod:`memvault.core.team`'s business, not this package's). psycopg is imported inside functions: importing this
package costs nothing, and a missing psycopg is a :class:`~memvault.rules.errors.SearchIndexError` saying how to
install it.

One module per noun:

- :mod:`.connection` — one connection, set up for memvault (search settings, pgvector's binary format), reopened
  after a break; every error one line naming the server, never its password.
- :mod:`.migrations` — the schema as named, ordered migrations recorded in ``memvault.migrations`` (global) and
  ``memvault.vault_migrations`` (per vault), applied under advisory locks.
- :mod:`.tables` — one vault's tables (``v<id>_docs``, ``_chunks``, ``_pending``, ``_lexemes``, ``_files``,
  ``_vec_<model>``) and its row. Per-vault tables rather than vault_id columns in shared tables: the GIN index and
  the keyword statistics then cover one vault (a rare word of vault A does not walk vault B's postings), no query
  needs a vault filter, and dropping a vault is a few ``DROP TABLE`` s.
- :mod:`.cache` — :class:`EmbeddingCache`, (model, sha256 of the exact text) -> vector, for every vault and host.
- :mod:`.usage` — :class:`SharedState`, the team's usage counts (what the frequency factor counts).
- :mod:`.writes` — phase 1: docs, chunks, exact document frequencies, the git blobs a commit holds.
- :mod:`.vectors` — phase 2, model switches beside the live model, vector search on HNSW.
- :mod:`.keywords` — BM25 with the common-word rule (why common words stay cheap at a million chunks).
- :mod:`.reads` — the fields behind chunk ids, neighbouring turns, runs, time windows.
- :mod:`.shared` — :class:`SharedIndex`, the facade that implements :class:`memvault.index.protocol.SearchIndex`.

Concurrency: every write of a vault runs in a transaction under ``pg_advisory_xact_lock(28022, vault_id)``
(28022, 0 guards the global migrations), so concurrent hosts serialise per vault and never lose or duplicate rows.
Slow work never holds it (see :mod:`.vectors`).
"""
from __future__ import annotations

from .cache import EmbeddingCache, text_sha256, vector_key
from .connection import EF_SEARCH, LOCK_EMBED, LOCK_SWITCH, LOCK_WRITE, SCHEMA
from .keywords import CANDIDATE_BUDGET, SCAN_CAP
from .migrations import GLOBAL_MIGRATIONS, VAULT_MIGRATIONS
from .shared import SharedIndex
from .usage import SharedState
from .writes import HeadMoved

__all__ = ["CANDIDATE_BUDGET", "EF_SEARCH", "GLOBAL_MIGRATIONS", "LOCK_EMBED", "LOCK_SWITCH", "LOCK_WRITE",
           "SCAN_CAP", "SCHEMA", "VAULT_MIGRATIONS", "EmbeddingCache", "HeadMoved", "SharedIndex", "SharedState",
           "text_sha256", "vector_key"]
