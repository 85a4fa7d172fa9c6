"""The keyword index's postings in memory: a warm process ranks words itself, with FTS5's own BM25.

FTS5's ``bm25()`` costs ~3 µs for every row that holds a query word: at 100k facts a keyword search takes 8–12 ms
(p95 45 ms with common words), longer than the query's embedding. A process that searches more than once reads the
postings out of FTS5 once (``fts5vocab`` instance rows, ``%_docsize``), sums each (word, chunk) with the field
weights, and scores a query in numpy with FTS5's formula: k1 1.2, b 0.75, IDF ``log((N - n + 0.5) / (n + 0.5))``
floored at 1e-6, each row's length over every column against the average. The scores are FTS5's to 1e-9
(``bench/bench_words_numpy.py``: the same top-100 scores on 98 of 98 queries at 10k and at 100k, 8x faster at 100k;
``tests/test_words.py``). A query word FTS5 reads as several tokens (``saved_entry``: a phrase there) is left to
FTS5, as are other field weights than the index's.

The postings are loaded in a thread of their own, on a connection of their own, and used only while the index is as
it was when the load was asked for (``Index`` compares FTS5's structure record, which every write to the keyword index
rewrites); until then, and after any change, FTS5 answers.
"""
from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from .documents import KINDS

if TYPE_CHECKING:
    import sqlite3

K1, B = 1.2, 0.75
#: The keyword index's columns in their order (search.FieldWeights.params gives a weight for each).
COLUMNS = ("body", "key", "category", "tags", "kind")
#: Seconds between two loads by one process: a vault written to every few seconds is searched by FTS5 meanwhile
#: rather than read out again and again (3 s of a core at 100k).
RELOAD_AFTER = 30.0
_TOKENIZER = "porter unicode61 remove_diacritics 2"
#: FTS5's structure record (id 10 of ``%_data``): its segments and a cookie, rewritten by every write to the index.
VERSION_SQL = "SELECT block FROM chunks_fts_data WHERE id = 10"


def _length(blob: bytes) -> int:
    """A row's tokens over every column: the sum of the varints of its ``%_docsize`` record."""
    total = value = 0
    for byte in blob:
        value = (value << 7) | (byte & 0x7F)
        if not byte & 0x80:
            total, value = total + value, 0
    return total


class Postings:
    """Every (word, chunk) of the keyword index with its field-weighted frequency; every chunk's length and kind."""

    def __init__(self, conn: sqlite3.Connection, weights: Sequence[float]) -> None:
        import numpy as np

        self.weights = tuple(weights)
        conn.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.words_terms USING fts5vocab(main, chunks_fts, row)")
        conn.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.words_instances USING fts5vocab(main, chunks_fts, "
                     "instance)")
        # The words first, all at once (they stay: the rows read after them are freed batch by batch, and give
        # their memory back), then the instances a batch at a time, as arrays.
        self.ids = {term: i for i, (term,) in enumerate(conn.execute("SELECT term FROM temp.words_terms"))}
        sizes = conn.execute("SELECT id, sz FROM chunks_fts_docsize ORDER BY id").fetchall()
        self.rowids = np.fromiter((r[0] for r in sizes), np.int64, len(sizes))
        length = np.fromiter((_length(r[1]) for r in sizes), np.float64, len(sizes))
        del sizes
        n = self.n = len(self.rowids)
        kind_code = {stems[0]: i + 1 for i, stems in enumerate(word_stems(list(KINDS))) if stems}
        self.kinds = np.zeros(n, np.int8)  # KINDS[code - 1]; 0: none
        column = {name: self.weights[i] for i, name in enumerate(COLUMNS)}
        terms, docs, weight = [], [], []
        cursor = conn.execute("SELECT term, doc, col FROM temp.words_instances")
        while batch := cursor.fetchmany(65536):
            marked = [(r[1], kind_code[r[0]]) for r in batch if r[2] == "kind" and r[0] in kind_code]
            if marked:
                self.kinds[np.searchsorted(self.rowids, np.array([m[0] for m in marked], np.int64))] = \
                    np.array([m[1] for m in marked], np.int8)
            kept = [r for r in batch if r[2] != "kind" and r[0] in self.ids]
            terms.append(np.fromiter((self.ids[r[0]] for r in kept), np.int64, len(kept)))
            docs.append(np.fromiter((r[1] for r in kept), np.int64, len(kept)))
            weight.append(np.fromiter((column[r[2]] for r in kept), np.float64, len(kept)))
            del batch, kept, marked
        term = np.concatenate(terms) if terms else np.zeros(0, np.int64)
        doc = np.concatenate(docs) if docs else np.zeros(0, np.int64)
        weights_of = np.concatenate(weight) if weight else np.zeros(0)
        del terms, docs, weight
        key = term * (n + 1) + np.searchsorted(self.rowids, doc)
        del term, doc
        order = np.argsort(key, kind="stable")
        unique, start = np.unique(key[order], return_index=True)
        self.freq = np.add.reduceat(weights_of[order], start) if len(start) else np.zeros(0)
        del key, order, weights_of, start
        self.position = (unique % (n + 1)).astype(np.int32)
        self.bounds = np.searchsorted((unique // (n + 1)), np.arange(len(self.ids) + 1))
        self.norm = K1 * (1 - B + B * length / (length.sum() / n)) if n else np.zeros(0)

    def top(self, stems: Sequence[str], kinds: Sequence[str], limit: int) -> list[tuple[int, float]]:
        """(chunk rowid, BM25) of the best ``limit`` chunks of ``kinds``; a stem counts once for each query word it
        came from, as FTS5 counts each quoted word of the expression."""
        import numpy as np

        score = np.zeros(self.n)
        for stem in stems:
            i = self.ids.get(stem)
            if i is None:
                continue
            a, b = self.bounds[i], self.bounds[i + 1]
            idf = math.log((self.n - (b - a) + 0.5) / ((b - a) + 0.5))
            rows, f = self.position[a:b], self.freq[a:b]
            score[rows] += max(idf, 1e-6) * (f * (K1 + 1)) / (f + self.norm[rows])
        if set(kinds) != set(KINDS):
            score[~np.isin(self.kinds, [KINDS.index(k) + 1 for k in kinds])] = 0.0
        found = np.flatnonzero(score)
        k = min(limit, len(found))
        if k <= 0:
            return []
        # FTS5 breaks ties by rowid (lowest first): so does this, at the cut too (rows are in rowid order)
        cut = -np.partition(-score[found], k - 1)[k - 1]
        above, tied = found[score[found] > cut], found[score[found] == cut]
        best = np.concatenate([above, tied[: k - len(above)]])
        best = best[np.lexsort((best, -score[best]))]
        return list(zip(self.rowids[best].tolist(), score[best].tolist()))


_SCRATCH = threading.local()


def word_stems(words: Sequence[str]) -> list[list[str]]:
    """Each word as the keyword index's tokenizer reads it (in a scratch in-memory table of this thread)."""
    scratch = getattr(_SCRATCH, "conn", None)
    if scratch is None:
        from .db import sqlite_module

        scratch = _SCRATCH.conn = sqlite_module().connect(":memory:")
        scratch.execute(f"CREATE VIRTUAL TABLE q USING fts5(x, tokenize='{_TOKENIZER}')")
        scratch.execute("CREATE VIRTUAL TABLE qv USING fts5vocab(q, instance)")
    scratch.execute("DELETE FROM q")
    scratch.executemany("INSERT INTO q(rowid, x) VALUES (?, ?)", list(enumerate(words, 1)))
    out: list[list[str]] = [[] for _ in words]
    for term, doc in scratch.execute("SELECT term, doc FROM qv ORDER BY doc, offset"):
        out[doc - 1].append(term)
    return out


def load(target: Path, weights: Sequence[float]) -> Postings:
    """The postings of the index file ``target``, read on a connection of the caller's thread."""
    from .db import connect

    conn = connect(target)
    try:
        return Postings(conn, weights)
    finally:
        conn.close()


__all__ = ["Postings", "load", "word_stems", "RELOAD_AFTER", "VERSION_SQL"]
