"""The one "sync the index, then embed" routine: writes, ``reindex``, ``sync`` and the watcher all call it.

Phase 1 (text, so keyword recall sees a change at once) then phase 2 (vectors), with the model the caller can
afford: a write takes a warm model if one is at hand and leaves the rest pending (the next recall embeds a share,
``reindex`` the rest); the watcher and ``reindex`` get the model; ``reindex`` also rebuilds the index beside the old
one when the model it holds is not the one configured. Whichever backend holds the index (see
:mod:`memvault.index.protocol`): for a team, publishing what was pushed comes first (``publish``).
"""
from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..index.update import SyncReport
from ..rules.errors import ModelUnavailable, describe

if TYPE_CHECKING:
    from ..index.changes import Marks
    from ..index.protocol import Progress, VaultIndex
    from ..models.engine import Engine
    from ..rules.config import Config


def catch_up(index: VaultIndex, engine: Engine, config: Config, *, paths: Sequence[Path] | None = None,
             marks: Marks | None = None, load: bool = False, rebuild: bool = False, full: bool = False, publish: bool = False,
             limit: int | None = None, progress: Progress | None = None, batch: bool = False) -> SyncReport:
    """Bring ``index`` in step with the files (all of them, or only ``paths``), then embed.

    - ``marks``: what a file watcher marked changed, instead of ``paths`` (see :mod:`memvault.index.changes`).
    - ``load``: get the model (start the warm daemon or load it) when there is anything to embed, and wait for a
      process that is embedding; without it, only a model already at hand embeds, at most ``limit`` chunks.
    - ``rebuild``: build the index again beside the old one when it holds vectors of another model than the one
      configured or loaded (or ``full``), as ``reindex`` does.
    - ``batch``: a large batch (a rebuild, much pending) may load the model in this process rather than go through
      the warm process (:meth:`~memvault.models.engine.Engine.for_batch`): ``reindex``, a one-shot command.
    - ``publish``: first share what this host has pushed (a team's shared index; a local index has nobody to
      share with). Raises when the shared index cannot be reached: nothing was published.

    A model that cannot be had leaves vectors pending, with a warning: never an error. The report's ``seconds`` is
    the whole call's time: the reports merged here each timed only their own part (a text sync, a rebuild) and
    the embedding none, so an incremental reindex that embedded said 0.0 s.
    """
    started = time.perf_counter()
    report = _catch_up(index, engine, config, paths=paths, marks=marks, load=load, rebuild=rebuild, full=full,
                       publish=publish, limit=limit, progress=progress, batch=batch)
    report.seconds = time.perf_counter() - started
    return report


def _catch_up(index: VaultIndex, engine: Engine, config: Config, *, paths: Sequence[Path] | None,
              marks: Marks | None, load: bool, rebuild: bool, full: bool, publish: bool, limit: int | None,
              progress: Progress | None, batch: bool) -> SyncReport:
    if rebuild:
        identity = index.identity() if index.exists() else None
        if full or identity is None or not config.wants_model(identity):
            def model() -> Any:
                return engine.for_batch(lambda: _texts(index)) if batch else engine.get()

            if identity is None:
                return index.rebuild(model, progress=progress)
            # The vectors there are never traded for none: a model named by hand that this host cannot load left a
            # keyword-only index in place of six months of embedding, and going back cost all of it again.
            try:
                embedder = model()
            except ModelUnavailable as exc:
                report = index.sync(paths)
                report.warnings.append(f"{describe(exc)[0]}; the index of {identity.name} is kept (keyword-only "
                                       f"recall until {config.model} loads, or set the model back to {identity.name})")
                return report
            return index.rebuild(lambda: embedder, progress=progress)
    splitter = engine.warm() if load else engine.loaded()
    report = index.publish(splitter=splitter) if publish else SyncReport()
    if marks is not None:
        report.merge(index.apply(marks, splitter=splitter) or SyncReport(files_seen=len(marks.files)))
    else:
        report.merge(index.sync(paths, splitter=splitter))
    if not load:
        embedder = engine.warm()
        if embedder is not None:
            index.embed(embedder, limit=limit, report=report)
        return report
    identity = index.identity()
    loaded = engine.loaded()
    if rebuild and loaded is not None and identity is not None and not loaded.identity.same_vectors(identity):
        return report.merge(index.rebuild(lambda: loaded, progress=progress))  # same name, other weights or prefix
    if not index.pending():
        return report
    try:
        embedder = engine.for_batch(index.pending) if batch else engine.get()
    except Exception as exc:  # noqa: BLE001 - ModelUnavailable and daemon failures alike
        report.warnings.append(f"{describe(exc)[0]}; indexed for keyword search only, vectors pending")
        return report
    if rebuild and identity is not None and not embedder.identity.same_vectors(identity):
        return report.merge(index.rebuild(lambda: embedder, progress=progress))
    index.embed(embedder, limit=limit, progress=progress, report=report, wait=True)
    report.model_loaded = True
    return report


def _texts(index: VaultIndex) -> int:
    """About how many texts a rebuild embeds, from a walk of the vault (``stat`` only): a fact or procedure file is
    one, an episode file one per ~200 bytes (a line)."""
    return sum(size // 200 if kind == "episode" else 1 for kind, size, _, _ in index.scan().values())
