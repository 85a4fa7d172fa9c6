"""The retention this host prunes by: ``[retention]`` of the shared memvault.toml, never shortened by it alone.

memvault.toml is shared by everyone who can push. A teammate's ``raw = "1s"`` (a mistake or an attack), pulled
here, made the daily prune timer delete the episodes this host keeps only here (untracked, the default) and take
other clones' folders for idle ones. So this host keeps a record of the ages it has pruned by (``retention.json``
in its state directory, where no commit reaches) and prunes each kind by the longer of the configured age and the
recorded one: a longer retention applies at once, a shorter one waits, named in every prune's warnings, until a
trusted source accepts it (``memvault prune --accept-retention``). A host with no record yet starts from
memvault's defaults, not from what it finds: a clone made after the teammate's push took the "1s" as its own.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..rules.config import RetentionSettings
from ..rules.errors import MemvaultError
from ..rules.fsread import read_regular_if_there
from ..rules.fsutil import atomic_write
from ..rules.timeutil import age_text

RECORD_NAME = "retention.json"


@dataclass(frozen=True)
class InForce:
    """What a prune applies, and why it is not the configuration when it is not."""

    settings: RetentionSettings
    #: kind -> (configured age, age kept to): the shortenings not yet accepted
    held: dict[str, tuple[float, float]]
    warnings: list[str]


def in_force(configured: RetentionSettings, state_dir: Path, *, accept: bool) -> InForce:
    """The retention to prune by: ``configured``, each kind held to this host's recorded age where the configured
    one is shorter, unless ``accept`` (the caller asked a trusted source)."""
    warnings: list[str] = []
    path = state_dir / RECORD_NAME
    try:
        recorded = _read(path)
    except (OSError, ValueError, MemvaultError) as exc:
        recorded = None
        warnings.append(f"{path} cannot be read ({exc}): pruned by [retention] as configured where it is not "
                        "shorter than the defaults, and recorded anew")
    if accept:
        return InForce(configured, {}, warnings)
    if recorded is None:  # never pruned here: memvault's defaults, not a shared file's first word
        recorded = RetentionSettings().ages
    ages: dict[str, float] = {}
    held: dict[str, tuple[float, float]] = {}
    for kind in sorted({*configured.ages, *recorded}):
        want = configured.max_age(kind)
        had = recorded.get(kind, recorded["default"])
        ages[kind] = max(want, had)
        if had > want:
            held[kind] = (want, had)
    if held:
        named = ", ".join(f"{kind} {age_text(want)} (kept to {age_text(had)})" for kind, (want, had) in held.items())
        warnings.append(f"[retention] in memvault.toml is shorter than this host has pruned by (or, before its first "
                        f"prune, memvault's defaults): {named}; a shared "
                        "file alone does not shorten it (see who changed it: git log -p memvault.toml); "
                        "'memvault prune --accept-retention' applies it")
    return InForce(RetentionSettings(ages), held, warnings)


def add_retention(out: dict[str, Any], configured: RetentionSettings, state_dir: Path) -> None:
    """What ``memvault stats`` says of retention: the age each kind is pruned by on this host (``retention``), the
    shortenings that wait for ``--accept-retention`` (``retention_held``), and a summary line when there are any."""
    force = in_force(configured, state_dir, accept=False)
    out["retention"] = {kind: age_text(age) for kind, age in force.settings.ages.items()}
    if force.held:
        out["retention_held"] = {kind: {"configured": age_text(want), "kept_to": age_text(had)}
                                 for kind, (want, had) in force.held.items()}
    out["summary"] += force.warnings


def save(state_dir: Path, ages: dict[str, float]) -> None:
    """Record ``ages`` as what this host prunes by (0600, through the one door)."""
    atomic_write(state_dir / RECORD_NAME, json.dumps({"ages": ages}, sort_keys=True).encode("utf-8"), mode=0o600)


def _read(path: Path) -> dict[str, float] | None:
    data = read_regular_if_there(path)
    if data is None:
        return None
    try:
        ages = json.loads(data)["ages"]
    except (KeyError, TypeError) as exc:
        raise ValueError(f"no ages ({exc})") from None
    if not isinstance(ages, dict) or not all(isinstance(k, str) and isinstance(v, (int, float)) and v >= 0
                                             for k, v in ages.items()) or "default" not in ages:
        raise ValueError("not a record of ages")
    return {k: float(v) for k, v in ages.items()}
