"""The write gate: the one path every mutation of a vault takes, whatever the interface.

Each operation (a fact set, an edit, a delete, accept/reject, an episode, a procedure added or run, prune, purge,
dedup, expire, verify, a model change) goes through the same steps, in this order:

1. **Trust**: the caller's source may do this (:mod:`memvault.rules.trust`); an untrusted fact write becomes a proposal.
2. **Validation**: the store plans the change and validates every field before anything is written.
3. **Secrets**: the exact bytes to be committed are checked by the function the pre-commit hook runs
   (:func:`memvault.stores.checks.check_file`), every field included; ``--allow-secret`` is itself a trusted operation.
4. **Apply and commit**: all files written atomically, then one commit of exactly those paths; if the commit is
   refused (a hook, a broken repository) every file and the git index are put back as they were
   (:meth:`WriteGate.apply`). Proposals are not committed unless ``[trust] share_inbox``.
5. **Index**: the index is told which files changed (phase 1 at once, so keyword recall sees the change; vectors
   now only if a warm model is at hand, else at the next recall or reindex). An index problem never undoes a
   committed write: it becomes a warning.

The stores plan, this module applies; nothing here is called back by the stores or the index.
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from ..stores.checks import check_file, episode_secrets
from ..rules.config import CONFIG_NAME, Config
from ..rules.dedup import compare_keywords, keywords
from ..stores.episodes import Episode, EpisodeLog, RewriteReport
from ..rules.errors import MemvaultError, SecretRefused, UnsafePath, UntrustedSource
from ..stores.facts import Fact, FactStore
from ..rules.fsutil import FileChange, atomic_write, locked
from ..stores.gitstore import GitStore
from ..stores.procedures import Procedure, ProcedureStore, RunResult
from ..rules.secrets import describe, find_secrets
from ..rules.timeutil import now
from ..rules.trust import Op, Policy
from ..rules.validation import validate_source

if TYPE_CHECKING:
    from ..models.engine import Engine
    from ..index import Index
    from ..stores.state import State

INBOX_IGNORE = (b"# memvault: proposals from untrusted sources stay local until accepted\n"
                b"# ([trust] share_inbox = true commits them)\n*\n")
#: Cap on the facts read from files for the duplicate check when there is no index to ask.
DEDUP_FALLBACK_MAX = 1000


@dataclass
class Written:
    """What a write did: the commit (None when nothing was committed) and what the caller should know."""

    commit: str | None = None
    warnings: list[str] = field(default_factory=list)


class WriteGate:
    """Applies every mutation of one vault (see the module doc). Built by :class:`memvault.core.vault.Vault`."""

    def __init__(self, *, root: Path, config: Config, git: Callable[[], GitStore | None], facts: FactStore,
                 episodes: EpisodeLog,
                 procedures: ProcedureStore, index: Index, state: Callable[[], State], engine: Engine,
                 lock_path: Path, clock: Callable[[], datetime] = now,
                 shared: Callable[[], Any] | None = None) -> None:
        self.root = root
        self.config = config
        self.policy = Policy(config.trust.trusted)
        self._git = git
        self.facts = facts
        self.episodes = episodes
        self.procedures = procedures
        self.index = index
        self._state = state
        self.engine = engine
        self.lock_path = lock_path
        self.clock = clock
        #: A team's shared index (None: this host's index holds every fact): duplicates are looked for there too.
        self._shared = shared or (lambda: None)

    @property
    def git(self) -> GitStore | None:
        return self._git()

    # -- the steps ---------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        """Serialises writers of facts, proposals and procedures (read-modify-write, then commit) across processes."""
        with locked(self.lock_path):
            yield

    def require(self, op: Op, source: str) -> str:
        validate_source(source)
        self.policy.require(op, source)
        return source

    def check_secrets(self, changes: Sequence[FileChange], *, what: str, allow_secret: bool, source: str) -> None:
        """Refuse bytes the pre-commit hook would refuse for a secret (same function), unless ``allow_secret``."""
        if allow_secret:
            self.require(Op.ALLOW_SECRET, source)
            return
        for change in changes:
            if change.after is None:
                continue
            rel = change.path.relative_to(self.root).as_posix()
            area, _, inner = rel.partition("/")
            problems = [p for p in check_file(area, inner, change.after) if p.reason.startswith("looks like a secret")]
            if problems:
                raise SecretRefused(what, "; ".join(p.reason for p in problems))

    def apply(self, changes: Sequence[FileChange], *, message: str, source: str, key: str | None = None,
              commit: bool | Callable[[Path], bool] = True, modes: dict[Path, int] | None = None) -> str | None:
        """Write every change atomically, then commit exactly those paths (those ``commit`` selects) as
        ``source``. When anything fails (a refused commit above all), every file is put back as it was, and the
        git index with it (GitStore): all or nothing."""
        done: list[FileChange] = []
        try:
            for change in changes:
                if not change.changed:
                    continue
                if change.after is None:
                    with contextlib.suppress(FileNotFoundError):
                        change.path.unlink()
                    _prune_empty_dirs(change.path.parent, self.root)
                else:
                    atomic_write(change.path, change.after, mode=(modes or {}).get(change.path))
                done.append(change)
            paths = [c.path for c in done if (commit(c.path) if callable(commit) else commit)]
            if not paths:
                return None
            return self._commit(paths, message, source=source, key=key)
        except BaseException:
            self._restore(done)
            raise

    def _restore(self, done: list[FileChange]) -> None:
        for change in reversed(done):
            with contextlib.suppress(OSError):
                if change.before is None:
                    change.path.unlink(missing_ok=True)
                    _prune_empty_dirs(change.path.parent, self.root)
                else:
                    atomic_write(change.path, change.before)

    def _commit(self, paths: list[Path], message: str, *, source: str, key: str | None) -> str | None:
        """Commit ``paths`` (and nothing else) with the key and source as trailers and the source as author."""
        if not self.config.autocommit or self.git is None:
            return None
        trailers = {}
        if key:
            trailers["Memvault-Key"] = key
        trailers["Memvault-Source"] = source
        return self.git.commit(paths, f"{message} ({source})", author=source, trailers=trailers)

    def tell_index(self, paths: Sequence[Path], warnings: list[str]) -> None:
        """Phase 1 for ``paths`` (keyword-visible at once); their vectors too when a warm model is at hand."""
        index = self.index
        try:
            if not index.exists():
                return
            index.sync(list(paths), splitter=self.engine.loaded())
            embedder = self.engine.warm()
            if embedder is not None:
                index.embed(embedder, limit=self.config.recall.embed_at_recall)
        except MemvaultError as exc:
            warnings.append(f"the index was not updated ({exc}); the next recall or reindex catches up")

    def _inbox_local(self) -> None:
        """Proposals stay on this host until a person accepts them: ``inbox/`` ignores itself in git. With
        ``[trust] share_inbox`` that file (when it is memvault's) goes, so proposals can be committed."""
        ignore = self.facts.inbox_dir / ".gitignore"
        if self.config.trust.share_inbox:
            if ignore.is_file() and ignore.read_bytes().startswith(INBOX_IGNORE[:40]):
                ignore.unlink()
            return
        if not ignore.exists():
            atomic_write(ignore, INBOX_IGNORE)

    # -- facts -------------------------------------------------------------------------------------------
    def set_fact(self, key: str, text: str, *, source: str, category: str | None = None,
                 importance: float | None = None, confidence: float | None = None, tags: list[str] | None = None,
                 valid_until: date | str | None = None, allow_secret: bool = False, message: str | None = None,
                 extra: dict[str, Any] | None = None, check_similar: bool = True) -> Fact:
        """Create or replace fact ``key``; from an untrusted source, propose it in ``inbox/`` instead. The fact
        returned carries ``similar`` (near-duplicates and conflicts found among the facts) and ``warnings``."""
        validate_source(source)
        proposal = not self.policy.is_trusted(source)
        self.require(Op.PROPOSE_FACT if proposal else Op.WRITE_FACT, source)
        self.facts.path_for(key, inbox=proposal)
        similar = self.similar_facts(key, text) if check_similar and isinstance(text, str) else []
        written = Written()
        with self.lock():
            change = self.facts.plan_set(key, text, source=source, at=self.clock(), proposal=proposal,
                                         category=category, importance=importance, confidence=confidence, tags=tags,
                                         valid_until=valid_until, extra=extra)
            self.check_secrets([change], what=f"fact {key}", allow_secret=allow_secret, source=source)
            if not change.changed:
                fact = self.facts.read_file(key, change.path)
                fact.similar = similar
                return fact
            if proposal:
                self._inbox_local()
            action = "propose" if proposal else ("set" if change.before is None else "update")
            written.commit = self.apply([change], message=message or f"fact {action} {key}", source=source, key=key,
                                        commit=not proposal or self.config.trust.share_inbox)
        if not proposal:
            self.tell_index([change.path], written.warnings)
        fact = self.facts.read_file(key, change.path)
        fact.similar, fact.warnings = similar, written.warnings
        return fact

    def replace_fact(self, key: str, text: str, *, source: str, allow_secret: bool = False,
                     message: str | None = None) -> Fact:
        """Replace the whole file of ``key`` with ``text`` (as from an editor) after validating it."""
        validate_source(source)
        if not self.policy.is_trusted(source):
            raise UntrustedSource(source, f"cannot edit facts/{key}.md directly; write with 'fact set' to propose")
        written = Written()
        with self.lock():
            change = self.facts.plan_replace(key, text)
            self.check_secrets([change], what=f"fact {key}", allow_secret=allow_secret, source=source)
            if change.changed:
                written.commit = self.apply([change], message=message or f"fact edit {key}", source=source, key=key)
        if change.changed:
            self.tell_index([change.path], written.warnings)
        return self.facts.read_file(key, change.path)

    def delete_fact(self, key: str, *, source: str, message: str | None = None) -> Fact:
        """Remove fact ``key`` and commit the removal. Returns the fact as it was."""
        self.require(Op.DELETE_FACT, source)
        self.facts.path_for(key)
        with self.lock():
            change, old = self.facts.plan_delete(key)
            self.apply([change], message=message or f"fact rm {key}", source=source, key=key)
        self.tell_index([change.path], [])
        return old

    def accept(self, key: str, *, source: str) -> Fact:
        """Promote ``inbox/KEY.md`` to ``facts/KEY.md`` in one commit; the acceptor must be trusted."""
        self.require(Op.REVIEW_INBOX, source)
        self.facts.path_for(key, inbox=True)
        warnings: list[str] = []
        with self.lock():
            changes, proposal = self.facts.plan_accept(key)
            self.check_secrets(changes, what=f"fact {key}", allow_secret=False, source=source)
            self.apply(changes, message=f"fact accept {key} (proposed by {proposal.source})", source=source, key=key)
        self.tell_index([changes[0].path], warnings)
        return self.facts.read_file(key, changes[0].path)

    def reject(self, key: str, *, source: str) -> Fact:
        """Drop ``inbox/KEY.md`` (committed only when proposals are shared)."""
        self.require(Op.REVIEW_INBOX, source)
        self.facts.path_for(key, inbox=True)
        with self.lock():
            change, proposal = self.facts.plan_delete(key, inbox=True)
            self.apply([change], message=f"fact reject {key} (proposed by {proposal.source})", source=source,
                       key=key, commit=self.config.trust.share_inbox)
        return proposal

    def verify(self, key: str, *, source: str) -> Fact:
        """A person confirms a fact still holds: ``updated`` is bumped and committed, clearing review staleness."""
        self.require(Op.VERIFY_FACT, source)
        fact = self.facts.get(key)
        warnings: list[str] = []
        with self.lock():
            change = self.facts.plan_update(fact, {"updated": self.clock().replace(microsecond=0)})
            self.apply([change], message=f"fact verify {key}", source=source, key=key)
        self.tell_index([change.path], warnings)
        return self.facts.read_file(key, change.path)

    def similar_facts(self, key: str, text: str) -> list[dict[str, Any]]:
        """Existing facts that ``text`` duplicates or contradicts, compared with the index's rows (one keyword
        query, no file read); without an index, with the facts on disk in a small vault."""
        life = self.config.facts
        candidates: list[tuple[str, str]] | None = None
        try:
            found: dict[str, str] = {}
            shared = self._shared()
            for index in ([shared] if shared is not None else []) + [self.index]:  # this host's version wins
                if index.exists():
                    rows = index.search_keywords(text, ["fact"], 50)
                    found.update({d["id"]: d["body"] for d in index.chunk_docs([r for r, _ in rows]).values()})
                    candidates = list(found.items())
        except MemvaultError:
            candidates = None
        if candidates is None:
            files = self.facts.files()
            if len(files) > DEDUP_FALLBACK_MAX:
                return []
            candidates = [(f.key, f.text) for f in self.facts.iter([])]
        out = []
        mine = keywords(text)  # once, not once per candidate
        for other_key, other_text in candidates:
            if other_key == key:
                continue
            match = compare_keywords(mine, keywords(other_text), threshold=life.duplicate_jaccard,
                                     min_shared=life.duplicate_min_shared)
            if match is not None:
                out.append({"key": other_key, "kind": match.kind, "jaccard": round(match.jaccard, 3),
                            "shared": list(match.shared), "differing": list(match.differing)})
        return out

    # -- episodes ----------------------------------------------------------------------------------------
    def append_episode(self, text: str, *, source: str, kind: str = "raw", at: datetime | str | None = None,
                       tags: list[str] | None = None, meta: dict[str, Any] | None = None,
                       allow_secret: bool = False) -> Episode:
        """Append one episode; keyword recall finds it at once (the index reads only the new line)."""
        self.require(Op.APPEND_EPISODE, source)
        episode, line = self.episodes.make(text, source=source, kind=kind, at=at, tags=tags, meta=meta)
        if allow_secret:
            self.require(Op.ALLOW_SECRET, source)
        else:
            findings = episode_secrets(episode.to_dict())
            if findings:
                raise SecretRefused("episode", describe(findings))
        assert episode.path is not None
        self.episodes.append_line(episode.path, line)
        warnings: list[str] = []
        self.tell_index([episode.path], warnings)
        episode.warnings = warnings
        return episode

    def append_episodes(self, items: Sequence[dict[str, Any]], *, source: str | None = None) -> list[Episode]:
        """Append several episodes at once (a captured session, an import): each is validated and checked for
        secrets exactly as :meth:`append_episode` does, and one refusal refuses them all before anything is
        written; then one write and one fsync per month file, and the index told once.

        Each item holds ``text`` and optionally ``kind``, ``at``, ``tags``, ``meta``, ``id`` and ``source`` (an
        item's own source is allowed only for a restore by a trusted ``source``; by default every item gets
        ``source``)."""
        made: list[tuple[Episode, bytes]] = []
        for item in items:
            own = item.get("source")
            if own is not None and own != source:
                if source is None or not self.policy.is_trusted(source):
                    raise UntrustedSource(source or own, "only a trusted source may append episodes of other sources")
            writer = own if own is not None else source
            if writer is None:
                raise UntrustedSource("none", "an episode needs a source")
            self.require(Op.APPEND_EPISODE, writer)
            episode, line = self.episodes.make(item["text"], source=writer, kind=item.get("kind") or "raw",
                                               at=item.get("at"), tags=item.get("tags"), meta=item.get("meta"),
                                               id=item.get("id"))
            findings = episode_secrets(episode.to_dict())
            if findings:
                raise SecretRefused(f"episode {len(made) + 1} of {len(items)}", describe(findings))
            made.append((episode, line))
        by_file: dict[Path, list[bytes]] = {}
        for episode, line in made:
            assert episode.path is not None
            by_file.setdefault(episode.path, []).append(line)
        for path, lines in by_file.items():
            self.episodes.append_line(path, b"".join(lines))
        warnings: list[str] = []
        if by_file:
            self.tell_index(list(by_file), warnings)
        episodes = [e for e, _ in made]
        for e in episodes:
            e.warnings = warnings
        return episodes

    def rewrite_episodes(self, report: RewriteReport, *, message: str, source: str) -> RewriteReport:
        """Apply a planned rewrite (prune, purge) made under the episode lock the caller still holds."""
        if report.changes:
            self.apply(report.changes, message=message, source=source, commit=self.config.track_episodes)
            self.tell_index(report.files_changed, [])
        return report

    # -- procedures --------------------------------------------------------------------------------------
    def add_procedure(self, name: str, source_file: Path, *, source: str, force: bool = False,
                      allow_secret: bool = False) -> Procedure:
        """Copy a runbook in (keeping its mode) and commit it. Runnable code: trusted sources only."""
        self.require(Op.ADD_PROCEDURE, source)
        warnings: list[str] = []
        with self.lock():
            change, mode = self.procedures.plan_add(name, source_file, force=force)
            self.check_secrets([change], what=f"procedure {name}", allow_secret=allow_secret, source=source)
            self.apply([change], message=f"proc add {name}", source=source, key=f"procedure:{name}",
                       modes={change.path: mode})
        self.tell_index([change.path], warnings)
        return self.procedures.get(name, path=change.path)

    def run_procedure(self, name: str, args: Sequence[str] = (), *, source: str, allow_dirty: bool = False,
                      stdout: IO[Any] | int | None = None, stderr: IO[Any] | int | None = None,
                      cwd: Path | None = None, timeout: float | None = None) -> RunResult:
        """Run a procedure and record the run as a ``procedure_run`` episode with the commit and blob that ran.
        Arguments that look like secrets are recorded as ``<redacted>``."""
        self.require(Op.RUN_PROCEDURE, source)
        if allow_dirty and not self.policy.is_trusted(source):
            raise UntrustedSource(source, "only a trusted source may run a procedure with uncommitted changes")
        proc = self.procedures.get(name)
        outcome = self.procedures.execute(proc, args, allow_dirty=allow_dirty, stdout=stdout, stderr=stderr, cwd=cwd,
                                          env={"MEMVAULT_DIR": str(self.root), "MEMVAULT_PROCEDURE": name},
                                          timeout=timeout)
        code = outcome.exit_code
        status = f"exit {code}" if code >= 0 else f"killed by signal {-code}"
        recorded_args = [f"<redacted: {find_secrets(a)[0].kind}>" if find_secrets(a) else a for a in outcome.args]
        episode = self.append_episode(
            f"ran procedure {name} ({status}, {outcome.duration_ms / 1000:.1f} s)"
            + (" from a dirty working copy" if proc.dirty else ""),
            source=source, kind="procedure_run", tags=list(proc.tags),
            meta={"name": name, "commit": proc.commit, "blob": proc.blob, "args": recorded_args, "exit_code": code,
                  "duration_ms": outcome.duration_ms, "dirty": proc.dirty},
            allow_secret=False)
        try:  # running a procedure is using it: what recall's frequency counts
            self._state().record_use([("procedure", name)], source=source,
                                     limited=not self.policy.is_trusted(source))
        except MemvaultError as exc:
            episode.warnings.append(f"use not recorded: {exc}")
        return RunResult(proc, list(outcome.args), code, outcome.duration_ms, episode)

    # -- whole-vault operations --------------------------------------------------------------------------
    def remove_facts(self, facts: Sequence[Fact], *, op: Op, message: str, source: str) -> str | None:
        """Remove several facts (expire) in one commit."""
        self.require(op, source)
        with self.lock():
            changes = [self.facts.plan_delete(f.key, inbox=f.quarantined)[0] for f in facts]
            commit = self.apply(changes, message=message, source=source)
        self.tell_index([c.path for c in changes], [])
        return commit

    def merge_facts(self, plans: Sequence[tuple[Fact, dict[str, Any], Sequence[Fact]]], *, message: str,
                    source: str) -> str | None:
        """Dedup: each (survivor, its new fields, the members merged into it), all in one commit."""
        self.require(Op.DEDUP, source)
        with self.lock():
            changes: list[FileChange] = []
            for survivor, fields, others in plans:
                changes.append(self.facts.plan_update(survivor, fields))
                changes += [self.facts.plan_delete(f.key)[0] for f in others]
            commit = self.apply(changes, message=message, source=source)
        self.tell_index([c.path for c in changes], [])
        return commit

    def set_model(self, model: str, *, source: str, this_host: bool = False) -> None:
        """Set ``[embedding] model``: in memvault.toml, committed (a name every host can load), or with
        ``this_host`` in ``.memvault/local.toml``, never committed (a directory of this machine). Setting a name
        for the vault drops this host's override, which would otherwise still win."""
        from ..rules.config import local_path, set_local_model, set_model

        self.require(Op.CONFIGURE, source)
        path = self.root / CONFIG_NAME
        local = local_path(path)
        with self.lock():
            if this_host or local.is_file():
                data = set_local_model(path, model if this_host else None).encode("utf-8")
                if local.is_symlink():
                    raise UnsafePath(local, "is a symlink; not written through")
                atomic_write(local, data)
            if not this_host:
                before = path.read_bytes() if path.exists() else None
                change = FileChange(path, before, set_model(path, model).encode("utf-8"))
                self.apply([change], message=f"embedding model {model}", source=source)

    def state(self) -> State:
        return self._state()

    def record_use(self, keys: Sequence[tuple[str, str]], *, source: str) -> list[tuple[str, str]]:
        self.require(Op.RECORD_USE, source)
        return self._state().record_use(keys, source=source, limited=not self.policy.is_trusted(source))


def _prune_empty_dirs(start: Path, stop: Path) -> None:
    """Remove folders left empty by a delete, up to (not including) the vault area they are in."""
    current = start
    while current != stop and stop in current.parents and len(current.relative_to(stop).parts) > 1:
        try:
            current.rmdir()
        except OSError:
            return
        current = current.parent

