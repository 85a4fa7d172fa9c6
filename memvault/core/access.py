"""Where a source may act: the write gate's and the read path's questions to ``[scopes]`` (memvault.rules.scopes),
and who may review a proposal.

Kept beside the gate rather than in it: the gate asks before each write (:func:`write_or_refuse`,
:func:`fact_route`, :func:`review_or_refuse`), the facade before each read (:func:`Reader`). A source no scope names
gets None from every question that would limit it, so it behaves as before scopes existed.
"""
from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from ..rules.errors import MemvaultError, ScopeRefused
from ..rules.scopes import Scope, Scopes
from ..rules.trust import Op
from ..rules.validation import validate_name

T = TypeVar("T")

#: Whole-vault operations: no path says where they act, so a scoped source may not run them at all.
WHOLE_VAULT = frozenset({Op.PRUNE, Op.ACCEPT_RETENTION, Op.PURGE, Op.DEDUP, Op.EXPIRE, Op.CONFIGURE, Op.SYNC,
                         Op.COMMIT_EDITS, Op.HOOKS})
SAID = "in memvault.toml [scopes]"


def rel(root: Path, path: Path | str) -> str:
    """``path`` relative to the vault, with forward slashes (what scope patterns are matched against)."""
    p = Path(path)
    return (p.relative_to(root) if p.is_absolute() else p).as_posix()


def whole_vault_or_refuse(scopes: Scopes, op: Op, source: str) -> None:
    if op in WHOLE_VAULT and scopes.for_source(source) is not None:
        raise ScopeRefused(source, f"{op.value.replace('_', ' ')}: a scoped source acts only on its paths ({SAID})")


def write_or_refuse(scopes: Scopes, source: str, path: str, what: str) -> None:
    """Refuse a write of ``path`` (vault-relative) outside ``source``'s ``write`` paths, nothing written."""
    scope = scopes.for_source(source)
    if scope is not None and not scope.may("write", path):
        raise ScopeRefused(source, f"{what} {path}: outside its write scope {SAID}")


def fact_route(scopes: Scopes, source: str, path: str) -> bool:
    """For a fact write of ``path``: True when it must become a proposal because of ``source``'s scope (outside
    ``write``, inside ``propose``); raises :class:`ScopeRefused` when it is in neither."""
    scope = scopes.for_source(source)
    if scope is None or scope.may("write", path):
        return False
    if scope.may("propose", path):
        return True
    raise ScopeRefused(source, f"write {path}: outside its write and propose scopes {SAID}; nothing was written")


#: Why a trusted source's fact write became a proposal (the CLI's line says it instead of "not trusted").
SCOPE_PROPOSAL = f"outside its write scope, inside its propose scope {SAID}"


def auto_accept(scopes: Scopes, source: str, path: str) -> tuple[str, str] | None:
    """For a proposal of ``source`` for the fact at ``path``: (the scope's name, the ``auto_accept`` pattern) of the
    rule that accepts it at once, or None. The gate still refuses a secret and keeps a contradiction for a person."""
    scope = scopes.for_source(source)
    pattern = scope.accepts(path) if scope is not None else None
    return (scope.source, pattern) if scope is not None and pattern is not None else None


#: What a report says instead of the key of a stored fact its reader may not read (a duplicate, a contradiction).
OUTSIDE = "(a fact outside its read scope)"


def fact_readable(scopes: Scopes, source: str, key: str, root: Path | None = None) -> bool:
    """Whether ``source`` may read the fact ``key``; with the vault's ``root``, a fact file that is a link is read as
    what it points at (:meth:`Reader.allows`)."""
    return Reader(source, scopes.for_source(source), root).allows(f"facts/{key}.md")


def within(scopes: Scopes, source: str, matches: list[dict[str, Any]],
           root: Path | None = None) -> tuple[list[dict[str, Any]], int]:
    """The matches (``{"key": ...}``: near-duplicates, contradictions) whose fact ``source`` may read, and how many
    others there were: a write's answer never names a fact, nor quotes a value, outside the writer's read scope."""
    shown = [m for m in matches if fact_readable(scopes, source, m["key"], root)]
    return shown, len(matches) - len(shown)


def shown_match(scopes: Scopes, source: str, match: dict[str, Any], root: Path | None = None) -> dict[str, Any]:
    """``match`` as a report to ``source`` shows it: unchanged when it may read that fact, else with no key, no
    differing words and no values (they quote the stored text)."""
    if fact_readable(scopes, source, match["key"], root):
        return match
    return {"key": OUTSIDE, "kind": match.get("kind"), "differing": [], "values": {}}


def may_supersede(scopes: Scopes, source: str, path: str) -> bool:
    """Whether ``source``'s accept of a proposal may mark the stored fact at ``path`` (vault-relative) superseded.
    That is a change to that fact, which recall then hides from every reader: only where ``source``'s ``review``
    paths reach (a source no scope names: as before, the trust table decides who accepts at all)."""
    scope = scopes.for_source(source)
    return scope is None or scope.may("review", path)


def review_or_refuse(scopes: Scopes, source: str, proposer: str | None, path: str, action: str) -> None:
    """No self-approval: a proposal is never accepted or rejected by its own source, nor by an ``agent:`` source
    (or a scoped one) unless a scope grants it ``review`` over the target fact's ``path``. A person can."""
    if proposer is not None and proposer == source:
        raise ScopeRefused(source, f"{action} its own proposal for {path}: another source (a person) reviews it")
    scope = scopes.for_source(source)
    if scope is None and not source.startswith("agent:"):
        return
    if scope is None or not scope.may("review", path):
        folder = path.rpartition("/")[0] or path
        raise ScopeRefused(source, f"{action} the proposal for {path}: no review scope over it; a person reviews it, "
                                   f'or memvault.toml grants it: review = ["{folder}/**"] in '
                                   f'[scopes."{scope.source if scope is not None else source}"]')


def refuse_procedure(reader: Reader, name: str, path_of: Callable[[str], Path | None], root: Path) -> None:
    """Refuse the runbook ``name`` to ``reader`` unless the file it names (``path_of(name)``, asked only of a scoped
    reader; None, or an error: no such file) is in its read scope. The file decides, never the name: the runbook
    "web" is ``procedures/web.sh``, beside a folder ``procedures/web/`` a pattern may cover. A name with no file is
    refused unless a file of that name in the scope could exist; the line is the same either way (it never says
    whether, nor with what extension, a file outside exists). Asked before the store, whose "no procedure named"
    would be news of what is not there."""
    if reader.scope is None:
        return
    validate_name(name)  # a name no file can have says nothing of the vault: told as such, never echoed whole
    try:
        found = path_of(name)
    except MemvaultError:
        found = None
    where = rel(root, found) if found is not None else f"procedures/{name}.x"
    if not reader.allows(where, root):
        raise ScopeRefused(reader.source, f"read procedure {name} (procedures/{name}): outside its read scope {SAID}")


@dataclass(frozen=True)
class Reader:
    """What one source may read: ``allows(path)``; ``scope`` None means the whole vault. With the vault's ``root``
    (resolved), a path that leads through a link is read as what the link points at, and must be allowed too."""

    source: str
    scope: Scope | None
    root: Path | None = None

    def allows(self, path: Path | str, root: Path | None = None) -> bool:
        if self.scope is None:
            return True
        base = root if root is not None else self.root
        where = rel(base, path) if base is not None else Path(path).as_posix()
        return self.scope.may("read", where) and (base is None or self._target_allowed(base, where))

    def _target_allowed(self, base: Path, where: str) -> bool:
        """Whether what ``where`` (vault-relative) leads to is readable: a link under a readable folder
        (facts/web/x.md -> ../db/main.md, a teammate's commit) gives the text of the file it points at, and the
        scope is about that text. A path with no link on the way (or no file yet) is itself."""
        full = base / where
        real = Path(os.path.realpath(full))
        if real == full:
            return True
        try:
            target = real.relative_to(base).as_posix()
        except ValueError:
            # Out of the vault: no store reads through it (each refuses it as a problem), and a problem with a
            # file under the scope's paths is the reader's to hear.
            return True
        return self.scope is not None and self.scope.may("read", target)

    def test(self, root: Path) -> Callable[[str], bool] | None:
        """A test of vault-relative paths for recall (None: nothing to filter)."""
        return None if self.scope is None else (lambda path: self.allows(path))

    def only(self, items: Iterable[T], path: Callable[[T], Path | str | None], root: Path) -> Iterator[T]:
        """The items whose path this source may read (an item without a path is kept only when unscoped)."""
        for item in items:
            p = path(item)
            if self.scope is None or (p is not None and self.allows(p, root if Path(p).is_absolute() else None)):
                yield item

    def refuse(self, path: str, what: str) -> None:
        """Refuse a read of ``path`` outside the scope, before anything is read (no text, not whether it exists)."""
        if not self.allows(path):
            raise ScopeRefused(self.source, f"read {what} ({path}): outside its read scope {SAID}")
