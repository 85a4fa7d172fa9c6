"""The write gate: the one path every mutation of a vault takes, whatever the interface.

Each operation (a fact set, an edit, a delete, accept/reject, an episode, a procedure added or run, prune, purge,
dedup, expire, verify, a model change) goes through the same steps, in this order:

1. **Trust**: the caller's source may do this (:mod:`memvault.rules.trust`); an untrusted fact write becomes a proposal.
2. **Validation**: the store plans the change and validates every field before anything is written.
3. **Secrets**: the exact bytes to be committed are checked by the function the pre-commit hook runs
   (:func:`memvault.stores.checks.check_file`), every field included, the key itself too; ``--allow-secret`` is
   itself a trusted operation (and never lets a secret into a key: the key is a path and a commit subject).
4. **Apply and commit**: a file about to be replaced that holds an uncommitted edit made by hand is committed first,
   as the person's change, when it passes the same checks (else the write is refused, naming the file: nothing a
   person wrote is thrown away). Then all files are written atomically (never through a symlink), then one commit
   of exactly those paths; if the commit is refused (a hook, a broken repository) every file and the git index are
   put back as they were (:meth:`WriteGate.apply`). Proposals are not committed unless ``[trust] share_inbox``.
5. **Index**: the index is told which files changed (phase 1 at once, so keyword recall sees the change; vectors
   now only if a warm model is at hand, else at the next recall or reindex). An index problem never undoes a
   committed write: it becomes a warning.

Files a person (or another tool) changed behind memvault's back reach git through the same checks:
:meth:`WriteGate.commit_edits` commits the ones that pass and keeps the others out, each named with its reason
(``sync`` runs it first). Every operation returns what the caller should know (``.warnings``): an interface shows
them and never has to look anywhere else.

The stores plan, this module applies; nothing here is called back by the stores or the index.
"""
from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from ..stores.checks import (Finding, check_file, commit_problems, episode_secrets, is_memory_file, is_secret,
                             one_line)
from ..rules.config import CONFIG_NAME, Config
from ..stores.episodes import Episode, EpisodeLog, RewriteReport
from ..rules.errors import GitError, InvalidKey, InvalidValue, MemvaultError, SecretRefused, UntrustedSource
from ..stores.facts import Fact, FactStore
from ..rules.fsutil import FileChange, atomic_write, lock_wait, locked, remove, remove_dir, try_lock
from ..stores.gitstore import GitStore
from ..stores.procedures import RUN_KIND, Procedure, ProcedureStore, RunResult, pass_on
from ..rules.secrets import describe
from ..rules.timeutil import now
from ..rules.trust import Op, Policy
from ..rules.validation import check_args, check_item_fields, validate_source
from . import access, runs
from .usage import MAX_USED, Counted  # noqa: F401 - where callers have always found them

if TYPE_CHECKING:
    from ..models.engine import Engine
    from ..index.protocol import VaultIndex
    from ..stores.state import State

INBOX_IGNORE = (b"# memvault: proposals from untrusted sources stay local until accepted\n"
                b"# ([trust] share_inbox = true commits them)\n*\n")


@dataclass
class Committed:
    """What :meth:`WriteGate.commit_edits` did: the commit (None when nothing was committed), the files in it,
    the files kept out of it with the reason (they stay in the work tree, uncommitted), and the warnings."""

    commit: str | None = None
    paths: list[Path] = field(default_factory=list)
    refused: dict[Path, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def to_dict(self, root: Path) -> dict[str, Any]:
        return {"commit": self.commit, "paths": [p.relative_to(root).as_posix() for p in self.paths],
                "refused": {p.relative_to(root).as_posix(): r for p, r in self.refused.items()},
                "warnings": list(self.warnings)}


class WriteGate:
    """Applies every mutation of one vault (see the module doc). Built by :class:`memvault.core.vault.Vault`."""

    def __init__(self, *, root: Path, config: Config, git: Callable[[], GitStore | None], facts: FactStore,
                 episodes: EpisodeLog,
                 procedures: ProcedureStore, index: VaultIndex, state: Callable[[], State], engine: Engine,
                 lock_path: Path, clock: Callable[[], datetime] = now,
                 unfinished: Callable[[WriteGate, str], list[str]] | None = None) -> None:
        self.root = root
        self.config = config
        self.policy = Policy(config.trust.trusted)
        self.scopes = config.scopes
        self._git = git
        self.facts = facts
        self.episodes = episodes
        self.procedures = procedures
        self.index = index
        self._state = state
        self.engine = engine
        self.lock_path = lock_path
        #: The vault's state directory (memvault.rules.places): this host's index, state and locks (the write lock
        #: lives in its ``locks/``).
        self.state_dir = lock_path.parent.parent
        self.clock = clock
        #: Run by :meth:`lock` before a write by a source: finishes what a write killed part-way left (an
        #: interrupted purge, :func:`memvault.core.lifecycle.finish_purge`); what to tell the person.
        self.unfinished = unfinished

    @property
    def git(self) -> GitStore | None:
        return self._git()

    # -- the steps ---------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def lock(self, source: str | None = None, warnings: list[str] | None = None) -> Iterator[None]:
        """Serialises writers of facts, proposals and procedures (read-modify-write, then commit) across processes.
        A write by ``source`` (whose own trust check has passed) first mends what a killed sync or purge left (the
        purge when ``source`` may purge: :attr:`unfinished`); ``warnings`` hears of it. Only a write does: opening a vault,
        a recall, the web view or a hook reads."""
        with locked(self.lock_path, wait=lock_wait()):
            if source is not None and self.unfinished is not None:
                notices = self.unfinished(self, source)
                if warnings is not None:
                    warnings += notices
            yield

    def read_lock(self) -> Any:
        """Shared with other readers, held while a reader takes the facts, proposals and runbooks as one picture
        (an export): the writers of :meth:`lock` wait for it, so an accept is never half seen."""
        return locked(self.lock_path, shared=True, wait=lock_wait())

    def sync_lock(self) -> Any:
        """Held by a sync from its first fetch to its last push: syncs of one vault run one at a time, while the
        write and append locks are taken only for its steps on the work tree (never across the network)."""
        return locked(self.lock_path.with_name("sync.lock"), wait=lock_wait())

    def try_sync_lock(self) -> Any:
        """:meth:`sync_lock` if no sync holds it (yields whether it is held), never waiting: for a write, which holds
        the write lock a sync waits for."""
        return try_lock(self.lock_path.with_name("sync.lock"))

    def import_lock(self) -> Any:
        """Held by an import from reading the ids already imported to appending the new ones: two imports of one
        export at once both found nothing there and stored every episode twice."""
        return locked(self.lock_path.with_name("import.lock"), wait=lock_wait())

    def require(self, op: Op, source: str) -> str:
        validate_source(source)
        self.policy.require(op, source)
        access.whole_vault_or_refuse(self.scopes, op, source)
        return source

    def check_changes(self, changes: Sequence[FileChange], *, what: str, allow_secret: bool, source: str) -> None:
        """Refuse bytes the pre-commit hook would refuse (same function, every field and the key itself): a secret
        unless ``allow_secret`` (a trusted operation), anything else (a secret in a key) always."""
        if allow_secret:
            self.require(Op.ALLOW_SECRET, source)
        for change in changes:
            if change.after is None:
                continue
            rel = change.path.relative_to(self.root).as_posix()
            area, _, inner = rel.partition("/")
            if not is_memory_file(area, inner):
                continue
            problems = check_file(area, inner, change.after)
            secrets = [p.reason for p in problems if is_secret(p)]
            others = [p.reason for p in problems if not is_secret(p)]
            if others:
                raise InvalidKey(inner, "; ".join(others))
            if secrets and not allow_secret:
                raise SecretRefused(what, "; ".join(secrets))

    def refusal(self, path: Path, data: bytes | None, *, allow_secret: bool = False) -> str | None:
        """Why the vault file ``path`` must not be committed with the bytes ``data`` (None: a deletion), as one
        line, or None (``allow_secret`` waives text that only looks like a secret)."""
        problems = self.problems(path, data)
        return one_line([p for p in problems if not (allow_secret and is_secret(p))])

    def problems(self, path: Path, data: bytes | None) -> list[Finding]:
        """Every reason the vault file ``path`` must not be committed with the bytes ``data``: the one check of
        :func:`memvault.stores.checks.commit_problems`, with this vault's limits, and no link."""
        if path.is_symlink():
            return [Finding(f"a symlink (to {os.readlink(path)}): memvault never commits a link, which would "
                            "point at whatever each host that pulls it has there; commit the file itself")]
        limits = self.config.limits
        return commit_problems(path.relative_to(self.root).as_posix(), data,
                               limits={"facts": limits.fact_bytes, "inbox": limits.fact_bytes,
                                       "procedures": limits.procedure_bytes})

    def apply(self, changes: Sequence[FileChange], *, message: str, source: str, key: str | None = None,
              commit: bool | Callable[[Path], bool] = True, modes: dict[Path, int] | None = None,
              warnings: list[str] | None = None, also: Sequence[Path] = (), allow_secret: bool = False,
              trailers: dict[str, str] | None = None, carried: dict[Path, bytes] | None = None) -> str | None:
        """Write every change atomically, then commit exactly those paths (those ``commit`` selects, and the
        already changed ``also``) as ``source``, each through the checks of :meth:`commit_files` (``allow_secret``:
        the one waiver). When anything fails (a refused commit above all), every file is put back as it was, and
        the git index with it (GitStore): all or nothing. A committed file that holds an uncommitted hand edit is
        committed first, as the person's change (see :meth:`_hand_edits_first`); ``warnings`` hears of it.
        ``carried``: path -> the bytes an editor started from, which the change carries forward."""
        selected = [c for c in changes if c.changed and (commit(c.path) if callable(commit) else commit)]
        self._hand_edits_first(selected, before=message.split("\n", 1)[0], warnings=warnings, carried=carried)
        done: list[FileChange] = []
        try:
            for change in changes:
                if not change.changed:
                    continue
                if change.after is None:
                    remove(change.path)  # a link itself, never what it points to; none followed on the way
                    _prune_empty_dirs(change.path.parent, self.root)
                else:
                    atomic_write(change.path, change.after, mode=(modes or {}).get(change.path))
                done.append(change)
            files: dict[Path, bytes | None] = {c.path: c.after for c in done if c in selected}
            for path in also:  # changed earlier (an interrupted purge): committed as they are now
                if path not in files and (commit(path) if callable(commit) else commit):
                    files[path] = _current(path)
            if not files:
                return None
            return self._commit(files, message, source=source, key=key, allow_secret=allow_secret, trailers=trailers)
        except BaseException:
            self._restore(done)
            raise

    def _hand_edits_first(self, changes: Sequence[FileChange], *, before: str, warnings: list[str] | None,
                          carried: dict[Path, bytes] | None = None) -> None:
        """Nothing a person wrote is lost: a file about to be replaced or removed whose working copy differs from
        HEAD (an edit made in an editor, not yet committed) is committed first, as the person's change (author:
        the repository's user), when it passes the checks every commit passes; else the write is refused with a
        one-line reason naming the file. Without autocommit (commits are the person's business) nothing is done."""
        git = self.git
        if not changes or not self.config.autocommit or git is None:
            return
        # Files whose whole text a write replaces; episode files are only ever appended to, or rewritten keeping
        # every line not asked for (their uncommitted appends are not hand edits and are never lost).
        areas = ("facts", "procedures") + (("inbox",) if self.config.trust.share_inbox else ())
        replaced = [c for c in changes if c.before is not None and (
            c.path.relative_to(self.root).parts[0] in areas or c.path == self.root / CONFIG_NAME)]
        heads = git.head_blobs([c.path for c in replaced])
        edited = [c for c in replaced if git.blob_id(c.before) != heads.get(c.path)]  # type: ignore[arg-type]
        if not edited:
            return
        # An edit that cannot be committed, made in the very bytes an editor started from (`fact edit` mending a
        # front matter broken by hand), is not thrown away by the change: it is carried forward, uncommitted.
        edited = [c for c in edited if not (carried and carried.get(c.path) == c.before
                                            and self.refusal(c.path, c.before) is not None)]
        if not edited:
            return
        for change in edited:
            reason = self.refusal(change.path, change.before)
            if reason is not None:
                rel = change.path.relative_to(self.root).as_posix()
                raise GitError(f"{rel} holds an edit made by hand that is not committed, and it cannot be committed "
                               f"({reason}); this write would throw it away: fix the file, or commit or discard "
                               "the edit yourself, then try again")
        rels = [c.path.relative_to(self.root).as_posix() for c in edited]
        subject = f"hand edit of {', '.join(rels[:3])}" + (f" and {len(rels) - 3} more" if len(rels) > 3 else "")
        commit = self.commit_files({c.path: c.before for c in edited}, f"{subject} (committed before: {before})",
                                   author=None, trailers={"Memvault-Hand-Edit": ", ".join(rels)})
        if commit and warnings is not None:
            warnings.append(f"{', '.join(rels)} held an uncommitted edit made by hand: committed first, in "
                            f"{commit[:12]}, so it stays in the history")

    def _restore(self, done: list[FileChange]) -> None:
        """Put back each file this write changed, unless it was saved again since (an editor's save is kept)."""
        for change in reversed(done):
            with contextlib.suppress(OSError, MemvaultError):
                if _current(change.path) != change.after:
                    continue
                if change.before is None:
                    remove(change.path)
                    _prune_empty_dirs(change.path.parent, self.root)
                else:
                    atomic_write(change.path, change.before)

    def _commit(self, files: dict[Path, bytes | None], message: str, *, source: str, key: str | None,
                allow_secret: bool = False, trailers: dict[str, str] | None = None) -> str | None:
        """Commit ``files`` (and nothing else) with the key and source as trailers and the source as author."""
        if not self.config.autocommit or self.git is None:
            return None
        trailers = dict(trailers or {})
        if key:
            trailers["Memvault-Key"] = key
        trailers["Memvault-Source"] = source
        return self.commit_files(files, f"{message} ({source})", author=source, trailers=trailers,
                                 allow_secret=allow_secret)

    def commit_files(self, files: dict[Path, bytes | None], message: str, *, author: str | None,
                     trailers: dict[str, str], allow_secret: bool = False) -> str | None:
        """The commit step every commit memvault makes goes through: each file (its bytes as they will be
        committed; None: deleted) passes the checks the pre-commit hook runs (:meth:`refusal`: secrets in every
        field, keys, front matter, limits, links, local state) or nothing is committed, whichever operation
        asked. ``allow_secret`` waives text that only looks like a secret, and only for a trusted ``author``
        (the operation's source). Raises :class:`SecretRefused` or :class:`InvalidValue`, naming the file and the
        line, never the text."""
        git = self.git
        if git is None:
            return None
        if allow_secret:
            self.require(Op.ALLOW_SECRET, author or "none")
        for path, data in files.items():
            rel = path.relative_to(self.root).as_posix()
            problems = self.problems(path, data)
            others = one_line([p for p in problems if not is_secret(p)])
            if others is not None:
                raise InvalidValue(rel, f"not committed: {others}")
            secrets = one_line([p for p in problems if is_secret(p)])
            if secrets is not None and not allow_secret:
                raise SecretRefused(rel, secrets)
        return git.commit(list(files), message, author=author, trailers=trailers, checked=files,
                          refusal=lambda path, data: self.refusal(path, data, allow_secret=allow_secret))

    def commit_edits(self, paths: Sequence[Path], *, source: str, message: str) -> Committed:
        """Commit files changed behind memvault's back (an editor, a script, another tool) through the same checks
        as every write: each file that passes goes into one commit authored by ``source``; each that does not (a
        secret, a symlink, a temp file, front matter that does not parse, ...) stays in the work tree, uncommitted,
        named in ``refused`` and ``warnings`` with its reason. The caller holds :meth:`lock`."""
        self.require(Op.COMMIT_EDITS, source)
        out = Committed()
        for path in dict.fromkeys(paths):
            data = None
            if not path.is_symlink() and path.exists():
                try:
                    data = path.read_bytes()
                except OSError as exc:
                    out.refused[path] = f"cannot be read ({exc.strerror})"
                    continue
            elif not path.is_symlink() and (self.git is None or not self.git.head_blobs([path])):
                continue  # neither here nor in HEAD: nothing to commit
            reason = self.refusal(path, data)
            if reason is None:
                out.paths.append(path)
            else:
                out.refused[path] = reason
        out.warnings += [f"{p.relative_to(self.root).as_posix()}: not committed, kept here as it is: {r}"
                         for p, r in out.refused.items()]
        if out.paths and self.git is not None:
            out.commit = self.commit_files({p: _current(p) for p in out.paths}, message, author=source,
                                           trailers={"Memvault-Source": source})
        return out

    def tell_index(self, paths: Sequence[Path]) -> list[str]:
        """Phase 1 for ``paths`` (keyword-visible at once); their vectors too when a warm model is at hand. Returns
        what the caller should know: an index that could not be told, a file the index cannot read."""
        from .catchup import catch_up

        warnings: list[str] = []
        index = self.index
        try:
            if index.exists():
                report = catch_up(index, self.engine, self.config, paths=list(paths),
                                  limit=self.config.recall.embed_at_recall)
                warnings += report.warnings + report.problems
        except MemvaultError as exc:
            warnings.append(f"the index was not updated ({exc}); the next recall or reindex catches up")
        warnings += [w for w in index.warnings if w not in warnings]
        index.warnings.clear()
        return warnings

    def _inbox_local(self) -> None:
        """Proposals stay on this host until a person accepts them: ``inbox/`` ignores itself in git. With
        ``[trust] share_inbox`` that file (when it is memvault's) goes, so proposals can be committed."""
        ignore = self.facts.inbox_dir / ".gitignore"
        if self.config.trust.share_inbox:
            if ignore.is_file() and ignore.read_bytes().startswith(INBOX_IGNORE[:40]):
                remove(ignore)
            return
        if not ignore.exists():
            atomic_write(ignore, INBOX_IGNORE)

    # -- facts -------------------------------------------------------------------------------------------
    def set_fact(self, key: str, text: str, *, source: str, category: str | None = None,
                 importance: float | None = None, confidence: float | None = None, tags: list[str] | None = None,
                 valid_until: date | str | None = None, allow_secret: bool = False, message: str | None = None,
                 extra: dict[str, Any] | None = None, check_similar: bool = True, propose: bool = False) -> Fact:
        """Create or replace fact ``key``; from an untrusted source (or with ``propose``), propose it in ``inbox/``
        instead, beside any other proposal for ``key`` that waits, never over it. The fact returned carries
        ``similar`` (near-duplicates and conflicts found among the facts) and ``warnings``."""
        validate_source(source)
        path = access.rel(self.root, self.facts.path_for(key))
        scoped = access.fact_route(self.scopes, source, path)
        proposal = propose or scoped or not self.policy.is_trusted(source)
        self.require(Op.PROPOSE_FACT if proposal else Op.WRITE_FACT, source)
        # A proposal the source's auto_accept rule covers is accepted at once, never one that takes a waiver or
        # was asked to be a proposal (ingest's conflicts); a contradiction still waits for a person.
        rule = access.auto_accept(self.scopes, source, path) if proposal and not (propose or allow_secret) else None
        self.facts.path_for(key, inbox=proposal)
        if isinstance(text, str):
            self.facts.check_text(key, text)
        similar = self.similar_facts(key, text) if (check_similar or rule) and isinstance(text, str) else []
        warnings: list[str] = []
        contradicted = [access.shown_match(self.scopes, source, m, self.root)["key"] for m in similar
                        if m["kind"] == "conflict"]
        if rule is not None and contradicted:
            warnings.append(f"not accepted by the auto_accept rule {rule[1]!r}: it contradicts "
                            f"{', '.join(dict.fromkeys(contradicted))}; it waits in the inbox for a person")
            rule = None
        similar, hidden = access.within(self.scopes, source, similar, self.root)
        if hidden and check_similar:
            warnings.append(f"it duplicates or contradicts {hidden} stored fact{'s' if hidden > 1 else ''} outside "
                            "its read scope (a person sees which)")
        proposal = proposal and rule is None
        with self.lock(source, warnings):
            slot = None
            if proposal and isinstance(text, str):
                slot, waiting = self.facts.proposal_slot(key, text)
                if waiting is not None:
                    warnings.append(f"another proposal for {key} waits in inbox/ (from {waiting.source}) with other "
                                    f"text: this one is kept beside it as inbox/{slot}.md, not over it ('memvault "
                                    f"accept {slot}' takes this one)")
            change = self.facts.plan_set(key, text, source=source, at=self.clock(), proposal=proposal,
                                         category=category, importance=importance, confidence=confidence, tags=tags,
                                         valid_until=valid_until, extra=extra, slot=slot)
            self.check_changes([change], what=f"fact {key}", allow_secret=allow_secret, source=source)
            if not change.changed:
                fact = self.facts.read_file(slot or key, change.path)
                fact.similar = similar if check_similar else []
                return fact
            if proposal:
                self._inbox_local()
            action = "propose" if proposal else ("set" if change.before is None else "update")
            trailers = {"Memvault-Auto-Accept": f'{CONFIG_NAME} [scopes."{rule[0]}"] auto_accept "{rule[1]}"'} \
                if rule is not None else None
            self.apply([change], message=message or f"fact {action} {key}" + (" (auto_accept)" if rule else ""),
                       source=source, key=key, commit=not proposal or self.config.trust.share_inbox,
                       warnings=warnings, allow_secret=allow_secret, trailers=trailers)
        if not proposal:
            warnings += self.tell_index([change.path])
        fact = self.facts.read_file(slot or key, change.path)
        fact.similar, fact.warnings = (similar if check_similar else []), warnings
        fact.auto_accepted = rule[1] if rule is not None else None
        fact.proposed_because = access.SCOPE_PROPOSAL if proposal and scoped and self.policy.is_trusted(source) \
            else None
        return fact

    def replace_fact(self, key: str, text: str, *, source: str, allow_secret: bool = False,
                     message: str | None = None, based_on: str | None = None) -> Fact:
        """Replace the whole file of ``key`` with ``text`` (as from an editor) after validating it. ``based_on``: the
        file's text the editor started from (an uncommitted edit in it that cannot be committed is carried forward
        by ``text``, not refused)."""
        validate_source(source)
        if not self.policy.is_trusted(source):
            raise UntrustedSource(source, f"cannot edit facts/{key}.md directly; write with 'fact set' to propose")
        access.write_or_refuse(self.scopes, source, access.rel(self.root, self.facts.path_for(key)), "edit")
        warnings: list[str] = []
        with self.lock(source, warnings):
            change = self.facts.plan_replace(key, text)
            self.check_changes([change], what=f"fact {key}", allow_secret=allow_secret, source=source)
            if change.changed:
                self.apply([change], message=message or f"fact edit {key}", source=source, key=key,
                           warnings=warnings, allow_secret=allow_secret,
                           carried={change.path: based_on.encode("utf-8")} if based_on is not None else None)
        if change.changed:
            warnings += self.tell_index([change.path])
        fact = self.facts.read_file(key, change.path)
        fact.warnings = warnings
        return fact

    def delete_fact(self, key: str, *, source: str, message: str | None = None) -> Fact:
        """Remove fact ``key`` and commit the removal. Returns the fact as it was (with ``warnings``)."""
        self.require(Op.DELETE_FACT, source)
        access.write_or_refuse(self.scopes, source, access.rel(self.root, self.facts.path_for(key)), "delete")
        warnings: list[str] = []
        with self.lock(source, warnings):
            change, old = self.facts.plan_delete(key)
            self.apply([change], message=message or f"fact rm {key}", source=source, key=key, warnings=warnings)
        old.warnings = warnings + self.tell_index([change.path])
        return old

    def accept(self, key: str, *, source: str) -> Fact:
        """Promote ``inbox/KEY.md`` to ``facts/KEY.md`` (or to the fact an alternative proposal names) in one
        commit; the acceptor must be trusted. A proposal that contradicts another stored fact supersedes it: the
        accepted fact says ``supersedes: KEY``, that one ``superseded_by:`` (recall then leaves it out unless
        asked), and the commit names it (``Memvault-Supersedes``)."""
        self._may_review(source)
        self.facts.path_for(key, inbox=True)
        warnings: list[str] = []
        with self.lock(source, warnings):
            _, waiting = self.facts.plan_accept(key)
            target = waiting.extra.get("proposes") if isinstance(waiting.extra.get("proposes"), str) else key
            access.review_or_refuse(self.scopes, source, waiting.source,
                                    access.rel(self.root, self.facts.path_for(target)), "accept")
            old = self._superseded(target, waiting.text)
            if old is not None and not access.may_supersede(self.scopes, source, access.rel(self.root, old.path)):
                named = old.key if access.fact_readable(self.scopes, source, old.key, self.root) else access.OUTSIDE
                warnings.append(f"{target} contradicts {named}, outside its review scope {access.SAID}: that fact "
                                "is left as it is; a person decides which one holds")
                old = None
            changes, proposal = self.facts.plan_accept(key, supersedes=old.key if old is not None else None,
                                                       accepted_by=source)
            target = self.facts.key_for(changes[0].path) or key
            if old is not None:
                changes.append(self.facts.plan_update(old, {"superseded_by": target}))
                warnings.append(f"{target} supersedes {old.key} (it states another value): recall shows {old.key} "
                                "only when asked for superseded facts")
            self.check_changes(changes, what=f"fact {target}", allow_secret=False, source=source)
            self.apply(changes, message=f"fact accept {target} (proposed by {proposal.source})", source=source,
                       key=target, warnings=warnings,
                       trailers={"Memvault-Supersedes": old.key} if old is not None else None)
        warnings += self.tell_index([changes[0].path])
        others = [f.key for f in self.facts.inbox() if (f.extra.get("proposes") or f.key) == target]
        if others:
            warnings.append(f"{len(others)} other proposal{'s' if len(others) > 1 else ''} for {target} still "
                            f"wait{'' if len(others) > 1 else 's'} in the inbox: {', '.join(others)}")
        fact = self.facts.read_file(target, changes[0].path)
        fact.warnings = warnings
        return fact

    def _may_review(self, source: str) -> None:
        """A source a scope names reviews where its ``review`` paths say (checked per proposal, with no
        self-approval, by :func:`access.review_or_refuse`); any other source as the trust table says."""
        validate_source(source)
        if self.scopes.for_source(source) is None:
            self.require(Op.REVIEW_INBOX, source)

    def _superseded(self, key: str, text: str) -> Fact | None:
        """The stored fact (another key) that ``text`` contradicts most closely, or None."""
        for match in self.similar_facts(key, text):
            if match["kind"] == "conflict" and match["key"] != key and self.facts.exists(match["key"]):
                try:
                    return self.facts.get(match["key"])
                except MemvaultError:
                    continue
        return None

    def reject(self, key: str, *, source: str) -> Fact:
        """Drop ``inbox/KEY.md`` (committed only when proposals are shared)."""
        self._may_review(source)
        self.facts.path_for(key, inbox=True)
        warnings: list[str] = []
        with self.lock(source, warnings):
            change, proposal = self.facts.plan_delete(key, inbox=True)
            target = proposal.extra.get("proposes") if isinstance(proposal.extra.get("proposes"), str) else key
            access.review_or_refuse(self.scopes, source, proposal.source,
                                    access.rel(self.root, self.facts.path_for(target)), "reject")
            self.apply([change], message=f"fact reject {key} (proposed by {proposal.source})", source=source,
                       key=key, commit=self.config.trust.share_inbox, warnings=warnings)
        proposal.warnings = warnings
        return proposal

    def verify(self, key: str, *, source: str, allow_secret: bool = False) -> Fact:
        """A person confirms a fact still holds: ``updated`` is bumped and committed, clearing review staleness
        (the fact passes the commit's checks as it is: ``allow_secret`` waives what only looks like a secret)."""
        self.require(Op.VERIFY_FACT, source)
        access.write_or_refuse(self.scopes, source, access.rel(self.root, self.facts.path_for(key)), "verify")
        fact = self.facts.get(key)
        warnings: list[str] = []
        with self.lock(source, warnings):
            change = self.facts.plan_update(fact, {"updated": self.clock().replace(microsecond=0)})
            self.apply([change], message=f"fact verify {key}", source=source, key=key, warnings=warnings,
                       allow_secret=allow_secret)
        warnings += self.tell_index([change.path])
        fact = self.facts.read_file(key, change.path)
        fact.warnings = warnings
        return fact

    def similar_facts(self, key: str, text: str, *, load_model: bool = False) -> list[dict[str, Any]]:
        """Existing facts that ``text`` duplicates or contradicts, compared with the index's rows (one keyword
        query, no file read); without an index, with the facts on disk in a small vault. Contradictions in other
        words (:mod:`memvault.core.contradictions`) join the near-identical ones, each with the ``values`` that
        differ; the index's model adds its nearest facts when it is warm (or ``load_model``)."""
        from . import contradictions

        out = contradictions.near_duplicates(self.index, self.facts, self.config, key, text)

        embedder = contradictions.embedder_for(self.index, self.engine, self.config, load=load_model)
        flagged = {m["key"]: m for m in out if m["kind"] == "conflict"}
        for found in contradictions.find(self.index, self.facts, key, text, embedder=embedder):
            if found["key"] in flagged:
                flagged[found["key"]]["values"] = found["values"]
            else:
                out = [m for m in out if m["key"] != found["key"]] + [found]
        return out

    # -- episodes ----------------------------------------------------------------------------------------
    def check_episode(self, text: str, *, source: str, kind: str = "raw", at: datetime | str | None = None,
                      tags: list[str] | None = None, meta: dict[str, Any] | None = None,
                      allow_secret: bool = False, id: str | None = None, run: bool = False) -> tuple[Episode, bytes]:
        """Every check of :meth:`append_episode` (trust, fields, time, size, secrets), nothing written: the episode
        and the line it would append (``id``: an existing episode's, restored; ``run``: a run's own record)."""
        self.require(Op.APPEND_EPISODE, source)
        runs.refuse_forged_run(kind, source, trusted=run or self.policy.is_trusted(source))
        episode, line = self.episodes.make(text, source=source, kind=kind, at=at, tags=tags, meta=meta,
                                           now=self.clock(), id=id)
        if episode.path is not None:
            access.write_or_refuse(self.scopes, source, access.rel(self.root, episode.path), "append an episode to")
        if allow_secret:
            self.require(Op.ALLOW_SECRET, source)
        else:
            findings = episode_secrets(episode.to_dict())
            if findings:
                raise SecretRefused("episode", describe(findings))
        return episode, line

    def append_episode(self, text: str, *, source: str, kind: str = "raw", at: datetime | str | None = None,
                       tags: list[str] | None = None, meta: dict[str, Any] | None = None,
                       allow_secret: bool = False, id: str | None = None, run: bool = False) -> Episode:
        """Append one episode; keyword recall finds it at once (the index reads only the new line)."""
        episode, line = self.check_episode(text, source=source, kind=kind, at=at, tags=tags, meta=meta,
                                           allow_secret=allow_secret, id=id, run=run)
        assert episode.path is not None
        episode.path = self.episodes.append_line(episode.path, line)
        episode.warnings = self.tell_index([episode.path])
        return episode

    def append_episodes(self, items: Sequence[dict[str, Any]], *, source: str | None = None) -> list[Episode]:
        """Append several episodes at once (a captured session, an import): each goes through every check of
        :meth:`append_episode`, and one refusal refuses them all before anything is written; then one write and
        one fsync per month file, and the index told once.

        Each item holds ``text`` and optionally ``kind``, ``at``, ``tags``, ``meta``, ``id`` and ``source`` (an
        item's own source is allowed only for a restore by a trusted ``source``; by default every item gets
        ``source``)."""
        made: list[tuple[Episode, bytes]] = []
        trusted = source is not None and self.policy.is_trusted(source)  # a restore keeps the runs it restores
        for n, item in enumerate(items, 1):
            check_item_fields(item, f"episode {n} of {len(items)}")
            own = item.get("source")
            if own is not None and own != source and not trusted:
                raise UntrustedSource(source or own, "only a trusted source may append episodes of other sources")
            writer = own if own is not None else source
            if writer is None:
                raise UntrustedSource("none", "an episode needs a source")
            try:
                made.append(self.check_episode(item["text"], source=writer, kind=item.get("kind") or "raw",
                                               at=item.get("at"), tags=item.get("tags"), meta=item.get("meta"),
                                               id=item.get("id"), run=trusted))
            except SecretRefused as exc:
                raise SecretRefused(f"episode {n} of {len(items)}", exc.findings) from None
        by_file: dict[Path, list[bytes]] = {}
        for episode, line in made:
            assert episode.path is not None
            by_file.setdefault(episode.path, []).append(line)
        written: dict[Path, Path] = {}
        for path, lines in by_file.items():
            written[path] = self.episodes.append_line(path, b"".join(lines))
        warnings = self.tell_index(list(dict.fromkeys(written.values()))) if written else []
        episodes = [e for e, _ in made]
        for e in episodes:
            assert e.path is not None
            e.path = written[e.path]
            e.warnings = warnings
        return episodes

    def rewrite_episodes(self, report: RewriteReport, *, message: str, source: str,
                         allow_secret: bool = False) -> RewriteReport:
        """Apply a planned rewrite (prune) made under the episode lock the caller still holds; with ``[episodes]
        track_in_git`` each file rewritten is committed through the commit's checks (every line it keeps)."""
        if report.changes:
            self.apply(report.changes, message=message, source=source, commit=self.config.track_episodes,
                       warnings=report.warnings, allow_secret=allow_secret)
            report.warnings += self.tell_index(report.files_changed)
        return report

    # -- procedures --------------------------------------------------------------------------------------
    def add_procedure(self, name: str, source_file: Path, *, source: str, force: bool = False,
                      allow_secret: bool = False) -> Procedure:
        """Copy a runbook in (keeping its mode) and commit it. Runnable code: trusted sources only."""
        self.require(Op.ADD_PROCEDURE, source)
        access.write_or_refuse(self.scopes, source, f"procedures/{name}", "add the procedure")
        warnings: list[str] = []
        with self.lock(source, warnings):
            change, mode = self.procedures.plan_add(name, source_file, force=force)
            self.check_changes([change], what=f"procedure {name}", allow_secret=allow_secret, source=source)
            self.apply([change], message=f"proc add {name}", source=source, key=f"procedure:{name}",
                       modes={change.path: mode}, warnings=warnings, allow_secret=allow_secret)
        warnings += self.tell_index([change.path])
        procedure = self.procedures.get(name, path=change.path)
        procedure.warnings = warnings
        return procedure

    def run_procedure(self, name: str, args: Sequence[str] = (), *, source: str, allow_dirty: bool = False,
                      stdout: IO[Any] | int | None = None, stderr: IO[Any] | int | None = None,
                      cwd: Path | None = None, timeout: float | None = None,
                      stop: threading.Event | None = None, stdin: IO[Any] | int | None = None) -> RunResult:
        """Run a procedure and record the run as a ``procedure_run`` episode with the commit and blob that ran.
        Arguments that look like secrets are recorded as ``<redacted>``. ``stop`` set (from another thread) stops
        the script as a SIGTERM would; the run is recorded as interrupted."""
        self.require(Op.RUN_PROCEDURE, source)
        check_args(args)
        if allow_dirty and not self.policy.is_trusted(source):
            raise UntrustedSource(source, "only a trusted source may run a procedure with uncommitted changes")
        access.refuse_procedure(access.Reader(source, self.scopes.for_source(source), self.root), name,
                                self.procedures.path_of, self.root)
        proc = self.procedures.get(name)
        # The run is recorded as an episode: a source that may not append one is refused before the script starts
        # (a side effect without its record, otherwise).
        self.require(Op.APPEND_EPISODE, source)
        access.write_or_refuse(self.scopes, source, access.rel(self.root, self.episodes.file_for(self.clock())),
                               "record the run in")
        scratch = self.state_dir / "run"  # runs whose memvault was killed are recorded now
        swept = runs.record_dead_runs(scratch, has=self.episodes.has, append=self.append_episode)
        outcome = self.procedures.execute(proc, args, scratch=scratch, allow_dirty=allow_dirty,
                                          stdin=stdin, stdout=stdout, stderr=stderr, cwd=cwd,
                                          record=runs.run_record(proc, args, source, self.clock()),
                                          # its own memvault calls: its runner's trust and scopes, not ours
                                          env={"MEMVAULT_DIR": str(self.root), "MEMVAULT_PROCEDURE": name,
                                               "MEMVAULT_SOURCE": source},
                                          timeout=timeout, stop=stop)
        text, meta = runs.run_episode(proc, outcome)
        try:
            episode = self.append_episode(text, source=source, kind=RUN_KIND, tags=list(proc.tags), meta=meta,
                                          allow_secret=False, run=True)
            episode.warnings += swept
            try:  # running a procedure is using it: what recall's frequency counts
                self.record_use([("procedure", name)], source=source, warnings=episode.warnings)
            except MemvaultError as exc:
                episode.warnings.append(f"use not recorded: {exc}")
        finally:
            pass_on(outcome)  # recorded (or refused): now the ^C or the kill does what it asked
        return RunResult(proc, list(outcome.args), outcome.exit_code, outcome.duration_ms, episode)

    # -- whole-vault operations --------------------------------------------------------------------------
    def remove_facts(self, facts: Sequence[Fact], *, op: Op, message: str, source: str,
                     warnings: list[str] | None = None) -> str | None:
        """Remove several facts (expire) in one commit; ``warnings`` hears what the caller should know."""
        self.require(op, source)
        warnings = warnings if warnings is not None else []
        with self.lock(source, warnings):
            changes = [self.facts.plan_delete(f.key, inbox=f.quarantined)[0] for f in facts]
            commit = self.apply(changes, message=message, source=source, warnings=warnings)
        warnings += self.tell_index([c.path for c in changes])
        return commit

    def merge_facts(self, plans: Sequence[tuple[Fact, dict[str, Any], Sequence[Fact]]], *, message: str,
                    source: str, warnings: list[str] | None = None, allow_secret: bool = False) -> str | None:
        """Dedup: each (survivor, its new fields, the members merged into it), all in one commit."""
        self.require(Op.DEDUP, source)
        warnings = warnings if warnings is not None else []
        with self.lock(source, warnings):
            changes: list[FileChange] = []
            for survivor, fields, others in plans:
                changes.append(self.facts.plan_update(survivor, fields))
                changes += [self.facts.plan_delete(f.key)[0] for f in others]
            commit = self.apply(changes, message=message, source=source, warnings=warnings, allow_secret=allow_secret)
        warnings += self.tell_index([c.path for c in changes])
        return commit

    def set_model(self, model: str, *, source: str, this_host: bool = False) -> list[str]:
        """Set ``[embedding] model``: in memvault.toml, committed (a name every host can load), or with
        ``this_host`` in this host's ``local.toml`` (in the state directory), never committed (a directory of this
        machine). Setting a name for the vault drops this host's override, which would otherwise still win. Returns
        what the caller should know."""
        from ..rules.config import local_path, set_local_model, set_model

        self.require(Op.CONFIGURE, source)
        path = self.root / CONFIG_NAME
        local = local_path(path)
        warnings: list[str] = []
        with self.lock(source, warnings):
            if this_host or local.is_file():
                atomic_write(local, set_local_model(path, model if this_host else None).encode("utf-8"))
            if not this_host:
                before = path.read_bytes() if path.exists() else None
                change = FileChange(path, before, set_model(path, model).encode("utf-8"))
                self.apply([change], message=f"embedding model {model}", source=source, warnings=warnings)
        return warnings

    def state(self) -> State:
        return self._state()

    def used(self, refs: Sequence[str], *, source: str) -> Counted:
        """Count a use of each memory named that exists and ``source`` may read (see :func:`.usage.used`)."""
        from .usage import used

        return used(self, refs, source=source)

    def record_use(self, keys: Sequence[tuple[str, str]], *, source: str,
                   warnings: list[str] | None = None) -> list[tuple[str, str]]:
        """Count a use of each memory; the usage state's own news (a damaged file moved aside) go to ``warnings``."""
        self.require(Op.RECORD_USE, source)
        state = self._state()
        try:
            return state.record_use(keys, source=source, limited=not self.policy.is_trusted(source))
        finally:
            if warnings is not None:
                warnings += getattr(state, "warnings", [])
            if getattr(state, "warnings", None):
                state.warnings.clear()


def _current(path: Path) -> bytes | None:
    """What a commit of ``path`` would record now: its bytes, None when gone (a link is not read: refused anyway)."""
    if path.is_symlink():
        return b""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


def _prune_empty_dirs(start: Path, stop: Path) -> None:
    """Remove folders left empty by a delete, up to (not including) the vault area they are in."""
    current = start
    while current != stop and stop in current.parents and len(current.relative_to(stop).parts) > 1:
        try:
            if not remove_dir(current):
                return
        except (OSError, MemvaultError):
            return
        current = current.parent

