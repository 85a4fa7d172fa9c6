"""How close is close, for this model and this vault: the scale recall's "nothing known" test reads cosines on.

A cosine means nothing by itself. all-MiniLM-L6-v2 gives an unrelated question and a short fact 0.1-0.2 and a
paraphrase 0.4-0.8; bge-small gives unrelated pairs 0.5 and more; a vault of long runbooks scores every short
question lower than a vault of one-line facts. So no cosine constant is kept in the code. Instead, for each kind
of memory (fact, episode, procedure) the index holds a **calibration**, measured on this vault with this model:

- ``null``: the median best cosine that questions about *nothing in any vault* (:data:`PROBES`: geography,
  cooking, sport, trivia) get among this kind's vectors: what "unrelated" scores here;
- ``ref``: the median best cosine that short pieces of the vault's own text (:data:`FRAGMENT_WORDS` consecutive
  words of a sample of its chunks, asked as queries) get: what "about a memory of this vault" scores here.

A candidate's **semantic evidence** is where its cosine falls on that scale, ``(cosine - null) / (ref - null)``:
0 for what an unrelated question gets, 1 for what a piece of a memory gets. Recall compares evidence, not
cosines, with ``[recall] min_evidence`` (see :mod:`memvault.core.recall`).

The calibration is stored in the index (its ``meta_get``/``meta_set``, declared with everything else calibration
reads in :class:`memvault.index.protocol.SearchIndex`, beside the model identity), measured by the reindex that
builds an index (a rebuild, a model change), again when the index has grown by a quarter since (at a reindex or a
recall), and by the first recall of an index that has none. It costs an embedding of the vault's pieces (the
probes' vectors are kept per model) and one vector search per text; nothing at later recalls.
"""
from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..index.protocol import SearchIndex

#: Bumped when what is measured changes: a stored calibration of another version is measured again.
VERSION = 1
META_KEY = "calibration"
#: Words per piece of the vault's own text asked as a query (about a short question's length).
FRAGMENT_WORDS = 6
#: Chunks of each kind whose pieces are asked.
FRAGMENTS = 32
#: A kind is measured again when its newest chunk id has grown past this share of the one it was measured at.
GROWTH = 1.25
#: The smallest spread ``ref - null`` used (a vault of one memory, or a degenerate model, must not divide by 0).
MIN_SPREAD = 0.05
#: A kind with fewer chunks than this is read on the scale of all kinds together (a median of three is noise).
MIN_CHUNKS = 8
FRAGMENTS_KEY = "calibration:fragments"
PROBES_KEY = "calibration:probes"
#: A memory "near" a piece of another one is among that piece's NEIGHBOURS closest other memories.
NEIGHBOURS = 3

#: Questions about nothing any vault of an ops team, a project or a person's notes is likely to hold. Only their
#: number and variety matter: the median of their best scores is the "unrelated" level (a few that happen to hit
#: a vault's topic do not move a median). Written once; not chosen by any score.
PROBES: tuple[str, ...] = (
    "what is the capital of France", "who wrote the novel War and Peace",
    "how many bones are in the adult human body", "what is the boiling point of water at sea level",
    "recipe for a chocolate cake", "how long should I boil an egg", "who won the football world cup in 2018",
    "what are the rules of cricket", "when did the Roman empire fall", "who painted the Mona Lisa",
    "what is the tallest mountain in Africa", "how do bees make honey", "what is photosynthesis",
    "how far is the moon from the earth", "what language is spoken in Brazil", "best time of year to plant tomatoes",
    "how do I train a puppy to sit", "what is the plot of Hamlet", "who invented the telephone",
    "what is the population of Tokyo", "how to knit a scarf for beginners", "what causes thunderstorms",
    "what is the difference between a violin and a viola", "which planet has the most moons",
    "how many calories are in a banana", "what is the speed of light", "symptoms of the common cold",
    "how do I make sourdough bread", "who was the first person to walk on the moon",
    "what is the largest ocean on earth", "how do volcanoes form", "what does a sommelier do",
    "the history of the Olympic games", "how to fold a paper airplane", "what is the chemical formula of table salt",
    "famous paintings by Vincent van Gogh", "how do tides work", "what is the square root of 144",
    "how to care for a cactus", "why is the sky blue", "what do pandas eat", "when was the printing press invented",
    "how to play a G major chord on guitar", "what is the currency of Japan", "who composed the Four Seasons",
    "how deep is the Mariana Trench", "what is a haiku", "rules for playing chess", "how do airplanes stay in the air",
    "what is the longest river in South America", "how to remove a red wine stain from a carpet",
    "what is the meaning of the word serendipity", "which country has the most islands",
    "how long do elephants live", "what is the theory of relativity", "how to make a paper lantern",
    "who is the author of Pride and Prejudice", "how to tie a bowline knot", "what is a black hole",
    "recommended books for learning Spanish", "how many players are on a basketball team",
    "what was the Renaissance", "how do you pronounce croissant", "what is the main ingredient of guacamole",
)

_WORDS = re.compile(r"\S+")
#: The scale of all kinds together (used for a kind with fewer than MIN_CHUNKS chunks).
ALL = "*"


@dataclass(frozen=True)
class KindScale:
    """The scale of one kind: the median best cosine of unrelated questions and of pieces of its own text."""

    null: float
    ref: float
    chunks: int  # how many of its chunks had vectors when measured

    def evidence(self, cosine: float) -> float:
        """Where ``cosine`` falls between unrelated (0) and a piece of a memory of this kind (1)."""
        return (cosine - self.null) / max(self.ref - self.null, MIN_SPREAD)


@dataclass(frozen=True)
class Calibration:
    """The scales of every kind that has vectors, for one model (its identity) and one state of the vault."""

    model: dict[str, Any]
    kinds: dict[str, KindScale]
    marker: int  # the index's newest chunk id when measured
    version: int = VERSION

    def to_json(self) -> str:
        return json.dumps({"version": self.version, "model": self.model, "marker": self.marker,
                           "kinds": {k: asdict(v) for k, v in self.kinds.items()}}, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Calibration | None:
        """The stored calibration, or None when it is unreadable or of another version (then it is measured)."""
        try:
            data = json.loads(text)
            if data.get("version") != VERSION:
                return None
            kinds = {k: KindScale(float(v["null"]), float(v["ref"]), int(v["chunks"]))
                     for k, v in data["kinds"].items()}
            return cls(dict(data["model"]), kinds, int(data["marker"]))
        except (ValueError, KeyError, TypeError, AttributeError):
            return None

    def evidence(self, kind: str, cosine: float) -> float | None:
        """``cosine`` on the scale of ``kind`` (of all kinds together when that kind has too few chunks)."""
        scale = self.kinds.get(kind)
        if scale is None or scale.chunks < MIN_CHUNKS:
            scale = self.kinds.get(ALL, scale)
        return None if scale is None else scale.evidence(cosine)


@dataclass(frozen=True)
class Fragments:
    """The pieces of the vault's own text the scale was measured with: their vectors, the memory each was cut
    from, and the cosine of the closest *other* memory to each. A memory that comes closer to the pieces of many
    other memories than their own neighbours do "matches every question" (see :meth:`share`)."""

    vectors: Any  # (n, dims) float32
    sources: list[str]  # "kind:id" of the memory each piece was cut from
    thresholds: list[float]  # the cosine of the NEIGHBOURS-th closest other memory to each piece
    nearest: list[list[str]]  # the NEIGHBOURS closest other memories

    def share(self, key: str, vectors: Sequence[Any]) -> tuple[float, float]:
        """The share of the other memories' pieces that have ``key`` among their NEIGHBOURS closest other
        memories, or to which one of ``vectors`` (its chunks; a memory written since) is at least as close as the
        NEIGHBOURS-th of them; and the share a memory would have by chance (NEIGHBOURS in the others)."""
        import numpy as np

        if not len(vectors):
            return 0.0, 1.0
        sims = (self.vectors @ np.asarray(np.stack(vectors), dtype=np.float32).T).max(axis=1)
        mine = [i for i, s in enumerate(self.sources) if s != key]
        others = len(set(self.sources) - {key})
        if not mine or others < 1:
            return 0.0, 1.0
        count = sum(1 for i in mine if key in self.nearest[i] or sims[i] >= self.thresholds[i] - 1e-6)
        return count / len(mine), min(1.0, NEIGHBOURS / others)

    def to_json(self) -> str:
        import base64

        import numpy as np

        blob = base64.b64encode(np.asarray(self.vectors, dtype=np.float16).tobytes()).decode()
        return json.dumps({"version": VERSION, "dims": int(self.vectors.shape[1]), "vectors": blob,
                           "sources": self.sources, "thresholds": [round(t, 4) for t in self.thresholds],
                           "nearest": self.nearest})

    @classmethod
    def from_json(cls, text: str) -> Fragments | None:
        import base64

        import numpy as np

        try:
            data = json.loads(text)
            if data.get("version") != VERSION:
                return None
            vectors = np.frombuffer(base64.b64decode(data["vectors"]), dtype=np.float16).astype(np.float32)
            vectors = vectors.reshape(-1, int(data["dims"]))
            if not len(vectors) == len(data["sources"]) == len(data["thresholds"]) == len(data["nearest"]):
                return None
            return cls(vectors, list(data["sources"]), [float(t) for t in data["thresholds"]],
                       [list(n) for n in data["nearest"]])
        except (ValueError, KeyError, TypeError, AttributeError):
            return None


def piece(text: str, words: int = FRAGMENT_WORDS) -> str:
    """``words`` consecutive words from the middle of ``text`` (the whole text when shorter; "" for no words)."""
    found = _WORDS.findall(text)
    start = max(0, (len(found) - words) // 2)
    return " ".join(found[start:start + words])


def _median(values: list[float]) -> float:
    values = sorted(values)
    n = len(values)
    return (values[(n - 1) // 2] + values[n // 2]) / 2 if n else 0.0


def measure(index: SearchIndex, embedder: Any, kinds: Sequence[str]) -> tuple[Calibration, Fragments | None]:
    """Measure the scale of each of ``kinds`` that has vectors in ``index`` (see the module doc), and of all of
    them together; and keep the pieces of text it was measured with (see :class:`Fragments`)."""
    import numpy as np

    prefix = embedder.identity.query_prefix
    samples: dict[str, tuple[list[str], list[str]]] = {}
    for kind in kinds:
        found = [(key, cut) for key, text in index.sample_chunks(kind, FRAGMENTS) if (cut := piece(text))]
        if found:
            samples[kind] = ([k for k, _ in found], [p for _, p in found])
    pieces = [p for _, ps in samples.values() for p in ps]
    sources = [k for ks, _ in samples.values() for k in ks]
    if not pieces:
        return Calibration(embedder.identity.to_dict(), {}, index.last_chunk_id()), None
    # Asked as queries (with the model's query prefix), in one batch; the probes' vectors depend on the model
    # only and are kept in the index for the next measurement.
    probes = _probe_vectors(index, embedder)
    own = np.asarray(embedder.embed_documents([prefix + t for t in pieces]), dtype=np.float32)
    scales: dict[str, KindScale] = {}
    at = 0
    for kind, (_keys, texts) in samples.items():
        null = [_best(index, v, [kind]) for v in probes]
        ref = [_best(index, v, [kind]) for v in own[at:at + len(texts)]]
        at += len(texts)
        scales[kind] = KindScale(round(_median(null), 4), round(_median(ref), 4), len(texts))
    null = [_best(index, v, kinds) for v in probes]
    ref, thresholds, nearest = [], [], []
    for vector, source in zip(own, sources):
        best, other, key = _best_and_other(index, vector, kinds, source)
        ref.append(best)
        thresholds.append(other)
        nearest.append(key)
    scales[ALL] = KindScale(round(_median(null), 4), round(_median(ref), 4), len(pieces))
    return (Calibration(embedder.identity.to_dict(), scales, index.last_chunk_id()),
            Fragments(own, sources, thresholds, nearest))


def _probe_vectors(index: SearchIndex, embedder: Any) -> Any:
    """The vectors of :data:`PROBES` for this model: from the index when it kept them, else embedded and kept."""
    import base64

    import numpy as np

    identity = embedder.identity.to_dict()
    try:
        kept = json.loads(index.meta_get(PROBES_KEY) or "{}")
        if _same_model(kept.get("model", {}), embedder.identity) and kept.get("probes") == len(PROBES) \
                and kept.get("version") == VERSION:
            vectors = np.frombuffer(base64.b64decode(kept["vectors"]), dtype=np.float32)
            return vectors.reshape(len(PROBES), -1)
    except (ValueError, KeyError, TypeError, AttributeError):
        pass
    vectors = np.asarray(embedder.embed_documents([identity["query_prefix"] + t for t in PROBES]), dtype=np.float32)
    index.meta_set(PROBES_KEY, json.dumps({"version": VERSION, "model": identity, "probes": len(PROBES),
                                           "vectors": base64.b64encode(vectors.tobytes()).decode()}))
    return vectors


def _best_and_other(index: SearchIndex, vector: Any, kinds: Sequence[str],
                    source: str) -> tuple[float, float, list[str]]:
    """The best cosine of a piece anywhere; the NEIGHBOURS closest memories other than the one it was cut from,
    and the cosine of the last of them (their best chunk)."""
    found = index.search_vectors(vector, kinds, 8 * NEIGHBOURS)
    docs = index.chunk_docs([r for r, _ in found])
    best = float(found[0][1]) if found else 0.0
    others: dict[str, float] = {}
    for rowid, cosine in found:
        doc = docs.get(rowid)
        key = f"{doc['kind']}:{doc['id']}" if doc is not None else None
        if key is not None and key != source and key not in others:
            others[key] = float(cosine)
            if len(others) == NEIGHBOURS:
                break
    if len(others) < NEIGHBOURS:
        return best, 1.0, list(others)  # too few other memories: nothing new can come that close
    return best, min(others.values()), list(others)


def _best(index: SearchIndex, vector: Any, kinds: Sequence[str]) -> float:
    found = index.search_vectors(vector, list(kinds), 1)
    return float(found[0][1]) if found else 0.0


def stored(index: SearchIndex) -> Calibration | None:
    text = index.meta_get(META_KEY)
    return Calibration.from_json(text) if text else None


def current(index: SearchIndex, embedder: Any, kinds: Sequence[str], *, remeasure: bool = False) -> Calibration:
    """The calibration for ``embedder``'s model on this index: the stored one while it is of this model and the
    vault has not grown by a quarter since, else measured now and stored."""
    found = None if remeasure else stored(index)
    if found is not None and _same_model(found.model, embedder.identity) and \
            index.last_chunk_id() <= GROWTH * found.marker + 16:
        return found
    calibration, pieces = measure(index, embedder, kinds)
    index.meta_set(FRAGMENTS_KEY, pieces.to_json() if pieces is not None else "")
    index.meta_set(META_KEY, calibration.to_json())
    return calibration


def stored_fragments(index: SearchIndex) -> Fragments | None:
    text = index.meta_get(FRAGMENTS_KEY)
    return Fragments.from_json(text) if text else None


def _same_model(stored_model: dict[str, Any], identity: Any) -> bool:
    mine = identity.to_dict()
    return all(stored_model.get(k) == mine.get(k) for k in ("name", "revision", "dims", "query_prefix"))
