"""Deterministic synthetic fact corpus for the speed benchmarks (``bench/bench_index.py``).

Real text, recombined: every tldr example (description + command), every LoCoMo observation and every
awesome-prometheus-alerts rule (name + description) from ``/work/shared/eval/data`` is a *base* text. Fact
``i`` is base ``i mod B`` (in a fixed shuffled order) followed by an ops context (host, address, port) that
depends on ``i``, so any number of unique, realistic short facts can be made (~47k bases; 100k facts use each
base about twice, each time on another host). Stdlib only; no memvault import.

A few hundred tldr examples are *held out* (never used as a base); queries are made from them by dropping a
few words, so no query is a verbatim copy of a fact (and none is a paraphrase either).

    python bench/corpus.py 5          # print 5 facts and 5 queries
"""
from __future__ import annotations

import hashlib
import json
import random
import re
import sys
import tarfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

# ../shared/eval/data beside the checkout (a worktree in /work/wt/NAME looks further up).
DATA = next((p / "shared" / "eval" / "data" for p in Path(__file__).resolve().parents
             if (p / "shared" / "eval" / "data").is_dir()), Path(__file__).resolve().parents[2] / "shared" / "eval" / "data")
VERSION = "1"  # bump when the generated text changes (cached vaults are rebuilt)
SEED = 20261202
HELD_OUT_EVERY = 97  # one tldr example in 97 is held out for queries (≈ 470)

_HOSTS = ("web", "db", "cache", "api", "worker", "lb", "mq", "search", "ci", "mon", "backup", "edge")
_SITES = ("fra1", "ams2", "nyc3", "sfo2", "sgp1", "lon1")
_PORTS = (22, 80, 443, 5432, 6379, 8080, 8443, 9090, 9100, 3306, 5672, 9200, 2379, 11211)
_CONTEXT = (
    "On {host} ({ip}:{port}): {text}",
    "{text} Applies to {host}, listening on {ip}:{port}.",
    "{host} ({ip}, port {port}): {text}",
    "Runbook note for {host}.{site}: {text}",
)


@dataclass(frozen=True)
class Base:
    source: str  # tldr | locomo | alert
    topic: str  # tldr page, LoCoMo speaker, alert group: becomes a key segment and the fact's category
    text: str


def _slug(text: str) -> str:
    s = re.sub(r"[^a-z0-9._-]+", "-", text.lower()).strip("-._")
    return (s or "x")[:40]


def _clean_tldr(text: str) -> str:
    text = re.sub(r"\{\{\[([^|\]]+)\|[^\]]+\]\}\}", r"\1", text)  # {{[-C|--directory]}} -> -C
    text = text.replace("{{", "").replace("}}", "")
    return re.sub(r"\[(\w)\]", r"\1", text)  # [c]reate -> create


def _tldr() -> list[tuple[str, str, str]]:
    """(page, description, command) for every example of every English tldr page, in archive order."""
    out = []
    with tarfile.open(DATA / "tldr-pages-en.tar.gz") as tar:
        for member in tar:
            if not member.isfile() or not member.name.endswith(".md") or "/pages/" not in "/" + member.name:
                continue
            page = Path(member.name).stem
            fh = tar.extractfile(member)
            if fh is None:
                continue
            lines = fh.read().decode("utf-8", "replace").splitlines()
            desc = None
            for line in lines:
                if line.startswith("- "):
                    desc = _clean_tldr(line[2:].strip()).rstrip(":")
                elif line.startswith("`") and desc:
                    out.append((page, desc, _clean_tldr(line.strip("`"))))
                    desc = None
    return out


def _locomo() -> list[Base]:
    out = []
    for conv in json.loads((DATA / "locomo10.json").read_text()):
        for session in sorted(conv["observation"]):
            for speaker, items in conv["observation"][session].items():
                for text, _dia in items:
                    out.append(Base("locomo", _slug(speaker), text.strip()))
    return out


def _alerts() -> list[Base]:
    out, group, name = [], "alerts", None
    for line in (DATA / "awesome-prometheus-alerts-rules.yml").read_text().splitlines():
        s = line.strip()
        if s.startswith("- name:") and line.startswith("      - name:") and not line.startswith("              "):
            group = _slug(s[len("- name:"):].strip().strip("\"'"))  # a service
        elif s.startswith("- name:"):
            name = s[len("- name:"):].strip().strip("\"'")
        elif s.startswith("description:") and name:
            desc = s[len("description:"):].strip().strip("\"'")
            out.append(Base("alert", group, f"Alert {name}: {desc}"))
            name = None
    return out


@lru_cache(maxsize=1)
def bases_and_held_out() -> tuple[tuple[Base, ...], tuple[str, ...]]:
    """All base texts (deduplicated, shuffled with a fixed seed) and the held-out tldr descriptions."""
    bases: list[Base] = []
    held: list[str] = []
    seen: set[str] = set()
    for n, (page, desc, cmd) in enumerate(_tldr()):
        if n % HELD_OUT_EVERY == 0:
            if len(desc.split()) >= 5:
                held.append(desc)
            continue
        bases.append(Base("tldr", _slug(page), f"{desc}: {cmd}"))
    bases += _locomo() + _alerts()
    unique = []
    for b in bases:
        if b.text not in seen:
            seen.add(b.text)
            unique.append(b)
    random.Random(SEED).shuffle(unique)
    return tuple(unique), tuple(held)


class RealModelText:
    """What a bench embedder that makes its own document vectors takes from the real model it stands in for: its
    identity, its query vectors, its token count and its splitter (so chunks and budgets are the real ones)."""

    def __init__(self, real: Any) -> None:
        self.identity = real.identity
        self._real = real

    def embed_query(self, text: str) -> Any:
        return self._real.embed_query(text)

    def count_tokens(self, text: str) -> int:
        return self._real.count_tokens(text)

    def split(self, text: str, max_tokens: int | None = None, overlap: int = 32) -> list[str]:
        return self._real.split(text, max_tokens, overlap)


@dataclass(frozen=True)
class FactSpec:
    key: str
    category: str
    text: str

    def render(self) -> str:
        return f"---\ncategory: {self.category}\nsource: agent:bench\n---\n{self.text}\n"


def fact(i: int) -> FactSpec:
    """Fact number ``i`` (0-based): the same for every vault size, so the 1k vault is a prefix of the 10k one."""
    bases, _ = bases_and_held_out()
    b = bases[i % len(bases)]
    h = int.from_bytes(hashlib.sha256(f"{SEED}:{i}".encode()).digest()[:8], "big")
    host = f"{_HOSTS[h % len(_HOSTS)]}{(h >> 8) % 40 + 1:02d}"
    ip = f"10.{(h >> 16) % 16}.{(h >> 24) % 256}.{(h >> 32) % 254 + 1}"
    site = _SITES[(h >> 40) % len(_SITES)]
    port = _PORTS[(h >> 44) % len(_PORTS)]
    text = _CONTEXT[(h >> 48) % len(_CONTEXT)].format(host=host, ip=ip, port=port, site=site, text=b.text)
    return FactSpec(f"{b.source}/{b.topic}/f{i:06d}", b.source if b.source != "tldr" else "command", text)


def facts(n: int) -> list[FactSpec]:
    return [fact(i) for i in range(n)]


def queries(n: int = 50) -> list[str]:
    """``n`` natural-language queries: held-out tldr descriptions with a few words dropped (deterministic)."""
    _, held = bases_and_held_out()
    rng = random.Random(SEED + 1)
    picked = rng.sample(list(held), min(n, len(held)))
    out = []
    for desc in picked:
        words = desc.split()
        drop = set(rng.sample(range(len(words)), k=min(2, max(0, len(words) - 4))))
        out.append(" ".join(w for j, w in enumerate(words) if j not in drop))
    return out


def write_vault(root: Path, n: int, model: str = "all-MiniLM-L6-v2") -> None:
    """Write ``memvault.toml`` and ``facts/`` for facts 0..n-1 (no git repository: autocommit has nothing to do)."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "memvault.toml").write_text(f'[embedding]\nmodel = "{model}"\n')
    for spec in facts(n):
        path = root / "facts" / f"{spec.key}.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(spec.render())


if __name__ == "__main__":
    k = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    b, h = bases_and_held_out()
    print(f"{len(b)} bases ({sum(x.source == 'tldr' for x in b)} tldr, {sum(x.source == 'locomo' for x in b)} locomo, "
          f"{sum(x.source == 'alert' for x in b)} alert), {len(h)} held-out descriptions")
    for spec in facts(k):
        print(spec.key, "|", spec.text)
    for q in queries(k):
        print("Q:", q)
