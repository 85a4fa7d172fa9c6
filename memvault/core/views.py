"""The facade's views: ``vault.facts``, ``vault.episodes``, ``vault.procedures``.

Reads go to the stores, filtered by what the reader may read (``[scopes]``, :mod:`memvault.core.access`); writes
go through the vault's one write gate.
"""
from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import date, datetime
from pathlib import Path
from typing import IO, Any

from ..rules.errors import FactParseError, SecretRefused
from ..rules.trust import Policy
from ..rules.validation import Problem
from ..stores.episodes import Episode, EpisodeLog
from ..stores.facts import Fact
from ..stores.gitstore import LogEntry
from ..stores.procedures import Procedure, ProcedureStore, RunResult
from .access import refuse_procedure

#: The facade the views belong to (memvault.core.vault.Vault, which builds them: not imported back, so the two
#: modules form no cycle).
Vault = Any

NEW_FACT_TEMPLATE = """---
category:
importance: 0.5
tags: []
---
"""


# ------------------------------------------------------------------------------------------------ views
class Told:
    """The problems a read meets, as its reader may be told them: none about a file outside its read scope (the
    path of an unreadable file is news of what is there), and those it is told by their path in the vault, not the
    host's (:meth:`Problem.in_vault`: the user's home layout is no part of any read scope). ``into`` is the
    caller's list; unscoped, it is passed to the store as it is (a person at the host may open the path)."""

    def __init__(self, vault: Vault, reader: str | None, into: list[Problem] | None, *, target: bool = False) -> None:
        self.who = vault.reader(reader)
        self.root = vault.root
        self.into = into
        self.target = target
        self.met: list[Problem] | None = [] if into is not None and self.who.scope is not None else into

    def tell(self) -> None:
        if self.met is self.into or self.into is None or self.met is None:
            return
        self.into.extend(p.in_vault(self.root) for p in self.met if self._may_read(p.path))
        self.met.clear()

    def _may_read(self, path: Path) -> bool:
        try:
            rel = Path(path).relative_to(self.root).as_posix()
        except ValueError:
            return False
        if self.target and rel.startswith("inbox/"):  # a proposal is read as the fact it is for
            rel = "facts/" + rel[len("inbox/"):]
        return self.who.allows(rel)


class Facts:
    """``vault.facts``: read facts from the store, write them through the gate."""

    def __init__(self, vault: Vault) -> None:
        self._vault = vault
        self.store = vault._facts
        self.dir = self.store.dir
        self.inbox_dir = self.store.inbox_dir

    def get(self, key: str, *, reader: str | None = None) -> Fact:
        """The fact stored under ``key``. Raises FactNotFound, InvalidKey or FactParseError, and ScopeRefused when
        ``reader`` (default: who the vault acts for) may not read it, before the file is read."""
        self._vault.reader(reader).refuse(self._rel(self.store.path_for(key)), f"fact {key}")
        return self.store.get(key)

    def _rel(self, path: Path) -> str:
        return path.relative_to(self._vault.root).as_posix()

    def _readable(self, facts: Iterable[Fact], reader: str | None, *, target: bool = False) -> list[Fact]:
        """The facts ``reader`` may read (a proposal: the fact it is for, when ``target``)."""
        who = self._vault.reader(reader)
        if who.scope is None:
            return list(facts)

        def path(f: Fact) -> str:
            key = f.extra.get("proposes") if isinstance(f.extra.get("proposes"), str) else f.key
            return self._rel(self.store.path_for(key)) if target else self._rel(f.path)
        return [f for f in facts if who.allows(path(f))]

    def exists(self, key: str) -> bool:
        return self.store.exists(key)

    def path_for(self, key: str, *, inbox: bool = False) -> Path:
        return self.store.path_for(key, inbox=inbox)

    def iter(self, problems: list[Problem] | None = None, *, inbox: bool = False,
             reader: str | None = None) -> Iterator[Fact]:
        who = self._vault.reader(reader)
        told = Told(self._vault, reader, problems, target=inbox)
        for fact in self.store.iter(told.met, inbox=inbox):
            told.tell()
            if who.scope is None or self._readable([fact], reader, target=inbox):
                yield fact
        told.tell()

    def list(self, category: str | None = None, tag: str | None = None,
             problems: list[Problem] | None = None, *, reader: str | None = None) -> list[Fact]:
        told = Told(self._vault, reader, problems)
        facts = self._readable(self.store.list(category, tag, told.met), reader)
        told.tell()
        return facts

    def inbox(self, problems: list[Problem] | None = None, *, reader: str | None = None) -> list[Fact]:
        told = Told(self._vault, reader, problems, target=True)
        facts = self._readable(self.store.inbox(told.met), reader, target=True)
        told.tell()
        return facts

    def is_trusted(self, source: str | None) -> bool:
        return Policy(self._vault.config.trust.trusted).is_trusted(source)

    def set(self, key: str, text: str, *, category: str | None = None, importance: float | None = None,
            confidence: float | None = None, source: str | None = None, tags: list[str] | None = None,
            valid_until: date | str | None = None, message: str | None = None, allow_secret: bool = False) -> Fact:
        """Create or replace the fact ``key`` (see :meth:`memvault.core.gate.WriteGate.set_fact`): committed, indexed;
        from an untrusted source a proposal in ``inbox/`` (``fact.quarantined``). ``fact.similar`` lists
        near-duplicates and conflicts, ``fact.warnings`` what else the caller should know."""
        return self._vault.gate.set_fact(key, text, source=self._vault._source(source), category=category,
                                         importance=importance, confidence=confidence, tags=tags,
                                         valid_until=valid_until, message=message, allow_secret=allow_secret)

    def write_text(self, key: str, text: str, *, source: str | None = None, message: str | None = None,
                   allow_secret: bool = False, based_on: str | None = None) -> Fact:
        """Replace the whole file of ``key`` with ``text`` (as from an editor, which started from ``based_on``)
        after validating it."""
        return self._vault.gate.replace_fact(key, text, source=self._vault._source(source), message=message,
                                             allow_secret=allow_secret, based_on=based_on)

    def delete(self, key: str, *, source: str | None = None, message: str | None = None) -> Fact:
        return self._vault.gate.delete_fact(key, source=self._vault._source(source), message=message)

    def accept(self, key: str, *, source: str | None = None) -> Fact:
        return self._vault.gate.accept(key, source=self._vault._source(source))

    def reject(self, key: str, *, source: str | None = None) -> Fact:
        return self._vault.gate.reject(key, source=self._vault._source(source))

    def proposals(self, problems: list[Problem] | None = None, *,
                  reader: str | None = None) -> list[tuple[Fact, bool]]:
        """The inbox, each proposal with whether it would change an existing fact (an alternative proposal names
        the fact it is for in ``extra["proposes"]``): those whose fact ``reader`` may read."""
        out = []
        for f in self.inbox(problems, reader=reader):
            target = f.extra.get("proposes")
            out.append((f, self.store.exists(target if isinstance(target, str) else f.key)))
        return out

    def edit(self, key: str, editor: Callable[[str], str], *, again: Callable[[Exception], bool] | None = None,
             source: str | None = None, allow_secret: bool = False) -> Fact | None:
        """Edit the whole file of ``key`` with ``editor`` (text in, text out; a new fact starts from a template).

        The file changes only when the edit is valid; an invalid edit is offered back to ``editor`` while
        ``again(error)`` says so, else the error is raised. None when nothing changed.
        """
        path = self.store.path_for(key)
        # The editor is shown the file: a read, refused as `fact get` is before anything is read.
        self._vault.reader(source).refuse(self._rel(path), f"fact {key}")
        original = path.read_text(encoding="utf-8") if path.is_file() else NEW_FACT_TEMPLATE
        text = original
        while True:
            text = editor(text)
            if text == original:
                return None
            try:
                return self.write_text(key, text, source=source, allow_secret=allow_secret,
                                       based_on=original if path.is_file() else None)
            except (FactParseError, SecretRefused) as exc:
                if again is None or not again(exc):
                    raise

    def similar(self, key: str, text: str, *, load_model: bool = False) -> list[dict[str, Any]]:
        return self._vault.gate.similar_facts(key, text, load_model=load_model)

    def contradicts(self, proposal: Fact, *, reader: str | None = None) -> list[dict[str, Any]]:
        """The stored facts a proposal contradicts, ``[{key, values}]`` (the index's model used when it has one:
        a person reviewing can wait for it); one ``reader`` (default: who the vault acts for) may not read is
        named by no key and quotes no value."""
        from .access import shown_match

        target = proposal.extra.get("proposes")
        key = target if isinstance(target, str) else proposal.key
        who = self._vault.reader(reader).source
        found = [shown_match(self._vault.config.scopes, who, m, self._vault.root)
                 for m in self.similar(key, proposal.text, load_model=True) if m["kind"] == "conflict"]
        return [{"key": m["key"], "values": m.get("values", {})} for m in found]

    def history(self, key: str, *, follow: bool = True, reader: str | None = None,
                limit: int | None = None) -> list[LogEntry]:
        """The fact's git history, newest first, each entry with its diff (see :meth:`Vault.git_log`; ``limit``: the
        newest that many commits). ScopeRefused
        when ``reader`` (default: who the vault acts for) may not read it; for a scoped reader the history is that
        of its path only: ``follow`` would go on into the file it was renamed or copied from, another path."""
        path = self.store.path_for(key)
        who = self._vault.reader(reader)
        who.refuse(self._rel(path), f"fact {key}")
        return self._vault.git_log(path, follow=follow and who.scope is None, limit=limit)


class Episodes:
    """``vault.episodes``: read the log, append through the gate."""

    def __init__(self, vault: Vault) -> None:
        self._vault = vault
        self.store: EpisodeLog = vault._episodes
        self.dir = self.store.dir

    def append(self, text: str, *, source: str | None = None, kind: str = "raw", at: datetime | str | None = None,
               tags: list[str] | None = None, meta: dict[str, Any] | None = None, allow_secret: bool = False) -> Episode:
        """Append one episode as one whole line; keyword recall finds it at once. Returns it as stored."""
        return self._vault.gate.append_episode(text, source=self._vault._source(source), kind=kind, at=at, tags=tags,
                                               meta=meta, allow_secret=allow_secret)

    def append_many(self, items: Sequence[dict[str, Any]], *, source: str | None = None) -> list[Episode]:
        """Append several episodes in one write per month file (see
        :meth:`memvault.core.gate.WriteGate.append_episodes`): all of them, or none when one is refused."""
        return self._vault.gate.append_episodes(items, source=self._vault._source(source))

    def iter(self, *, reader: str | None = None, **filters: Any) -> Iterator[Episode]:
        """The episodes (``filters``: see the store) that ``reader`` (default: who the vault acts for) may read."""
        told = Told(self._vault, reader, filters.pop("problems", None))
        for episode in self._vault.reader(reader).only(self.store.iter(problems=told.met, **filters),
                                                       lambda e: e.path, self._vault.root):
            told.tell()
            yield episode
        told.tell()

    def list(self, *, limit: int | None = None, reader: str | None = None, **filters: Any) -> list[Episode]:
        who = self._vault.reader(reader)
        if who.scope is None:
            return self.store.list(limit=limit, **filters)
        # Filtered before the limit: what the caller may not read never takes a place in its answer.
        told = Told(self._vault, reader, filters.pop("problems", None))
        root = self._vault.root
        items = self.store.list(limit=limit, problems=told.met, keep=lambda e: e.path is not None and who.allows(
            e.path, root if Path(e.path).is_absolute() else None), **filters)
        told.tell()
        return items

    def files(self) -> list[Path]:
        return self.store.files()

    def file_for(self, at: datetime) -> Path:
        return self.store.file_for(at)


class Procedures:
    """``vault.procedures``: read runbooks whole with their provenance; add and run them through the gate."""

    def __init__(self, vault: Vault) -> None:
        self._vault = vault
        self.store: ProcedureStore = vault._procedures
        self.dir = self.store.dir

    def get(self, name: str, *, path: Path | None = None, reader: str | None = None) -> Procedure:
        """The runbook ``name``; ScopeRefused when ``reader`` may not read it (its text is not returned)."""
        who = self._vault.reader(reader)
        refuse_procedure(who, name, self.store.path_of if path is None else lambda _: path, self._vault.root)
        return self.store.get(name, path=path)

    def list(self, problems: list[Problem] | None = None, *, reader: str | None = None) -> list[Procedure]:
        told = Told(self._vault, reader, problems)
        found = list(self._vault.reader(reader).only(self.store.list(told.met), lambda p: Path(p.path),
                                                     self._vault.root))
        told.tell()
        return found

    def add(self, name: str, source_file: Path | str, *, force: bool = False, source: str | None = None,
            allow_secret: bool = False) -> Procedure:
        return self._vault.gate.add_procedure(name, Path(source_file), source=self._vault._source(source),
                                              force=force, allow_secret=allow_secret)

    def run(self, name: str, args: Sequence[str] = (), *, allow_dirty: bool = False, source: str | None = None,
            stdout: IO[Any] | int | None = None, stderr: IO[Any] | int | None = None, cwd: Path | None = None,
            timeout: float | None = None, stop: threading.Event | None = None,
            stdin: IO[Any] | int | None = None) -> RunResult:
        """Run ``name`` and record the run; ``stop``, once set from another thread, stops the script (as SIGTERM).
        ``stdin`` is its input (default: this process's, a person's terminal)."""
        return self._vault.gate.run_procedure(name, args, source=self._vault._source(source), allow_dirty=allow_dirty,
                                              stdin=stdin, stdout=stdout, stderr=stderr, cwd=cwd, timeout=timeout,
                                              stop=stop)
