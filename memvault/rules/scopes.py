"""Scopes: which paths of the vault a source may read, write, propose to and review (``[scopes]`` in memvault.toml).

The trust table (:mod:`memvault.rules.trust`) says *what* a source may do; a scope says *where*. A source that
matches a scope's pattern (fnmatch, as ``[trust] trusted``) reads only its ``read`` paths, writes only its
``write`` paths, proposes facts under its ``propose`` paths (a fact write outside ``write`` but inside
``propose`` becomes a proposal) and accepts or rejects proposals for facts under its ``review`` paths. A source no
scope matches is governed by the trust table alone, as before scopes existed.

``auto_accept`` is the one right that lets a write skip a person: a proposal of the scope's own source for a fact
under these paths is accepted at once by the rule (the commit names it), unless the gate flags it (a secret is
refused as ever; a contradiction of a stored fact waits in the inbox). Because a teammate can commit memvault.toml,
the rule is bounded where it is read (:func:`check_auto_accept`): it names one source (no wildcard in the scope's
name), its paths are fact paths at least two folders deep (``facts/agents/deployer/**``, never ``facts/**`` or
``facts/*/**``), and each lies within one of the same scope's ``propose`` patterns.

Paths are CODEOWNERS-style patterns over the vault's own files, from its root: ``*`` is any run of characters in
one folder name, ``**`` any number of folders, a trailing ``/`` (or a last part without ``*``) a folder and
everything below it: ``facts/web/**`` = ``facts/web/`` = ``facts/web``. Pure functions, no I/O: the facade
(:mod:`memvault.core.vault`, :mod:`memvault.core.gate`) asks them with vault-relative paths.
"""
from __future__ import annotations

import difflib
import fnmatch
import functools
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

#: What a scope grants, in the order people read it.
RIGHTS = ("read", "write", "propose", "review", "auto_accept")
#: The vault's own top folders: a pattern must start in one of them (or with a wildcard), so a typo such as
#: ``fact/web/**`` is refused at load instead of silently granting nothing.
TOP = ("facts", "procedures", "episodes", "inbox")
#: The most path patterns one right of one scope may list (a pushed file of 10,000 made each recall take 32 s).
MAX_PATTERNS = 1000
_SOURCE_PATTERN = re.compile(r"[A-Za-z0-9*?\[\]_.-]+:[A-Za-z0-9*?\[\]_.@/+-]*")


class ScopeSyntax(ValueError):
    """A pattern or a scope table that is not valid; the config loader names the file and the scope."""


@functools.lru_cache(maxsize=1024)
def _regex(pattern: str) -> re.Pattern[str]:
    body = pattern.strip("/")
    parts = body.split("/")
    folder = pattern.endswith("/") or "*" not in parts[-1] and "?" not in parts[-1]
    out = []
    for i, part in enumerate(parts):
        if part == "**":
            out.append("(?:[^/]+/)*" if i < len(parts) - 1 else ".*")
            continue
        piece = "".join("[^/]*" if c == "*" else "[^/]" if c == "?" else re.escape(c) for c in part)
        out.append(piece + ("/" if i < len(parts) - 1 else ""))
    text = "".join(out)
    # A trailing "/" says folder: what is in it, as "folder/**" (never a file of the folder's own name, such as the
    # runbook procedures/web beside procedures/web/); a last part without a wildcard may be either.
    inside = pattern.endswith("/") and parts[-1] != "**"  # "facts/web/**/" is "facts/web/**"
    return re.compile(text + ("/.+" if inside else "(?:/.*)?" if folder else ""), re.S)


def _plain(path: str) -> str | None:
    """``path`` without its outer slashes, or None when it is not plain (``..``, ``.``, ``//``, a backslash)."""
    plain = path.strip("/")
    if "\\" in plain or any(part in ("", ".", "..") for part in plain.split("/")):
        return None
    return plain


def matches(pattern: str, path: str) -> bool:
    """Whether the vault-relative ``path`` (``facts/web/nginx.md``) falls under ``pattern``. A path that is not plain
    (``..``, ``.``, ``//``, a backslash) falls under none: ``facts/web/../db/main.md`` is not in ``facts/web/``."""
    plain = _plain(path)
    return plain is not None and _regex(pattern).fullmatch(plain) is not None


@functools.lru_cache(maxsize=256)
def _any_of(patterns: tuple[str, ...]) -> re.Pattern[str]:
    """One expression matching what any of ``patterns`` matches: a scope's paths are tested against every file a
    recall reads, and one pattern at a time through ``_regex``'s cache thrashed it past 1,024 patterns."""
    return re.compile("|".join(f"(?:{_regex(p).pattern})" for p in patterns), re.S)


def check_pattern(pattern: Any) -> str:
    """``pattern`` when it is a valid path pattern, else :class:`ScopeSyntax` saying why."""
    if not isinstance(pattern, str) or not pattern.strip():
        raise ScopeSyntax(f"{pattern!r} is not a path pattern (a string like \"facts/web/**\")")
    if any(ord(c) < 32 or ord(c) == 127 for c in pattern):  # a newline forged lines of `memvault scopes`
        raise ScopeSyntax(f"{pattern[:80]!r}: a path pattern holds no control character")
    parts = pattern.strip("/").split("/")
    if any(p in ("", ".", "..") for p in parts) or "\\" in pattern:
        raise ScopeSyntax(f"{pattern!r}: a path pattern is a plain path from the vault's root (no '..', '//' or '\\')")
    if any("**" in p and p != "**" for p in parts):
        raise ScopeSyntax(f"{pattern!r}: '**' stands alone between slashes (facts/**/nginx.md)")
    first = parts[0]
    if first not in TOP and "*" not in first and "?" not in first:
        hint = difflib.get_close_matches(first, TOP, n=1)
        raise ScopeSyntax(f"{pattern!r} names no folder of the vault (" + (f"did you mean {hint[0]}/?" if hint else
                          "it starts with " + ", ".join(f"{t}/" for t in TOP)) + ")")
    return pattern


@dataclass(frozen=True)
class Scope:
    """One ``[scopes."PATTERN"]`` table: the sources it governs and the paths of each right."""

    source: str
    read: tuple[str, ...] = ()
    write: tuple[str, ...] = ()
    propose: tuple[str, ...] = ()
    review: tuple[str, ...] = ()
    auto_accept: tuple[str, ...] = ()

    def may(self, right: str, path: str) -> bool:
        """Whether this scope grants ``right`` (read, write, propose, review) over ``path``."""
        patterns = getattr(self, right)
        plain = _plain(path) if patterns else None
        return plain is not None and _any_of(patterns).fullmatch(plain) is not None

    def accepts(self, path: str) -> str | None:
        """The ``auto_accept`` pattern that accepts a proposal of this scope's source for ``path`` (which must also
        lie in its ``propose`` paths: checked again here, not only at load), or None."""
        if not self.may("propose", path):
            return None
        return next((p for p in self.auto_accept if matches(p, path)), None)

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, **{right: list(getattr(self, right)) for right in RIGHTS}}


@dataclass(frozen=True)
class Scopes:
    """Every scope of a vault, in file order."""

    entries: tuple[Scope, ...] = ()

    def for_source(self, source: str | None) -> Scope | None:
        """The scope governing ``source``: the one naming it exactly, else the first whose pattern matches it;
        None for a source no scope names (and for None, a file a person wrote by hand)."""
        if source is None:
            return None
        for scope in self.entries:
            if scope.source == source:
                return scope
        return next((s for s in self.entries if fnmatch.fnmatchcase(source, s.source)), None)

    def reader(self, source: str | None) -> Callable[[str], bool] | None:
        """A test of vault-relative paths ``source`` may read, or None when nothing limits its reads."""
        scope = self.for_source(source)
        return None if scope is None else functools.partial(scope.may, "read")


def _folder(pattern: str) -> str | None:
    """The literal folder a pattern covers whole (``facts/a/**``, ``facts/a/``, ``facts/a`` -> ``facts/a``), or None
    when it has a wildcard before its end or names files (``facts/*.md``)."""
    parts = pattern.strip("/").split("/")
    if parts[-1] == "**":
        parts = parts[:-1]
    elif not (pattern.endswith("/") or not any(c in parts[-1] for c in "*?[")):
        return None
    return "/".join(parts) if parts and not any(c in p for p in parts for c in "*?[") else None


def check_auto_accept(source: str, pattern: str, propose: tuple[str, ...]) -> str:
    """``pattern`` when it may stand in ``auto_accept`` of the scope of ``source`` beside its ``propose``, else
    :class:`ScopeSyntax` saying which limit it breaks (see the module doc: a committed memvault.toml is data to
    check, and this right skips a person)."""
    if any(c in source for c in "*?["):
        raise ScopeSyntax(f"only a scope that names one source may have it, not the pattern {source!r}: a rule "
                          "that accepts without a person says whose proposals it takes")
    parts = pattern.strip("/").split("/")
    literal = []
    for part in parts:
        if any(c in part for c in "*?["):
            break
        literal.append(part)
    if literal and literal[0] != "facts":
        raise ScopeSyntax(f"{pattern!r}: only proposals of facts are accepted by a rule (a path under facts/)")
    if len(literal) < 3:
        raise ScopeSyntax(f"{pattern!r} is too wide for auto_accept: name the source's own folder, at least two "
                          "folders deep, before any wildcard (facts/agents/deployer/**)")
    # Every path the pattern matches starts with its literal folders: within a propose folder when those are.
    head = "/".join(literal)
    for outer in propose:
        wide = _folder(outer)
        if outer.strip("/") == pattern.strip("/") or (wide is not None and (head + "/").startswith(wide + "/")):
            return pattern
    raise ScopeSyntax(f"{pattern!r} is not within its propose patterns ({', '.join(propose) or 'none'}): a rule "
                      "accepts only what the source may propose")


def parse(raw: Any) -> Scopes:
    """The ``[scopes]`` table of memvault.toml, validated; :class:`ScopeSyntax` names the scope and key at fault."""
    if not isinstance(raw, dict):
        raise ScopeSyntax('must be tables like [scopes."agent:deployer"] with read, write, propose, review and '
                          'auto_accept lists')
    entries = []
    for source, table in raw.items():
        where = f'[scopes."{source}"]'
        if not _SOURCE_PATTERN.fullmatch(source):
            raise ScopeSyntax(f"{where}: {source!r} is not a source pattern like \"agent:deployer\" or \"agent:*\"")
        if not isinstance(table, dict):
            raise ScopeSyntax(f"{where} must be a table with read, write, propose and review lists")
        rights: dict[str, tuple[str, ...]] = {}
        for key, value in table.items():
            if key not in RIGHTS:
                hint = difflib.get_close_matches(key, RIGHTS, n=1)
                raise ScopeSyntax(f"{where} has no right {key!r}" + (f" (did you mean {hint[0]!r}?)" if hint else
                                                                     f" (known: {', '.join(RIGHTS)})"))
            if not isinstance(value, list):
                raise ScopeSyntax(f'{where} {key} must be a list of path patterns like ["facts/web/**"]')
            if len(value) > MAX_PATTERNS:
                raise ScopeSyntax(f"{where} {key} lists {len(value)} patterns, at most {MAX_PATTERNS}: name folders "
                                  "(facts/web/**) rather than files")
            try:
                rights[key] = tuple(check_pattern(p) for p in value)
            except ScopeSyntax as exc:
                raise ScopeSyntax(f"{where} {key}: {exc}") from None
        try:
            for pattern in rights.get("auto_accept", ()):
                check_auto_accept(source, pattern, rights.get("propose", ()))
        except ScopeSyntax as exc:
            raise ScopeSyntax(f"{where} auto_accept: {exc}") from None
        entries.append(Scope(source, **rights))
    return Scopes(tuple(entries))


def describe(scopes: Scopes) -> list[str]:
    """Who may do what, one block per scope, for people (``memvault scopes``)."""
    if not scopes.entries:
        return ["no [scopes] in memvault.toml: every source reads the whole vault and writes as [trust] says"]
    lines = []
    for scope in scopes.entries:
        lines.append(f"{scope.source}:")
        for right in RIGHTS:
            paths = getattr(scope, right)
            lines.append(f"  {right:<11} {', '.join(paths) if paths else '(nothing)'}")
    lines.append("other sources: the whole vault, as [trust] says; agent: sources review only where a scope "
                 "grants it, and no source accepts or rejects its own proposal (auto_accept: a rule in memvault.toml "
                 "does, recorded in the commit)")
    return lines
