"""What recall's frequency factor counts: the hits recall showed, and ``used`` reports within what the reporter
may read.

A source a scope names counts only memories it may read, and a ref outside its read scope gets the very line a ref
to nothing gets: a report can neither pump another area's ranking nor learn what exists there.
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..rules.errors import InvalidValue, ProcedureError, ProcedureNotFound
from ..rules.freshness import text_hash
from .access import Reader

#: The write gate (memvault.core.gate.WriteGate, which calls in here: not imported back, so no cycle).
WriteGate = Any

#: At most this many memories in one ``used`` report.
MAX_USED = 100


class Counted(list):  # type: ignore[type-arg]
    """The uses that counted (``(kind, id)``), and what the caller should know (``warnings``)."""

    def __init__(self, items: Sequence[tuple[str, str]] = (), warnings: Sequence[str] = ()) -> None:
        super().__init__(items)
        self.warnings = list(warnings)


def record_shown(state: Any, hits: Sequence[Any], exposure_weight: float) -> None:
    """Count each of recall's ``hits`` as shown, by its relevance over its rank times ``exposure_weight``, with the
    hash of its text (an extractor cannot feed a recalled memory back in as new)."""
    state.record_shown({(h.kind, h.id): exposure_weight * h.factors.get("relevance", 0.0) / rank
                        for rank, h in enumerate(hits, 1)}, texts=[(text_hash(h.text), h.kind, h.id) for h in hits])


def used(gate: WriteGate, refs: Sequence[str], *, source: str) -> Counted:
    """Count a use of each memory named (``fact:KEY`` or a bare key, ``procedure:NAME``, ``episode:ID``) that
    exists and ``source`` may read; any other ref is named in ``warnings`` and not counted, and one report holds at
    most :data:`MAX_USED` refs (frequency is a ranking signal, not a counter to pump)."""
    if len(refs) > MAX_USED:
        raise InvalidValue("refs", f"at most {MAX_USED} memories per report, not {len(refs)}")
    reader = Reader(source, gate.scopes.for_source(source), gate.root)
    keys, missing, seen, again = [], [], set(), []
    for ref in refs:
        kind, sep, item = ref.partition(":")
        if not sep:
            kind, item = "fact", ref
        if kind not in ("fact", "episode", "procedure") or not item:
            raise InvalidValue("ref", f"{ref!r} is not kind:id (fact:db/primary, procedure:web/reload, episode:ID)")
        if (kind, item) in seen:  # "db/primary" and "fact:db/primary" are one memory: one use a report
            again.append((kind, item))
            continue
        seen.add((kind, item))
        path = _path(gate, kind, item)
        readable = path is not None and reader.allows(path, gate.root)
        (keys if readable else missing).append((kind, item))
    # The same words for a memory that is not there and one the source may not read.
    why = "no such memory here" if reader.scope is None else "no such memory here within its read scope"
    warnings = [f"{kind}:{item}: {why}: not counted" for kind, item in missing]
    counted = gate.record_use(keys, source=source, warnings=warnings) if keys else []
    warnings += [f"{kind}:{item}: counted once a day for a source [trust] does not trust, already today: not counted "
                 "again" for kind, item in keys if (kind, item) not in counted]
    warnings += [f"{kind}:{item}: named more than once in this report: taken once" for kind, item in
                 dict.fromkeys(again)]
    return Counted(counted, warnings)


def _path(gate: WriteGate, kind: str, item: str) -> Path | None:
    """Where the memory lives, or None when there is none."""
    try:
        if kind == "fact":
            return gate.facts.path_for(item) if gate.facts.exists(item) else None
        if kind == "procedure":
            return gate.procedures.path_of(item)
    except (ProcedureNotFound, ProcedureError, InvalidValue):
        return None
    return gate.episodes.path_of(item)
