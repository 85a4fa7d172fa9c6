"""The episodes that record runbook runs: a run's own, when it returns (:func:`run_episode`), and one for each run
whose memvault was killed (SIGKILL, an out-of-memory kill, the machine stopped) before it could record it.

A run keeps a record beside its private copy while its script runs (:meth:`ProcedureStore.execute
<memvault.stores.procedures.ProcedureStore.execute>`); the next ``proc run`` finds the records whose process is
gone and appends one ``procedure_run`` episode for each: "interrupted: memvault was killed", with the name, the
commit and blob that ran, the arguments (redacted) and when it started. Exactly once: sweeps of one host take
a lock, and the episode's id, chosen when the run started, is looked for before it is appended (a sweep killed
between its append and the record's removal is not repeated by the next one).
"""
from __future__ import annotations

import signal
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from ..rules.errors import MemvaultError, UntrustedSource
from ..rules.fsutil import ensure_dir, locked, remove
from ..rules.redaction import redact_args
from ..rules.timeutil import format_time
from ..stores.episodes import new_id
from ..stores.procedures import RUN_KIND, Procedure, RunOutcome, dead_runs

#: ``meta.interrupted`` of a run recorded by a later sweep.
KILLED = "memvault killed"


def refuse_forged_run(kind: str, source: str, *, trusted: bool) -> None:
    """UntrustedSource for a ``procedure_run`` episode written by hand by a source that is not ``trusted``: recall
    and the web view show it as the runbook's run, with the exit code and commit it claims (a run's own record,
    and a trusted caller's restore of one, pass ``trusted``)."""
    if kind == RUN_KIND and not trusted:
        raise UntrustedSource(source, f"a {RUN_KIND} episode is recorded by the run itself ('memvault proc run'); "
                                      "only a trusted source writes one by hand")


def run_episode(proc: Procedure, outcome: RunOutcome) -> tuple[str, dict[str, Any]]:
    """The text and meta of the episode that records ``outcome``: the commit and blob that ran, the arguments
    redacted one by one and as a command line (``--password <pw>``), how it ended."""
    code = outcome.exit_code
    status = f"exit {code}" if code >= 0 else f"killed by signal {-code}"
    stopped = signal.Signals(outcome.interrupted).name if outcome.interrupted is not None else None
    text = (f"ran procedure {proc.name} ({status}, {outcome.duration_ms / 1000:.1f} s)"
            + (f", interrupted by {stopped}" if stopped else "")
            + (", interrupted: its caller cancelled it" if outcome.cancelled else "")
            + (" from a dirty working copy" if proc.dirty else ""))
    meta = {"name": proc.name, "commit": proc.commit, "blob": proc.blob, "args": redact_args(outcome.args),
            "exit_code": code, "duration_ms": outcome.duration_ms, "dirty": proc.dirty,
            **({"interrupted": stopped} if stopped else {}), **({"cancelled": True} if outcome.cancelled else {})}
    return text, meta


def run_record(proc: Procedure, args: Sequence[str], source: str, started: datetime) -> dict[str, Any]:
    """What a run keeps on disk while its script runs: the episode a sweep would append, id included."""
    return {"id": new_id(started), "started_at": format_time(started), "source": source, "name": proc.name,
            "commit": proc.commit, "blob": proc.blob, "args": redact_args(list(args)), "dirty": proc.dirty,
            "tags": list(proc.tags)}


def record_dead_runs(scratch: Path, *, has: Callable[[str], bool], append: Callable[..., Any]) -> list[str]:
    """Append (with ``append``, the gate's ``append_episode``: every check of a write, as a run's own record) an
    episode for each run in ``scratch`` whose memvault is gone, unless ``has`` its id already, and drop its record;
    what the caller should be told (a record that could not be read or recorded). Cheap when there is none: one
    directory listing."""
    if not dead_runs(scratch):
        return []
    warnings: list[str] = []
    with locked(ensure_dir(scratch, mode=0o700) / "sweep.lock"):
        for path, record in dead_runs(scratch):  # again, under the lock: another sweep may have taken some
            try:
                if record is None:
                    raise MemvaultError("not a run record")
                if not has(str(record.get("id"))):
                    _append(append, record)
            except MemvaultError as exc:
                warnings.append(f"an interrupted run left {path.name}, not recorded: {exc}")
            except OSError as exc:  # kept for the next sweep (a full disk, say)
                warnings.append(f"an interrupted run is not recorded yet: {exc.strerror or exc}")
                continue
            remove(path)
    return warnings


def _append(append: Callable[..., Any], record: dict[str, Any]) -> None:
    name, started, dirty = record.get("name"), record.get("started_at"), record.get("dirty") is True
    append(
        f"ran procedure {name} (interrupted: memvault was killed; started {started})"
        + (" from a dirty working copy" if dirty else ""),
        source=str(record.get("source")), kind=RUN_KIND, run=True, at=started, id=str(record.get("id")),
        tags=record.get("tags") if isinstance(record.get("tags"), list) else [],
        meta={"name": name, "commit": record.get("commit"), "blob": record.get("blob"), "args": record.get("args"),
              "dirty": dirty, "interrupted": KILLED, "started_at": started})
