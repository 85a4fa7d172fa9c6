"""The keyword index's postings in memory: a warm process ranks words itself, with FTS5's own BM25.

FTS5's ``bm25()`` costs ~3 µs for every row that holds a query word: at 100k facts a keyword search takes 8–12 ms
(p95 45 ms with common words), longer than the query's embedding. A process that searches more than once reads the
postings out of FTS5 once (``fts5vocab`` instance rows, ``%_docsize``), sums each (word, chunk) with the field
weights, and scores a query in numpy with FTS5's formula: k1 1.2, b 0.75, IDF ``log((N - n + 0.5) / (n + 0.5))``
floored at 1e-6, each row's length over every column against the average. The scores are FTS5's to 1e-9
(``bench/bench_words_numpy.py``: the same top-100 scores on 98 of 98 queries at 10k and at 100k, 8x faster at 100k;
``tests/test_words.py``). A query word FTS5 reads as several tokens (``saved_entry``: a phrase there) is left to
FTS5, as are other field weights than the index's.

The postings are loaded in a thread of their own, on a connection of their own (not at all for an index of more
than :data:`MAX_TOKENS` tokens: their memory grows with it), and used only while the index is as
it was when the load was asked for (``Index`` compares FTS5's structure record, which every write to the keyword index
rewrites); until then, and after any change, FTS5 answers.
"""
from __future__ import annotations

import functools
import math
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .db import FTS_COLUMNS, FTS_ROWS_SQL, varints
from .documents import KINDS

if TYPE_CHECKING:
    import sqlite3

K1, B = 1.2, 0.75
#: Seconds between two loads by one process: a vault written to every few seconds is searched by FTS5 meanwhile
#: rather than read out again and again (3 s of a core at 100k).
RELOAD_AFTER = 30.0
_TOKENIZER = "porter unicode61 remove_diacritics 2"
#: FTS5's structure record (id 10 of ``%_data``): its segments and a cookie, rewritten by every write to the index.
VERSION_SQL = "SELECT block FROM chunks_fts_data WHERE id = 10"
#: The most tokens (every column) a warm process holds the postings of: ~26 bytes a token with the pairs (68.9 MB
#: at 100k facts, 2.8M tokens), so ~100 MB at most. A larger index is searched by FTS5, as a one-shot process does.
MAX_TOKENS = 4_000_000


def _length(blob: bytes) -> int:
    """A row's tokens over every column: the sum of the varints of its ``%_docsize`` record."""
    return sum(varints(blob))


def tokens(conn: sqlite3.Connection) -> int:
    """How many tokens the keyword index holds over every column (FTS5's averages record: no scan)."""
    row = conn.execute(FTS_ROWS_SQL).fetchone()  # the averages record: the rows, then each column's tokens
    return sum(varints(row[0])[1:]) if row and row[0] else 0


class _Lists:
    """Posting lists of one kind of key (a word, or two words in a row): for each key, the rows (positions in
    :attr:`Postings.rowids`, ascending) that hold it, with BM25's term-frequency part of its field-weighted
    frequency there (``norm``: each row's ``k1 (1 - b + b len / avg)``)."""

    def __init__(self, key: Any, row: Any, weight: Any, norm: Any) -> None:
        import numpy as np

        n = len(norm)
        pair = key * (n + 1) + row
        order = np.argsort(pair, kind="stable")
        unique, start = np.unique(pair[order], return_index=True)
        freq = np.add.reduceat(weight[order], start) if len(start) else np.zeros(0)
        del pair, order, start
        self.position = (unique % (n + 1)).astype(np.int32)
        #: BM25's term-frequency part, ``f (k1 + 1) / (f + k1 (1 - b + b len / avg))``: it depends on the row, not
        #: on the query, so a query only multiplies it by each key's IDF.
        self.tf = (freq * (K1 + 1)) / (freq + norm[self.position]) if len(freq) else freq
        del freq
        owner = unique // (n + 1)
        self.keys, first = np.unique(owner, return_index=True)
        self.bounds = np.append(first, len(owner)).astype(np.int64)

    def span(self, key: int) -> tuple[int, int]:
        """The slice of :attr:`position` and :attr:`tf` that belongs to ``key`` (empty when none holds it)."""
        import numpy as np

        i = int(np.searchsorted(self.keys, key))
        if i == len(self.keys) or self.keys[i] != key:
            return 0, 0
        return int(self.bounds[i]), int(self.bounds[i + 1])


class Postings:
    """Every (word, chunk) and every (two words in a row, chunk) of the keyword index with BM25's term-frequency
    part of its field-weighted frequency; every chunk's length and kind."""

    def __init__(self, conn: sqlite3.Connection, weights: Sequence[float]) -> None:
        import numpy as np

        self.weights = tuple(weights)
        conn.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.words_terms USING fts5vocab(main, chunks_fts, row)")
        conn.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.words_instances USING fts5vocab(main, chunks_fts, "
                     "instance)")
        # The words first, all at once (they stay: the rows read after them are freed batch by batch, and give
        # their memory back), then the instances a batch at a time, as arrays.
        vocabulary = conn.execute("SELECT term, doc FROM temp.words_terms").fetchall()
        self.ids = {term: i for i, (term, _) in enumerate(vocabulary)}
        #: Rows that hold each word in any column, the kind column too (what recall's coverage counts).
        self.rows_with = np.fromiter((r[1] for r in vocabulary), np.int64, len(vocabulary))
        del vocabulary
        sizes = conn.execute("SELECT id, sz FROM chunks_fts_docsize ORDER BY id").fetchall()
        self.rowids = np.fromiter((r[0] for r in sizes), np.int64, len(sizes))
        length = np.fromiter((_length(r[1]) for r in sizes), np.float64, len(sizes))
        del sizes
        n = self.n = len(self.rowids)
        kind_code = {stems[0]: i + 1 for i, stems in enumerate(word_stems(list(KINDS))) if stems}
        self.kinds = np.zeros(n, np.int8)  # KINDS[code - 1]; 0: none
        column = {name: i for i, name in enumerate(FTS_COLUMNS)}  # FieldWeights.params: one weight each
        terms, docs, cols, offsets = [], [], [], []
        cursor = conn.execute("SELECT term, doc, col, offset FROM temp.words_instances")
        while batch := cursor.fetchmany(65536):
            marked = [(r[1], kind_code[r[0]]) for r in batch if r[2] == "kind" and r[0] in kind_code]
            if marked:
                self.kinds[np.searchsorted(self.rowids, np.array([m[0] for m in marked], np.int64))] = \
                    np.array([m[1] for m in marked], np.int8)
            kept = [r for r in batch if r[2] != "kind" and r[0] in self.ids]
            terms.append(np.fromiter((self.ids[r[0]] for r in kept), np.int64, len(kept)))
            docs.append(np.fromiter((r[1] for r in kept), np.int64, len(kept)))
            cols.append(np.fromiter((column[r[2]] for r in kept), np.int8, len(kept)))
            offsets.append(np.fromiter((r[3] for r in kept), np.int32, len(kept)))
            del batch, kept, marked
        term = np.concatenate(terms) if terms else np.zeros(0, np.int64)
        row = np.searchsorted(self.rowids, np.concatenate(docs)) if docs else np.zeros(0, np.int64)
        col = np.concatenate(cols) if cols else np.zeros(0, np.int8)
        offset = np.concatenate(offsets) if offsets else np.zeros(0, np.int32)
        del terms, docs, cols, offsets
        weight = np.asarray(self.weights, np.float64)[col]
        self.norm = K1 * (1 - B + B * length / (length.sum() / n)) if n else np.zeros(0)
        self.words = _Lists(term, row, weight, self.norm)
        # Two words in a row: FTS5's phrase "a b" matches where b's offset is a's plus one in the same column
        order = np.lexsort((offset, col, row))
        term, row, col, offset, weight = term[order], row[order], col[order], offset[order], weight[order]
        del order
        follows = (row[1:] == row[:-1]) & (col[1:] == col[:-1]) & (offset[1:] == offset[:-1] + 1)
        self.words_known = len(self.ids)
        self.pairs = _Lists(term[:-1][follows] * self.words_known + term[1:][follows], row[:-1][follows],
                            weight[:-1][follows], self.norm)
        del term, row, col, offset, weight, follows

    def top(self, stems: Sequence[str], kinds: Sequence[str], limit: int) -> list[tuple[int, float]]:
        """(chunk rowid, BM25) of the best ``limit`` chunks of ``kinds``; a stem counts once for each query word it
        came from, as FTS5 counts each quoted word of the expression."""
        spans = [self.words.span(self.ids[stem]) if stem in self.ids else (0, 0) for stem in stems]
        return self._best(self.words, spans, kinds, limit)

    def top_pairs(self, pairs: Sequence[tuple[str, str]], kinds: Sequence[str], limit: int) -> list[tuple[int, float]]:
        """(chunk rowid, BM25) of the best ``limit`` chunks of ``kinds`` for the phrases of two stems ``pairs`` (as
        FTS5 ranks ``"a b" OR "c d"``: each phrase counts where its second word directly follows its first)."""
        spans = [self.pairs.span(self.ids[a] * self.words_known + self.ids[b])
                 if a in self.ids and b in self.ids else (0, 0) for a, b in pairs]
        return self._best(self.pairs, spans, kinds, limit)

    def _best(self, lists: _Lists, spans: Sequence[tuple[int, int]], kinds: Sequence[str],
              limit: int) -> list[tuple[int, float]]:
        import numpy as np

        score = np.zeros(self.n)
        for a, b in spans:
            if a == b:
                continue
            idf = math.log((self.n - (b - a) + 0.5) / ((b - a) + 0.5))
            score[lists.position[a:b]] += max(idf, 1e-6) * lists.tf[a:b]
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

    def coverages(self, stems: Sequence[str], rowids: Sequence[int]) -> dict[int, float]:
        """:func:`memvault.index.search.coverages` from memory: the share of the stems' IDF
        (``log((N - n + 0.5) / (n + 0.5) + 1)``, ``n`` the rows holding the stem in any column) that each chunk holds
        in its searched fields."""
        import numpy as np

        rows = sorted(set(rowids))
        if not stems or not rows:
            return {r: 0.0 for r in rows}
        asked = np.asarray(rows, np.int64)
        at = np.minimum(np.searchsorted(self.rowids, asked), max(self.n - 1, 0))
        known = self.rowids[at] == asked if self.n else np.zeros(len(rows), bool)
        held, weight = np.zeros(len(rows)), 0.0
        for stem in stems:
            i = self.ids.get(stem)
            n = int(self.rows_with[i]) if i is not None else 0
            idf = math.log((self.n - n + 0.5) / (n + 0.5) + 1.0)
            weight += idf
            if not n:
                continue
            a, b = self.words.span(i)
            lists = self.words.position[a:b]
            j = np.minimum(np.searchsorted(lists, at), max(b - a - 1, 0))
            if b > a:
                held += idf * (known & (lists[j] == at))
        return {r: (float(h) / weight if weight else 0.0) for r, h in zip(rows, held)}


_SCRATCH = threading.local()


def word_stems(words: Sequence[str]) -> list[list[str]]:
    """Each word as the keyword index's tokenizer reads it (in a scratch in-memory table of this thread). A recall
    asks for the same words three times (the words, the "nothing known" test, the rescoring): the last answers are
    kept."""
    return [list(stems) for stems in _stems(tuple(words))]


@functools.lru_cache(maxsize=256)
def _stems(words: tuple[str, ...]) -> tuple[tuple[str, ...], ...]:
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
    return tuple(tuple(stems) for stems in out)


def load(target: Path, weights: Sequence[float]) -> Postings:
    """The postings of the index file ``target``, read on a connection of the caller's thread."""
    from .db import connect

    conn = connect(target)
    try:
        return Postings(conn, weights)
    finally:
        conn.close()


__all__ = ["Postings", "load", "tokens", "word_stems", "MAX_TOKENS", "RELOAD_AFTER", "VERSION_SQL"]
