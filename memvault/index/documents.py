"""What the index holds of each memory (a :class:`Doc`), read from the vault's files, and how its text is cut.

A fact is one doc (its key, category and tags form the header put before every chunk when it is embedded, and
are fields of their own in the keyword index), an episode line is one doc, a procedure is one doc whose body may
be cut into several chunks. Chunks are windows of the model's own tokens, each an exact span of the body (the
index stores the span, not the text: :func:`chunk_text`); a body that surely fits one window (fewer bytes than
tokens allowed: no tokenizer makes more tokens than bytes) is one chunk without asking the tokenizer. While no
model is at hand, longer bodies are cut by words (``cut = "words"``) and re-cut by the model before they are
embedded.
"""
from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Protocol

from ..stores.episodes import Episode, EpisodeLog, parse_lines
from ..rules.errors import FactParseError, InvalidValue, LimitExceeded, MemvaultError, UnsafePath
from ..stores.facts import Fact, FactStore, default_confidence, parse_fact
from ..rules.fsutil import read_inside
from ..stores.procedures import ProcedureStore, parse_metadata
from ..rules.timeutil import index_time, parse_time, shown_time
from ..rules.validation import Problem

KINDS = ("fact", "episode", "procedure")
CHUNK_OVERLAP = 32
# Fallback chunking when no model (hence no tokenizer) is at hand: words per window and overlap.
FALLBACK_WORDS, FALLBACK_OVERLAP = 160, 24
# How text is cut, recorded in the index: when a release changes it, the next sync with the model re-reads every
# file and re-embeds the docs whose chunks change. (128-token windows for procedures were measured and rejected:
# tldr_self R@5 +0.009, cheat_to_tldr R@10 -0.031, alert_to_runbook R@10 -0.009; docs/benchmarks.md.)
CHUNKING = "v2:model-window/32+steps"
#: A runbook is also embedded step by step (:func:`step_spans`): at most this many steps, each with its name. The
#: steps are vectors only (the keyword index holds the windows) and a runbook's semantic score is the best of its
#: windows and its steps, so a question about one step finds the runbook whose one vector for the whole page is
#: about everything else too. Measured out of fold: docs/benchmarks.md, issue 27.
STEPS_MAX = 64
#: What a doc records besides its text (``Doc.meta``) and what a raw episode is embedded with (``Doc.context``):
#: when a release changes it, the next full sync re-reads every file once. Docs whose hash did not change keep
#: their vectors; v3 changed every raw episode's context, so those are embedded again, once.
FIELDS = "v3:meta-browse-procedure+turn-context"
#: Consecutive raw episodes of one source at most this many seconds apart are one conversation.
NEIGHBOUR_GAP = 600.0
#: How many turns before a raw episode (of its source, in its file) join it when it is embedded, after the day it
#: was said: the turn before the previous often holds the question a turn answers. LoCoMo turns R@10 out of fold
#: (every set's weights chosen together): the turn before .795, the day and the two before .810; adding the turn
#: after (.813) would re-embed and rewrite every turn when the next one is written (docs/benchmarks.md, issue 27).
CONTEXT_TURNS = 2
MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December")


def meta_json(value: Any) -> str:
    """A doc's ``meta`` as stored: JSON with every character as it is (the keyword index reads the tags' text, and a
    listing that looks for a value in it must write it the same way)."""
    return json.dumps(value, ensure_ascii=False)


def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


@dataclass
class Doc:
    """One memory as the index sees it: what to chunk and embed, and the fields recall ranks on."""

    kind: str
    item_id: str
    path: str
    header: str  # joined to every chunk (procedure name and description; a fact's key, category and tags)
    body: str
    importance: float
    confidence: float
    source: str | None
    created: str | None
    updated: str | None
    valid_until: str | None = None
    review_after: float | None = None
    ekind: str | None = None  # an episode's kind (raw, summary, procedure_run, ...)
    ref: str | None = None    # what a procedure_run episode ran (the procedure's name)
    #: Fields people browse by, as JSON (never embedded): a fact's category and tags; a runbook's description and
    #: tags; an episode's tags and the agent session it was captured from (session, runtime); a procedure_run's
    #: record (commit, blob, exit_code, duration_ms, dirty), shown with the runbook. The category (or description)
    #: and the tags are also fields of the keyword index, weighed apart (:data:`memvault.index.db.FTS_VALUES`),
    #: which reads the tags as the JSON array's text: non-ASCII is kept as it is (``ensure_ascii=False``).
    meta: str | None = None
    #: What a raw episode is embedded with besides itself (:func:`turn_context`): the day it was said and the
    #: turns before it in its conversation (same source, each at most NEIGHBOUR_GAP after the one before), at most
    #: CONTEXT_TURNS. Its vector is the mean of the turn alone and of this text and the turn; stored text, keywords
    #: and what recall returns stay the turn. Measured: LoCoMo turns R@10 .746 -> .804 with the turn before and the
    #: neighbour smoothing of recall; with the day and two turns before, out of fold, .795 -> .810.
    context: str | None = None
    #: The item ids of the turns in ``context`` (oldest first): the SQLite index stores these, not their text
    #: again (:func:`stored_context`), and rebuilds the text when it embeds (:func:`resolve_context`).
    context_ids: tuple[str, ...] | None = None

    @property
    def hash(self) -> str:
        """Changes when the text to embed changes (a change of how it is cut is handled by ``CHUNKING``)."""
        return text_hash(self.header + "\x00" + self.body + ("\x00" + self.context if self.context else ""))


@dataclass
class Sources:
    """The vault's stores, as the index reads them, and the per-item size limits."""

    root: Path
    facts: FactStore
    episodes: EpisodeLog
    procedures: ProcedureStore
    max_fact: int | None = None
    max_episode: int | None = None
    max_procedure: int | None = None
    #: A team's overlay: when set, the index holds only these vault-relative paths (what this host has not
    #: pushed; the shared index holds the rest). Paths written through :meth:`Index.sync` join it.
    keep: set[str] | None = None

    def areas(self) -> tuple[tuple[str, Path, tuple[str, ...] | None], ...]:
        """(kind, folder, file suffixes) of the folders the index covers."""
        return (("fact", self.facts.dir, (".md",)), ("procedure", self.procedures.dir, None),
                ("episode", self.episodes.dir, (".jsonl",)))

    def episode_as_filed(self, rel: str, episode_id: str, files: dict[str, bytes | None]) -> Episode | None:
        """Episode ``episode_id`` as the month file ``rel`` holds it now, or None: the file holds no such episode,
        or one past [limits] episode_bytes, which the index never holds. ``files`` keeps each file's bytes for the
        next episodes asked of it (a team's shared row is checked against this host's file so)."""
        if rel not in files:
            files[rel] = self.episodes.read_bytes(self.root / rel)
        data = files[rel]
        episode = self.episodes.find(self.root / rel, episode_id, data) if data is not None else None
        if episode is None or (self.max_episode is not None and len(episode.text.encode()) > self.max_episode):
            return None
        return episode


    def episodes_as_filed(self, wanted: Sequence[tuple[str, str]]) -> dict[tuple[str, str], Episode]:
        """:meth:`episode_as_filed` of many (month file, id) at once: a file asked for many of its episodes is
        parsed once (a search of its bytes for each id cost 2.6 s for the 10,000 lines of 100 sessions)."""
        by_file: dict[str, set[str]] = {}
        for rel, episode_id in wanted:
            by_file.setdefault(rel, set()).add(episode_id)
        out: dict[tuple[str, str], Episode] = {}
        files: dict[str, bytes | None] = {}
        for rel, ids in by_file.items():
            if len(ids) < MANY_IN_A_FILE:
                found = ((i, self.episode_as_filed(rel, i, files)) for i in ids)
                out.update({(rel, i): e for i, e in found if e is not None})
                continue
            data = self.episodes.read_bytes(self.root / rel)
            for e in parse_lines(data, self.root / rel) if data is not None else ():
                if e.id in ids:  # the first line of an id, as find takes it
                    ids.discard(e.id)
                    if self.max_episode is None or len(e.text.encode()) <= self.max_episode:
                        out[(rel, e.id)] = e
        return out


#: Episodes asked of one month file past which it is parsed whole rather than searched for each id.
MANY_IN_A_FILE = 32


def fact_doc(fact: Fact, rel: str) -> Doc:
    words = [fact.key.replace("/", " ").replace("-", " ").replace("_", " ")]
    if fact.category:
        words.append(fact.category)
    words.extend(fact.tags)
    return Doc(
        kind="fact", item_id=fact.key, path=rel, header=" · ".join(words), body=fact.text,
        importance=fact.importance, confidence=fact.confidence, source=fact.source,
        created=index_time(fact.created), updated=index_time(fact.updated),
        valid_until=fact.valid_until.isoformat() if fact.valid_until else None, review_after=fact.review_after,
        meta=meta_json({"category": fact.category, "tags": list(fact.tags)}),
        # a fact another superseded (issue 25): recall leaves it out unless asked (memvault.core.contradictions)
        ref=f"superseded-by:{fact.extra['superseded_by']}" if isinstance(fact.extra.get("superseded_by"), str)
        else None,
    )


def procedure_doc(name: str, data: bytes, path: Path, rel: str, mtime: float) -> Doc:
    text = data.decode("utf-8", errors="replace")
    description, tags = parse_metadata(path, text)
    header = name + (f" — {description}" if description else "") + (f" ({', '.join(tags)})" if tags else "")
    stamp = index_time(datetime.fromtimestamp(mtime, timezone.utc).replace(microsecond=0))
    meta = meta_json({"description": description, "tags": list(tags)}) if description or tags else None
    return Doc("procedure", name, rel, header, text, 0.5, 1.0, None, stamp, stamp, meta=meta)


#: What the index holds in place of a NUL: SQLite's text functions (``substr``, which cuts a chunk's text out of
#: its doc's body for FTS5 and the model) stop at the first NUL, and every word after it went unsearchable.
NUL_STANDIN = "\ufffd"


def read_docs(sources: Sources, rel: str, kind: str, problems: list[str], *, start: int = 0,
              data: bytes | None = None, previous: Callable[[str | None], Sequence[Doc]] | None = None) -> list[Doc]:
    """:func:`file_docs`, a NUL in a doc's text or header held as :data:`NUL_STANDIN`."""
    docs = file_docs(sources, rel, kind, problems, start=start, data=data, previous=previous)
    for doc in docs:
        if "\x00" in doc.body or "\x00" in doc.header:
            doc.body, doc.header = doc.body.replace("\x00", NUL_STANDIN), doc.header.replace("\x00", NUL_STANDIN)
    return docs


def file_docs(sources: Sources, rel: str, kind: str, problems: list[str], *, start: int = 0,
              data: bytes | None = None, previous: Callable[[str | None], Sequence[Doc]] | None = None) -> list[Doc]:
    """The docs of one vault file (from byte ``start`` of an episode file), read from disk or, with ``data``, from
    those bytes (a file as a git commit holds it). A file that cannot be read, is too large, or is a symlink out of
    its folder yields no docs and a line in ``problems``. ``previous(source)`` gives the last raw episodes of that
    source before byte ``start``, oldest first: the context of the first new lines (an append embeds as a full
    read does)."""
    path = sources.root / rel
    try:
        if kind == "fact":
            key = sources.facts.key_for(path)
            if key is None:
                return []
            if data is None:
                fact = sources.facts.read_file(key, path)
            else:
                fact = parse_fact(key, path, data.decode("utf-8"))
            if sources.max_fact is not None and len(fact.text.encode()) > sources.max_fact:
                problems.append(f"{rel}: larger than [limits] fact_bytes ({sources.max_fact}): not indexed")
                return []
            return [fact_doc(fact, rel)]
        if kind == "procedure":
            name = Path(rel).relative_to("procedures").with_suffix("").as_posix()
            if data is None:
                data = read_inside(path, sources.procedures.dir, limit=sources.max_procedure)
                mtime = path.stat().st_mtime
            else:
                if sources.max_procedure is not None and len(data) > sources.max_procedure:
                    raise LimitExceeded(rel, f"{len(data)} bytes, more than the {sources.max_procedure} allowed")
                mtime = 0.0
            return [procedure_doc(name, data, path, rel, mtime)]
        found: list[Problem] = []
        docs = []
        chains: dict[str | None, list[Doc]] = {}  # source -> the raw turns of its conversation going on
        episodes = (sources.episodes.read_file(path, found, start=start) if data is None
                    else parse_lines(data, path, found, start=start))
        for e in episodes:
            if sources.max_episode is not None and len(e.text.encode()) > sources.max_episode:
                found.append(Problem(path, f"episode {e.id} is larger than [limits] episode_bytes "
                                           f"({sources.max_episode}): not indexed", e.line))
                continue
            meta_importance = e.meta.get("importance") if isinstance(e.meta, dict) else None
            importance = float(meta_importance) if isinstance(meta_importance, (int, float)) else 0.5
            ref = _run_ref(e)
            record = _episode_fields(e, ref)
            at = index_time(e.created_at)  # an episode is written once: created and updated are its one time
            doc = Doc("episode", e.id, rel, "", e.text, max(0.0, min(1.0, importance)),
                      default_confidence(e.source), e.source, at, at, ekind=e.kind, ref=ref, meta=record)
            if e.kind == "raw":
                if doc.source not in chains:
                    chains[doc.source] = conversation(previous(doc.source)) if previous is not None else []
                chain = chains[doc.source]
                before = chain[-CONTEXT_TURNS:] if chain and _follows(chain[-1], doc) else []
                doc.context = turn_context(day_of(doc.created), [b.body for b in before])
                doc.context_ids = tuple(b.item_id for b in before)
                chains[doc.source] = before + [doc]
            docs.append(doc)
        problems.extend(str(p) for p in found)
        return docs
    except FileNotFoundError:
        return []
    except FactParseError as exc:
        problems.append(str(exc))
        return []
    except UnicodeDecodeError as exc:
        problems.append(f"{rel}: not UTF-8 text ({exc.reason} at byte {exc.start})")
        return []
    except (UnsafePath, LimitExceeded) as exc:
        problems.append(f"{rel}: {getattr(exc, 'reason', exc)}")
        return []
    except (MemvaultError, OSError) as exc:
        problems.append(f"{rel}: {exc}")
        return []


def _run_ref(e: Any) -> str | None:
    """The runbook a procedure_run episode names (its ``ref`` in the index), else None."""
    meta = e.meta if isinstance(e.meta, dict) else {}
    return meta["name"] if e.kind == "procedure_run" and isinstance(meta.get("name"), str) else None


def fact_listed(fact: Fact, rel: str) -> dict[str, Any]:
    """Fact ``fact`` at ``rel`` as a listing's row gives it (:data:`memvault.index.listings.FACT_KEYS`), read from
    its file: what the index would hold of it."""
    doc = fact_doc(fact, rel)
    return {"key": doc.item_id, "path": rel, "source": doc.source, "importance": doc.importance,
            "confidence": doc.confidence, "created": shown_time(doc.created), "updated": shown_time(doc.updated),
            "valid_until": doc.valid_until, "review_after": doc.review_after, "meta": doc.meta,
            "excerpt": doc.body[:400]}


def episode_listed(e: Episode, rel: str) -> dict[str, Any]:
    """Episode ``e`` of the file ``rel`` as a listing's row gives it (:data:`memvault.index.listings.EPISODE_KEYS`),
    read from its file."""
    ref = _run_ref(e)
    return {"id": e.id, "path": rel, "source": e.source, "created": shown_time(index_time(e.created_at)),
            "ekind": e.kind, "body": e.text, "meta": _episode_fields(e, ref), "ref": ref}


def _episode_fields(e: Any, ref: str | None) -> str | None:
    """The browsing fields of an episode as JSON (see :attr:`Doc.meta`), or None when it has none."""
    out = episode_fields(e, ref)
    return meta_json(out) if out else None


def episode_fields(e: Any, ref: str | None = None) -> dict[str, Any]:
    """The browsing fields of an episode (its run's record when ``ref``, its session, runtime and tags)."""
    meta = e.meta if isinstance(e.meta, dict) else {}
    out: dict[str, Any] = {k: meta.get(k) for k in RUN_FIELDS} if ref else {}
    for field_name, key in (("session", "session_id"), ("runtime", "runtime")):
        value = meta.get(key)
        if isinstance(value, (str, int)) and not isinstance(value, bool) and str(value):
            out[field_name] = str(value)[:200]
    if e.tags:
        out["tags"] = list(e.tags)
    return out


#: What a procedure_run episode's record keeps in the index (shown with its runbook).
RUN_FIELDS = ("commit", "blob", "exit_code", "duration_ms", "dirty")


def conversation(turns: Sequence[Doc]) -> list[Doc]:
    """The end of ``turns`` (raw episodes, oldest first) that is one conversation: each follows the one before."""
    out = list(turns[-1:])
    for t in reversed(turns[:-1]):
        if not _follows(t, out[0]):
            break
        out.insert(0, t)
    return out


def day_of(created: str | None) -> str | None:
    """The day of an ISO time as words ("8 May 2023": what people write and ask, whatever the locale), or None."""
    try:
        when = parse_time(created or "")
    except InvalidValue:
        return None
    return f"{when.day} {MONTHS[when.month - 1]} {when.year}"


def turn_context(day: str | None, before: Sequence[str]) -> str | None:
    """What a raw episode is embedded with besides itself: its day, then the turns before it, one a line."""
    return "\n".join(([day] if day else []) + list(before)) or None


def stored_context(doc: Doc) -> str | None:
    """``Doc.context`` as the SQLite index stores it: the ids of the turns before (JSON), since their text is
    already stored as their own docs' bodies and the day is the doc's own ``created``."""
    if doc.context_ids is None:
        return doc.context
    return json.dumps(list(doc.context_ids))


def context_ids(stored: str | None) -> list[str] | None:
    """The turn ids :func:`stored_context` wrote, or None for a context stored as text (or none)."""
    if not stored or not stored.startswith("["):
        return None
    try:
        value = json.loads(stored)
    except ValueError:
        return None
    return value if isinstance(value, list) and all(isinstance(v, str) for v in value) else None


def resolve_context(stored: str | None, created: str | None, bodies: dict[str, str]) -> str | None:
    """The text :func:`turn_context` made when the doc was read, from what the index stores: its ``created``, the
    ids in ``stored`` and ``bodies`` (item id -> body of those episodes). A context stored as text is itself."""
    ids = context_ids(stored)
    if ids is None:
        return stored
    return turn_context(day_of(created), [bodies[i] for i in ids if i in bodies])


def _follows(previous: Doc, doc: Doc) -> bool:
    """Whether ``doc`` continues the conversation ``previous`` is part of (same source, at most NEIGHBOUR_GAP)."""
    if previous.source != doc.source or previous.ekind != "raw":
        return False
    try:
        gap = (parse_time(doc.created or "") - parse_time(previous.created or "")).total_seconds()
    except InvalidValue:
        return False
    return 0 <= gap <= NEIGHBOUR_GAP


# ------------------------------------------------------------------------------------------------ cutting
class Splitter(Protocol):
    """What cutting needs from a model: its window and its tokenizer (an Embedder is one)."""

    identity: Any

    def count_tokens(self, text: str) -> int: ...

    def split(self, text: str, max_tokens: int | None = None, overlap: int = 32) -> list[str]: ...


def chunk_text(header: str, body: str, start: int, end: int) -> str:
    """The text a chunk is embedded as: the header and a newline (when there is a header), then its span of the
    body. The index computes the same in SQL (:data:`memvault.index.db.CHUNK_TEXT`)."""
    return (header + "\n" if header else "") + body[start:end]


def fallback_spans(text: str, words: int = FALLBACK_WORDS, overlap: int = FALLBACK_OVERLAP) -> list[tuple[int, int]]:
    """Word windows for when no tokenizer is loaded; replaced once the model is there."""
    spans = [m.span() for m in re.finditer(r"\S+", text)]
    if len(spans) <= words:
        return [(0, len(text))]
    out = []
    start = 0
    while start < len(spans):
        end = min(start + words, len(spans))
        out.append((spans[start][0], spans[end - 1][1]))
        if end == len(spans):
            break
        start = end - overlap
    return out


def fallback_split(text: str, words: int = FALLBACK_WORDS, overlap: int = FALLBACK_OVERLAP) -> list[str]:
    """:func:`fallback_spans` as texts."""
    return [text[s:e] for s, e in fallback_spans(text, words, overlap)]


def _spans_of(body: str, pieces: list[str]) -> list[tuple[int, int]] | None:
    """Where each piece (exact substrings of ``body``, in order) lies; None if one is not found."""
    out, after = [], 0
    for piece in pieces:
        at = body.find(piece, after)
        if at < 0:
            return None
        out.append((at, at + len(piece)))
        after = at
    return out


Spans = list[tuple[int, int]]

_BLANK = re.compile(r"\n(?:[ \t\r]*\n)+")  # one or more blank lines (CRLF too)
_HEADING = re.compile(r"#{1,6}\s")
_WORD = re.compile(r"\w+")
_TEXT = re.compile(r"\S")
_FRONT_MATTER = re.compile(r"---[ \t\r]*\n.*?\n---[ \t\r]*(?:\n|$)", re.S)
#: Blocks read at most per runbook (its steps are its first STEPS_MAX blocks of three words or more; a file of
#: millions of blank-line-separated fragments is not read to its end).
BLOCKS_MAX = 8 * STEPS_MAX


def _blocks(body: str, start: int) -> Iterator[tuple[int, int]]:
    """(start, end) of each block of ``body`` from ``start`` between blank lines, without its outer whitespace."""
    for m in _BLANK.finditer(body, start):
        yield start, m.start()
        start = m.end()
    yield start, len(body)


def step_spans(body: str, limit: int = STEPS_MAX) -> Spans:
    """A runbook's steps, as spans of its body: its blocks between blank lines, where a block that is only a heading,
    or that ends with a colon ("- List all ports:", then the command), joins the block after it. Front matter is no
    step, nor is a block of fewer than three words. A runbook of fewer than two steps has none (its window is its
    one step)."""
    front = _FRONT_MATTER.match(body)
    spans: Spans = []
    pending: int | None = None
    for n, (start, end) in enumerate(_blocks(body, front.end() if front is not None else 0)):
        if n == BLOCKS_MAX or len(spans) == limit:
            break
        first = _TEXT.search(body, start, end)
        if first is None:
            continue
        block, end = first.start(), first.start() + len(body[first.start():end].rstrip())
        start = block if pending is None else pending
        if body[end - 1] == ":" or (_HEADING.match(body, block) and "\n" not in body[block:end]):
            pending = start
            continue
        pending = None
        if len(_WORD.findall(body, start, min(end, start + 1000))) >= 3:
            spans.append((start, end))
    return spans if len(spans) >= 2 else []


def chunk_rows(doc: Doc, windows: Spans) -> list[tuple[int, int, int]]:
    """(chunk number, start, length) of every chunk of ``doc``: its windows numbered from 0, then a runbook's steps
    numbered -1, -2, ... (a negative number is a step: a vector the keyword index does not hold)."""
    rows = [(j, s, e - s) for j, (s, e) in enumerate(windows)]
    if doc.kind == "procedure":
        rows += [(-1 - j, s, e - s) for j, (s, e) in enumerate(step_spans(doc.body))]
    return rows


def cut_spans(docs: Sequence[Doc], splitter: Splitter | None, max_tokens: int | None) -> list[tuple[Spans, str]]:
    """The chunks of each doc as spans of its body, and how they were cut (``"model"`` or ``"words"``).

    ``max_tokens`` is the model's window when it is known (from the index's model identity) even if no model is
    loaded: a body of fewer bytes than that is one chunk, exactly as the model would cut it.
    """
    out: list[tuple[Spans, str]] = []
    if splitter is not None:
        max_tokens = splitter.identity.max_tokens
    for d in docs:
        head = d.header + "\n" if d.header else ""
        whole = [(0, len(d.body))]
        if max_tokens is not None and len(head.encode()) + len(d.body.encode()) <= max_tokens - 2:
            out.append((whole, "model"))
            continue
        if splitter is None:
            out.append((fallback_spans(d.body), "words"))
            continue
        window = splitter.identity.max_tokens - 2 - (splitter.count_tokens(head) if head else 0)
        spans = _spans_of(d.body, splitter.split(d.body, max(16, window), CHUNK_OVERLAP))
        if spans is None:  # a splitter that did not return substrings: words, re-cut at the next embedding
            out.append((fallback_spans(d.body), "words"))
        else:
            out.append((spans or whole, "model"))
    return out


def cut(docs: Sequence[Doc], splitter: Splitter | None, max_tokens: int | None
        ) -> list[tuple[list[tuple[int, str]], str]]:
    """:func:`cut_spans` as (chunk number, text to embed, header included) of every chunk (:func:`chunk_rows`: the
    windows, then a runbook's steps), and how each doc was cut."""
    return [([(j, chunk_text(d.header, d.body, s, s + n)) for j, s, n in chunk_rows(d, spans)], how)
            for d, (spans, how) in zip(docs, cut_spans(docs, splitter, max_tokens))]
