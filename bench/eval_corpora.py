"""Turn the evaluation corpora in ``/work/shared/eval`` into memvault vaults + query lists.

Stdlib only (no memvault import): the vaults are written in memvault's on-disk format so that a
benchmark can index them with memvault and measure recall@k against ``Query.relevant``.

Corpora (``build(name, dest)``; see bench/README-eval.md for the mapping choices):

- ``locomo_facts``      one vault per LoCoMo conversation in locomo.dev.jsonl; observation -> fact
- ``locomo_turns``      same conversations; each dialogue turn -> raw episode
- ``locomo_summaries``  same conversations; each session summary -> summary episode
- ``cheat_to_tldr``     all tldr pages as procedures; cheat-sheet comments as queries
- ``tldr_self``         same tldr vault (shared directory); page example descriptions as queries
- ``alert_to_runbook``  prometheus-operator + openshift runbooks as procedures; alert texts as queries
- ``locomo`` / ``all``  convenience groups

Relevant ids use memvault's id scheme: ``fact:<key>``, ``episode:<id>``, ``procedure:<name>``.

CLI: ``python bench/eval_corpora.py NAME DEST [--limit N] [--no-bm25]`` prints sizes, sample queries,
a self-check that every relevant id exists on disk, and a BM25-only (SQLite FTS5) R@1/5/10 baseline.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import sys
import tarfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

__all__ = [
    "Query",
    "Corpus",
    "CORPUS_NAMES",
    "build",
    "verify",
    "load_items",
    "bm25_baseline",
    "episode_id",
    "main",
]

#: ``shared/eval`` beside the checkout (``/work/main`` and the worktrees in ``/work/wt/<name>`` alike), or
#: ``MEMVAULT_EVAL_DIR``.
DEFAULT_EVAL_DIR = Path(os.environ.get("MEMVAULT_EVAL_DIR") or next(
    (p / "shared" / "eval" for p in Path(__file__).resolve().parents if (p / "shared" / "eval").is_dir()),
    Path(__file__).resolve().parents[2] / "shared" / "eval"))

#: Bump when the on-disk layout or mappings change (the module source is hashed too).
FORMAT_VERSION = "1"
MANIFEST = "manifest.json"
MEMVAULT_TOML = "[episodes]\ntrack_in_git = false\n"

SEGMENT_RE = re.compile(r"[a-z0-9][a-z0-9._-]*")
MAX_KEY_LEN = 200
CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

LOCOMO_NAMES = ("locomo_facts", "locomo_turns", "locomo_summaries")
CORPUS_NAMES = (*LOCOMO_NAMES, "cheat_to_tldr", "tldr_self", "alert_to_runbook")
GROUPS: dict[str, tuple[str, ...]] = {"locomo": LOCOMO_NAMES, "all": CORPUS_NAMES}

#: Seconds added per turn index within a LoCoMo session (sessions are >= hours apart).
TURN_OFFSET_S = 30


@dataclass
class Query:
    qid: str
    query: str
    relevant: set[str]  # memvault ids: "fact:<key>", "episode:<id>", "procedure:<name>"
    meta: dict[str, Any] = field(default_factory=dict)  # e.g. locomo category


@dataclass
class Corpus:
    name: str  # e.g. "locomo_facts/conv-26", "cheat_to_tldr"
    vault: Path
    queries: list[Query]
    n_items: int
    id_map: dict[str, list[str]] = field(default_factory=dict, repr=False)  # memvault id -> original ids


# --------------------------------------------------------------------------------------------
# ids, names, timestamps


def _b32(value: int, length: int) -> str:
    out = []
    for _ in range(length):
        out.append(CROCKFORD[value & 31])
        value >>= 5
    return "".join(reversed(out))


def episode_id(created_at: datetime, source_id: str) -> str:
    """Deterministic ULID-shaped id: 10 chars of ms timestamp + 16 chars from sha1(source_id)."""
    ms = int(created_at.timestamp() * 1000)
    if not 0 <= ms < 2**48:
        raise ValueError(f"timestamp out of range: {created_at}")
    rnd = int.from_bytes(hashlib.sha1(source_id.encode()).digest()[:10], "big")  # 80 bits
    return _b32(ms, 10) + _b32(rnd, 16)


def _iso(dt: datetime) -> str:
    return dt.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


_LOCOMO_DT = re.compile(r"\s*(\d{1,2}):(\d{2})\s*([ap]m)\s+on\s+(\d{1,2})\s+([A-Za-z]+),?\s+(\d{4})\s*$", re.I)
_MONTHS = {m: i for i, m in enumerate(
    ["january", "february", "march", "april", "may", "june", "july", "august",
     "september", "october", "november", "december"], 1)}


def parse_locomo_datetime(s: str) -> datetime:
    """'1:56 pm on 8 May, 2023' -> 2023-05-08T13:56:00Z (times are taken as UTC)."""
    m = _LOCOMO_DT.match(s)
    if not m:
        raise ValueError(f"unparseable LoCoMo date: {s!r}")
    hh, mm, ampm, day, month, year = m.groups()
    h = int(hh) % 12 + (12 if ampm.lower() == "pm" else 0)
    mon = _MONTHS.get(month.lower()) or _MONTHS[next(k for k in _MONTHS if k.startswith(month.lower()[:3]))]
    return datetime(int(year), mon, int(day), h, int(mm), tzinfo=timezone.utc)


def _slug(s: str) -> str:
    s = re.sub(r"[^a-z0-9]+", "-", s.lower()).strip("-")
    return s or "x"


def _camel_to_kebab(seg: str) -> str:
    s = re.sub(r"([a-z0-9])([A-Z])", r"\1-\2", seg)
    s = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1-\2", s)
    return s.lower()


def _safe_segment(seg: str, camel: bool) -> str:
    """Map one original path segment to a memvault-safe segment (recorded, not necessarily reversible)."""
    if SEGMENT_RE.fullmatch(seg):
        return seg
    if camel:
        cand = _camel_to_kebab(seg)
        if SEGMENT_RE.fullmatch(cand):
            return cand
    # tldr symbol pages ('!', 'c++', '[[', 'gnu[', ...): hex-escape offending characters.
    out = "".join(ch if re.fullmatch(r"[a-z0-9._-]", ch) else f"_{ord(ch):02x}" for ch in seg.lower())
    if not SEGMENT_RE.match(out):
        out = "x" + out
    assert SEGMENT_RE.fullmatch(out), (seg, out)
    return out


def _safe_name(orig: str, camel: bool = False) -> str:
    name = "/".join(_safe_segment(s, camel) for s in orig.split("/"))
    if len(name) > MAX_KEY_LEN:
        raise ValueError(f"name too long: {name}")
    return name


# --------------------------------------------------------------------------------------------
# vault writing


class _VaultWriter:
    def __init__(self, root: Path) -> None:
        self.root = root
        for d in ("facts", "procedures", "episodes"):
            (root / d).mkdir(parents=True, exist_ok=True)
        (root / "memvault.toml").write_text(MEMVAULT_TOML, encoding="utf-8")
        self.id_map: dict[str, list[str]] = {}
        self._episodes: dict[str, list[tuple[str, str, dict[str, str]]]] = {}

    def _claim(self, mid: str, orig: list[str]) -> None:
        if mid in self.id_map:
            raise ValueError(f"duplicate memvault id {mid} (from {orig} and {self.id_map[mid]})")
        self.id_map[mid] = orig

    def fact(self, key: str, body: str, created: datetime, source: str, orig: list[str],
             category: str = "observation") -> None:
        if len(key) > MAX_KEY_LEN or not all(SEGMENT_RE.fullmatch(s) for s in key.split("/")):
            raise ValueError(f"bad fact key {key!r}")
        self._claim(f"fact:{key}", orig)
        p = self.root / "facts" / f"{key}.md"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(
            f"---\ncategory: {category}\nsource: {source}\ncreated: {_iso(created)}\n---\n{body.strip()}\n",
            encoding="utf-8",
        )

    def procedure(self, name: str, content: str, orig: list[str]) -> None:
        self._claim(f"procedure:{name}", orig)
        p = self.root / "procedures" / f"{name}.md"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(content, encoding="utf-8")  # original markdown, unchanged

    def episode(self, created: datetime, source: str, kind: str, text: str, source_id: str,
                orig: list[str]) -> str:
        eid = episode_id(created, source_id)
        self._claim(f"episode:{eid}", orig)
        rec = {"id": eid, "created_at": _iso(created), "source": source, "kind": kind, "text": text}
        month = created.astimezone(timezone.utc).strftime("%Y-%m")
        self._episodes.setdefault(month, []).append((rec["created_at"], eid, rec))
        return eid

    def close(self) -> None:
        for month, recs in self._episodes.items():
            recs.sort(key=lambda r: (r[0], r[1]))
            with open(self.root / "episodes" / f"{month}.jsonl", "w", encoding="utf-8") as f:
                for _, _, rec in recs:
                    f.write(json.dumps(rec, ensure_ascii=False) + "\n")


# --------------------------------------------------------------------------------------------
# sources


def _read_jsonl(p: Path) -> list[dict[str, Any]]:
    with open(p, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _tar_md(path: Path, prefix: str, skip: Iterable[str] = ()) -> Iterator[tuple[str, str]]:
    """Yield (id, markdown) for regular ``*.md`` members under prefix; id = path minus prefix and .md."""
    skip = tuple(skip)
    with tarfile.open(path) as tf:
        for m in tf:
            if not m.isfile() or not m.name.startswith(prefix) or not m.name.endswith(".md"):
                continue
            rid = m.name[len(prefix):-3]
            if any(rid == s or rid.endswith("/" + s) for s in skip):
                continue
            f = tf.extractfile(m)
            assert f is not None
            yield rid, f.read().decode("utf-8")


def _locomo_sessions(conv: dict[str, Any]) -> list[int]:
    return sorted(int(k.split("_")[1]) for k in conv if re.fullmatch(r"session_\d+", k))


def _obs_ids(raw: Any) -> list[str]:
    ids = raw if isinstance(raw, list) else str(raw).split(",")
    return [i.strip() for i in ids if i.strip()]


def _build_locomo(kind: str, data_dir: Path, qfile: Path, out: Path) -> dict[str, dict[str, Any]]:
    samples = {c["sample_id"]: c for c in json.loads((data_dir / "locomo10.json").read_text("utf-8"))}
    wanted: list[str] = []
    for q in _read_jsonl(qfile):
        if q["sample_id"] not in wanted:
            wanted.append(q["sample_id"])
    source = "eval:locomo"
    vaults: dict[str, dict[str, Any]] = {}
    for sid in wanted:
        c = samples[sid]
        conv = c["conversation"]
        w = _VaultWriter(out / sid)
        for n in _locomo_sessions(conv):
            when = parse_locomo_datetime(conv[f"session_{n}_date_time"])
            if kind == "locomo_facts":
                per_speaker = c["observation"].get(f"session_{n}_observation", {})
                for speaker, items in per_speaker.items():
                    for i, (text, raw_ids) in enumerate(items, 1):
                        key = f"{_slug(speaker)}/session-{n:02d}-{i:02d}"
                        w.fact(key, text, when, source, [f"{sid}/{d}" for d in _obs_ids(raw_ids)])
            elif kind == "locomo_turns":
                for i, t in enumerate(conv[f"session_{n}"]):
                    ts = when + timedelta(seconds=TURN_OFFSET_S * i)
                    oid = f"{sid}/{t['dia_id']}"
                    w.episode(ts, source, "raw", f"{t['speaker']}: {t['text']}", f"locomo-turn:{oid}", [oid])
            else:
                summ = c["session_summary"].get(f"session_{n}_summary")
                if summ:
                    oid = f"{sid}/session_{n}"
                    w.episode(when, source, "summary", summ, f"locomo-summary:{oid}", [oid])
        w.close()
        vaults[sid] = {"id_map": w.id_map}
    return vaults


def _build_tldr(data_dir: Path, out: Path) -> dict[str, dict[str, Any]]:
    w = _VaultWriter(out / "vault")
    for rid, md in _tar_md(data_dir / "tldr-pages-en.tar.gz", "pages/"):
        w.procedure(_safe_name(rid), md, [rid])
    w.close()
    return {"vault": {"id_map": w.id_map}}


def _build_runbooks(data_dir: Path, out: Path) -> dict[str, dict[str, Any]]:
    w = _VaultWriter(out / "vault")
    # prometheus-operator runbooks (query targets); section _index.md pages are not runbooks.
    for rid, md in _tar_md(data_dir / "prometheus-operator-runbooks.tar.gz", "po-runbooks/content/runbooks/",
                           skip=["_index"]):
        w.procedure(_safe_name(rid, camel=True), md, [rid])
    # openshift runbooks (distractors), ids "alerts/<operator>/<Alert>".
    for rid, md in _tar_md(data_dir / "openshift-runbooks.tar.gz", "openshift-runbooks/"):
        w.procedure(_safe_name(rid, camel=True), md, [rid])
    w.close()
    return {"vault": {"id_map": w.id_map}}


# --------------------------------------------------------------------------------------------
# build / cache


def _group_of(name: str) -> str:
    return "tldr_pages" if name in ("cheat_to_tldr", "tldr_self") else name


def _inputs(name: str, eval_dir: Path) -> list[Path]:
    d, q = eval_dir / "data", eval_dir / "queries"
    if name in LOCOMO_NAMES:
        return [d / "locomo10.json", q / "locomo.dev.jsonl"]
    if name in ("cheat_to_tldr", "tldr_self"):
        return [d / "tldr-pages-en.tar.gz"]
    if name == "alert_to_runbook":
        return [d / "prometheus-operator-runbooks.tar.gz", d / "openshift-runbooks.tar.gz"]
    raise ValueError(name)


def _input_hash(group: str, files: list[Path]) -> str:
    h = hashlib.sha256()
    h.update(f"{FORMAT_VERSION}\0{group}\0".encode())
    h.update(Path(__file__).read_bytes())
    for p in files:
        h.update(p.name.encode() + b"\0")
        h.update(hashlib.sha256(p.read_bytes()).digest())
    return h.hexdigest()


def _ensure_group(name: str, dest: Path, eval_dir: Path) -> tuple[Path, dict[str, Any]]:
    group = _group_of(name)
    out = dest / group
    digest = _input_hash(group, _inputs(name, eval_dir))
    mf = out / MANIFEST
    if mf.is_file():
        try:
            manifest = json.loads(mf.read_text("utf-8"))
            if manifest.get("input_hash") == digest:
                return out, manifest
        except (OSError, json.JSONDecodeError):
            pass
    if out.exists() and not mf.is_file() and any(out.iterdir()):
        raise FileExistsError(f"{out} exists, is not empty and has no {MANIFEST}; refusing to overwrite")
    dest.mkdir(parents=True, exist_ok=True)
    tmp = dest / f".{group}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    data_dir = eval_dir / "data"
    if name in LOCOMO_NAMES:
        vaults = _build_locomo(name, data_dir, eval_dir / "queries" / "locomo.dev.jsonl", tmp)
    elif group == "tldr_pages":
        vaults = _build_tldr(data_dir, tmp)
    else:
        vaults = _build_runbooks(data_dir, tmp)
    manifest = {"input_hash": digest, "group": group, "format_version": FORMAT_VERSION, "vaults": vaults}
    (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True), encoding="utf-8")
    if out.exists():
        shutil.rmtree(out)
    os.replace(tmp, out)
    return out, manifest


def _reverse(id_map: dict[str, list[str]]) -> dict[str, set[str]]:
    rev: dict[str, set[str]] = {}
    for mid, origs in id_map.items():
        for o in origs:
            rev.setdefault(o, set()).add(mid)
    return rev


def _queries_locomo(name: str, eval_dir: Path, sid: str, rev: dict[str, set[str]]) -> list[Query]:
    out = []
    for q in _read_jsonl(eval_dir / "queries" / "locomo.dev.jsonl"):
        if q["sample_id"] != sid or q["category"] == 5:  # 5 = adversarial (unanswerable): skipped
            continue
        origs = q["relevant_sessions"] if name == "locomo_summaries" else q["relevant"]
        rel = set().union(*(rev.get(o, set()) for o in origs)) if origs else set()
        if rel:
            meta = {"category": q["category"], "category_name": q.get("category_name"),
                    "answer": q.get("answer"), "relevant_orig": list(origs)}
            out.append(Query(q["qid"], q["query"], rel, meta))
    return out


def _queries_flat(qfile: Path, rev: dict[str, set[str]]) -> list[Query]:
    out = []
    for q in _read_jsonl(qfile):
        rel = set().union(*(rev.get(o, set()) for o in q["relevant"])) if q["relevant"] else set()
        if rel:
            meta = {k: v for k, v in q.items() if k not in ("qid", "query", "relevant")}
            meta["relevant_orig"] = list(q["relevant"])
            out.append(Query(q["qid"], q["query"], rel, meta))
    return out


def build(name: str, dest: Path, eval_dir: Path = DEFAULT_EVAL_DIR,
          limit_queries: int | None = None) -> list[Corpus]:
    """Build (or reuse from cache) the vault(s) for ``name`` under ``dest`` and return the corpora.

    ``name`` is one of CORPUS_NAMES, or "locomo"/"all". LoCoMo names give one Corpus per conversation.
    ``limit_queries`` keeps the first N queries of each returned Corpus. Cached per group directory
    ``dest/<group>/`` with ``manifest.json`` holding a hash of the inputs (and of this module).
    """
    dest, eval_dir = Path(dest), Path(eval_dir)
    if name in GROUPS:
        return [c for n in GROUPS[name] for c in build(n, dest, eval_dir, limit_queries)]
    if name not in CORPUS_NAMES:
        raise ValueError(f"unknown corpus {name!r}; expected one of {CORPUS_NAMES + tuple(GROUPS)}")
    out, manifest = _ensure_group(name, dest, eval_dir)
    corpora: list[Corpus] = []
    for vname, info in manifest["vaults"].items():
        id_map: dict[str, list[str]] = info["id_map"]
        rev = _reverse(id_map)
        if name in LOCOMO_NAMES:
            qs = _queries_locomo(name, eval_dir, vname, rev)
            cname = f"{name}/{vname}"
        else:
            qs = _queries_flat(eval_dir / "queries" / f"{name}.dev.jsonl", rev)
            cname = name
        if limit_queries is not None:
            qs = qs[:limit_queries]
        corpora.append(Corpus(cname, out / vname, qs, len(id_map), id_map))
    return corpora


# --------------------------------------------------------------------------------------------
# reading back, self-check, BM25 baseline


def _strip_frontmatter(text: str) -> str:
    if text.startswith("---\n"):
        end = text.find("\n---\n", 4)
        if end != -1:
            return text[end + 5:]
    return text


def load_items(vault: Path) -> list[tuple[str, str]]:
    """Read a vault back from disk: [(memvault id, searchable text)]."""
    items: list[tuple[str, str]] = []
    for p in sorted((vault / "facts").rglob("*.md")):
        key = p.relative_to(vault / "facts").with_suffix("").as_posix()
        items.append((f"fact:{key}", _strip_frontmatter(p.read_text("utf-8"))))
    for p in sorted((vault / "procedures").rglob("*")):
        if p.is_file():
            name = p.relative_to(vault / "procedures").with_suffix("").as_posix()
            items.append((f"procedure:{name}", p.read_text("utf-8")))
    for p in sorted((vault / "episodes").glob("*.jsonl")):
        with open(p, encoding="utf-8") as f:
            for line in f:
                if line.strip():
                    rec = json.loads(line)
                    items.append((f"episode:{rec['id']}", rec["text"]))
    return items


def verify(corpus: Corpus) -> list[str]:
    """Problems found: relevant ids missing on disk, malformed names, count mismatches."""
    problems: list[str] = []
    items = load_items(corpus.vault)
    ids = [i for i, _ in items]
    present = set(ids)
    if len(present) != len(ids):
        problems.append(f"duplicate ids in vault ({len(ids) - len(present)})")
    if len(present) != corpus.n_items:
        problems.append(f"n_items {corpus.n_items} != items on disk {len(present)}")
    if (corpus.vault / "memvault.toml").read_text("utf-8") != MEMVAULT_TOML:
        problems.append("memvault.toml content differs")
    for mid in present:
        kind, _, rest = mid.partition(":")
        if kind in ("fact", "procedure") and not (
            len(rest) <= MAX_KEY_LEN and all(SEGMENT_RE.fullmatch(s) for s in rest.split("/"))
        ):
            problems.append(f"bad name {mid}")
        if kind == "episode" and not re.fullmatch(f"[{CROCKFORD}]{{26}}", rest):
            problems.append(f"bad episode id {mid}")
    for q in corpus.queries:
        if not q.relevant:
            problems.append(f"{q.qid}: no relevant ids")
        for r in q.relevant - present:
            problems.append(f"{q.qid}: relevant {r} not in vault")
    return problems


def _sqlite() -> Any:
    import sqlite3

    try:
        sqlite3.connect(":memory:").execute("create virtual table t using fts5(x)")
        return sqlite3
    except sqlite3.OperationalError:
        import pysqlite3  # type: ignore[import-not-found]

        return pysqlite3


_TOKEN = re.compile(r"[^\W_]+", re.UNICODE)


def _fts_query(text: str) -> str:
    toks = list(dict.fromkeys(_TOKEN.findall(text.lower())))
    return " OR ".join(f'"{t}"' for t in toks)


def bm25_baseline(corpus: Corpus, ks: tuple[int, ...] = (1, 5, 10),
                  tokenize: str = "unicode61") -> dict[str, float]:
    """BM25-only baseline via SQLite FTS5 (OR over lower-cased, punctuation-stripped query tokens).

    Returns ``R@k`` (mean fraction of relevant ids in the top k) and ``hit@k`` (mean of "any relevant
    id in the top k"), plus ``n`` (number of queries). Averaged over queries. ``tokenize`` is the
    FTS5 tokenizer spec ("unicode61", or "porter unicode61" for stemming).
    """
    if not re.fullmatch(r"[a-z0-9_ ]+", tokenize):
        raise ValueError(f"bad tokenizer spec {tokenize!r}")
    sq = _sqlite()
    con = sq.connect(":memory:")
    con.execute(f"create virtual table docs using fts5(mid unindexed, body, tokenize='{tokenize}')")
    con.executemany("insert into docs(mid, body) values (?, ?)", load_items(corpus.vault))
    kmax = max(ks)
    sums = {f"{m}@{k}": 0.0 for m in ("R", "hit") for k in ks}
    for q in corpus.queries:
        expr = _fts_query(q.query)
        ranked = [r[0] for r in con.execute(
            "select mid from docs where docs match ? order by bm25(docs) limit ?", (expr, kmax))] if expr else []
        for k in ks:
            found = len(q.relevant.intersection(ranked[:k]))
            sums[f"R@{k}"] += found / len(q.relevant)
            sums[f"hit@{k}"] += 1.0 if found else 0.0
    n = len(corpus.queries)
    res = {key: (v / n if n else 0.0) for key, v in sums.items()}
    res["n"] = float(n)
    return res


# --------------------------------------------------------------------------------------------
# CLI


def _fmt(res: dict[str, float], ks: tuple[int, ...]) -> str:
    r = " ".join(f"R@{k}={res[f'R@{k}']:.3f}" for k in ks)
    h = " ".join(f"hit@{k}={res[f'hit@{k}']:.3f}" for k in ks)
    return f"{r} | {h}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("name", help=f"one of {', '.join(CORPUS_NAMES + tuple(GROUPS))}")
    ap.add_argument("dest", type=Path)
    ap.add_argument("--eval-dir", type=Path, default=DEFAULT_EVAL_DIR)
    ap.add_argument("--limit", type=int, default=None, help="keep the first N queries per corpus")
    ap.add_argument("--no-bm25", action="store_true")
    ap.add_argument("--porter", action="store_true", help="BM25 baseline with the porter stemmer")
    args = ap.parse_args(argv)
    ks = (1, 5, 10)
    corpora = build(args.name, args.dest, args.eval_dir, args.limit)
    ok = True
    totals: dict[str, dict[str, float]] = {}
    for c in corpora:
        print(f"== {c.name}: {c.n_items} items, {len(c.queries)} queries  [{c.vault}]")
        for q in c.queries[:3]:
            print(f"   {q.qid}: {q.query[:90]!r} -> {sorted(q.relevant)[:4]}")
        problems = verify(c)
        if problems:
            ok = False
            print(f"   SELF-CHECK FAILED ({len(problems)}): {problems[:5]}")
        else:
            print("   self-check ok: every relevant id exists in the vault")
        if not args.no_bm25 and c.queries:
            res = bm25_baseline(c, ks, "porter unicode61" if args.porter else "unicode61")
            print(f"   BM25 {_fmt(res, ks)}")
            agg = totals.setdefault(c.name.split("/")[0], {"n": 0.0, "items": 0.0})
            agg["items"] += c.n_items
            for key, v in res.items():
                agg[key] = agg.get(key, 0.0) + (v if key == "n" else v * res["n"])
    if totals:
        tok = "porter unicode61" if args.porter else "unicode61"
        print(f"\n== BM25 (FTS5 {tok}, OR over query tokens), micro-averaged over queries")
        for name, agg in totals.items():
            n = agg["n"]
            res = {k: v / n for k, v in agg.items() if k not in ("n", "items")}
            print(f"   {name:18s} items={int(agg['items']):5d} n={int(n):4d}  {_fmt(res, ks)}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
