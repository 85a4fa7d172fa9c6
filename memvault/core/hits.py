"""What recall returns: a :class:`Hit` per memory, whole, and the :class:`RecallResult` list around them."""
from __future__ import annotations

import re

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any


def against(value: float, floor: float, *, percent: bool = False) -> str:
    """``value`` beside the ``floor`` it was compared with, in as many digits as it takes for the printed figures
    to show which side it is on ("cosine 0.3879 (floor 0.388)", never "0.39 (floor 0.388)")."""
    scale, unit = (100.0, "%") if percent else (1.0, "")
    for digits in range(2 if not percent else 0, 7):
        a, b = f"{value * scale:.{digits}f}", f"{floor * scale:.{digits}f}"
        if (float(a) < float(b)) == (value < floor) and (a != b or value == floor):
            return f"{a}{unit} (floor {b}{unit})"
    return f"{value * scale!r}{unit} (floor {floor * scale!r}{unit})"


@dataclass
class Hit:
    """One recalled memory, whole. ``factors`` are the five inputs of ``score``, each in 0..1."""

    kind: str
    id: str
    text: str
    score: float
    factors: dict[str, float]
    source: str | None
    created: str | None
    updated: str | None
    path: str
    commit: str | None = None
    blob: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    #: What relevance was made of (``keyword``, ``semantic`` cosine, ``exact``): shown by explaining interfaces,
    #: not part of the JSON answer.
    parts: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "kind": self.kind,
            "id": self.id,
            "text": self.text,
            "score": round(self.score, 6),
            "factors": {k: round(v, 6) for k, v in self.factors.items()},
            "source": self.source,
            "created": self.created,
            "updated": self.updated,
            "path": self.path,
        }
        if self.kind == "procedure":
            out["commit"] = self.commit
            out["blob"] = self.blob
        out.update(self.extra)
        return out

    def explain(self) -> dict[str, Any]:
        """What ranked this hit, as ``--explain`` and the web playground show it: the five factors (as in
        :meth:`to_dict`) and what relevance was made of: ``keyword`` (BM25 ÷ best), ``semantic`` (cosine ÷ best
        cosine, the figure relevance used), the raw ``cosine``, ``exact`` (quotes the query), ``time``: the share
        of its relevance a time the question names left it (1: of that time; see ``[recall] time_weight``), and
        ``feedback``: a runbook's cosine is with the query moved toward the best runbooks found
        (``[recall] procedure_feedback_weight``), and ``general``: the cosine a fact lost for being close to the
        other facts found (below 0: gained for standing apart; ``[recall] generality_weight``), and ``rest``: the
        cosine with the question less its subject (None when not read: a runbook, no subject, ``[recall]
        rest_weight`` 0), so ``semantic`` is ``((1 − w)·cosine + w·rest − general) ÷ best``, ``w`` the rest
        weight."""
        parts = self.parts
        return {"factors": {k: round(v, 6) for k, v in self.factors.items()},
                "parts": {"keyword": round(float(parts.get("keyword", 0.0)), 6),
                          "semantic": round(float(parts.get("semantic", 0.0)), 6),
                          "cosine": round(float(parts.get("cosine", 0.0)), 6),
                          "exact": bool(parts.get("exact", False)),
                          "time": round(float(parts.get("time", 1.0)), 6),
                          "feedback": bool(parts.get("feedback", False)),
                          "general": round(float(parts.get("general", 0.0)), 6),
                          "rest": None if parts.get("rest") is None else round(float(parts["rest"]), 6)}}


class RecallResult(list):  # type: ignore[type-arg]
    """The hits, best first, plus what the caller should know (``warnings``) and how they were found."""

    def __init__(self, hits: Sequence[Hit] = (), *, mode: str = "hybrid", warnings: Sequence[str] = ()) -> None:
        super().__init__(hits)
        self.mode = mode
        self.warnings = list(warnings)
        #: Why there are no hits, when nothing cleared the relevance floor (None otherwise).
        self.nothing_found: str | None = None
        #: The time window the query named (``since``, ``until``, the words), or None.
        self.window: dict[str, Any] | None = None
        #: What the token budget left out (``dropped``, ``best_dropped``, ``best_dropped_tokens``), or None.
        self.budget: dict[str, Any] | None = None
        #: Every hit before the token budget trimmed them (None: no budget applied), so a warning added later can
        #: be made room for (:func:`memvault.core.render.fit_budget` runs again); not part of the JSON answer.
        self.unbudgeted: list[Hit] | None = None
        #: The warning and nothing-found line the last fit to the budget added (taken back when it runs again).
        self.budget_said: tuple[str | None, str | None] = (None, None)
        #: How the last fit measured the answer (budget, format, explain, weights), for
        #: :func:`memvault.core.render.refit`; None when no budget applied.
        self.fitted: tuple[int, str, bool, dict[str, float] | None] | None = None
        #: What the "nothing known" test read (``semantic``, ``by_kind``, ``coverage``, ``unknown_names``,
        #: ``penalty``), or None when it did not run (keyword-only, ``min_relevance=0``, no candidates).
        self.evidence: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        """The whole answer as JSON: the hits and what to know about them."""
        return {"hits": [h.to_dict() for h in self], "mode": self.mode, "warnings": list(self.warnings),
                "nothing_found": self.nothing_found, "window": self.window, "budget": self.budget}


def count_tokens(text: str) -> int:
    """Tokens as an LLM will see them, estimated: ⌈ASCII characters / 4⌉ (BPE tokenizers average about four
    characters per token on English text and code) plus one per other character (a CJK character is a token or
    more to every tokenizer; counted at a quarter, Chinese text took 2.8× its count in MiniLM's tokenizer's
    tokens). Cheap, deterministic, and needs no tokenizer download."""
    return -(-token_units(text) // 4)


def token_units(text: str) -> int:
    """:func:`count_tokens` in quarter tokens, before rounding: an ASCII character 1, any other 4. Additive, so a
    budget can be fitted piece by piece and rounded once."""
    return len(text) + 3 * (len(text) - len(text.encode("ascii", "ignore")))


RUN_LINE = re.compile(r"\((exit (-?\d+)|killed by signal (\d+)), ([\d.]+) s\)")


def run_summary(run: dict[str, Any]) -> dict[str, Any]:
    """when, exit code, version of one run, from its episode."""
    meta = run.get("meta") or {}
    exit_code = meta.get("exit_code")
    if exit_code is None:
        m = RUN_LINE.search(run.get("text", ""))
        exit_code = int(m.group(2)) if m and m.group(2) else (-int(m.group(3)) if m and m.group(3) else None)
    return {"episode": run["id"], "at": run["created"], "exit_code": exit_code, "commit": meta.get("commit"),
            "dirty": meta.get("dirty", False)}
