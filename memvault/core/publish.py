"""What a team host has pushed, and publishing it: git's side of a team's shared index.

The shared index holds what the team has pushed: the vault's files as a commit has them (normally the upstream of
the current branch, else ``HEAD`` when there is no remote). :func:`split` asks git (three calls, whatever the
vault's size) which vault paths differ here from a commit; :func:`publish` brings the shared index to the
upstream commit, reading the files from git's objects (not from the work tree, which may hold unpushed edits) and
embedding only what neither the shared index nor the team's embedding cache already has. The shared index's commit
only moves forward: a host that has not pulled yet does not publish an older state over a newer one; when the
upstream's history was rewritten (neither commit contains the other), the shared index follows the upstream.
"""
from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from ..index import Sources, SyncReport, read_docs
from ..index.update import kind_of
from ..rules.errors import GitError
from ..rules.fsread import text_name
from ..stores.gitstore import GitStore, is_commit_id

if TYPE_CHECKING:
    from ..index.postgres import SharedIndex

AREAS = ("facts", "procedures", "episodes")


@dataclass
class Split:
    """Which vault paths this host holds as the reference commit has them, and which it does not."""

    ref: str | None                                    # the commit the shared index should reflect
    tree: dict[str, str] = field(default_factory=dict)  # vault-relative path -> blob id at ref
    local: set[str] = field(default_factory=set)       # paths whose content here is not ref's (overlay)
    gone: set[str] = field(default_factory=set)        # paths ref has and this host does not

    @property
    def shadow(self) -> set[str]:
        """Paths whose shared rows must not be returned on this host."""
        return self.local | self.gone


def vault_name(git: GitStore | None, root: Path, configured: str | None) -> str:
    """The vault's name in the shared index: ``[index] name``, else the remote repository's name, else the
    directory's."""
    if configured:
        return configured
    if git is not None:
        try:
            url = git.run("remote", "get-url", "origin")
            name = url.rstrip("/").rsplit("/", 1)[-1].rsplit(":", 1)[-1]
            if name.endswith(".git"):
                name = name[: -len(".git")]
            if name:
                return name
        except GitError:
            pass
    return root.name


def split(git: GitStore, root: Path, *, track_episodes: bool, ref: str | None = None, tree: bool = True) -> Split:
    """Compare this host's vault files with a commit: ``ref`` (the commit the shared index reflects), else — or when
    this host's git does not have that commit yet — the upstream of the current branch, else HEAD.

    Three git calls, the two that read the work tree at once (recall pays this on every question: ~2 git
    latencies whatever the vault's size); ``tree`` adds the commit's blob ids (what :func:`publish` needs, recall
    does not)."""
    if ref is not None and is_commit_id(ref):  # read from the database: never an option to git
        try:
            return _split(git, root, ref, track_episodes=track_episodes, tree=tree)
        except GitError:
            pass  # the team published a commit this host has not fetched: compare with what it has
    return _split(git, root, reference(git), track_episodes=track_episodes, tree=tree)


def _split(git: GitStore, root: Path, ref: str | None, *, track_episodes: bool, tree: bool) -> Split:
    areas = [git.rel(root / a) for a in (AREAS if track_episodes else AREAS[:2])]
    everything = [git.rel(root / a) for a in AREAS]
    out = Split(ref)
    prefix = git.rel(root)
    prefix = "" if prefix == "." else prefix + "/"
    calls = {"others": ["ls-files", "--others", "-z", "--", *everything]}
    if ref is not None:
        calls["changed"] = ["diff", "--name-only", "-z", "--no-renames", ref, "--", *areas]
        if tree:
            calls["tree"] = ["ls-tree", "-r", "-z", ref, "--", *areas]
    found = _run_all(git, calls)
    for path in (p for p in found.get("changed", "").split("\0") if p):
        rel = path[len(prefix):]
        (out.local if (root / rel).exists() else out.gone).add(rel)
    for record in found.get("tree", "").split("\0"):
        if not record:
            continue
        info, _, path = record.partition("\t")
        mode, _kind, blob = info.split()
        if mode in ("100644", "100755") and path.startswith(prefix) and text_name(path):
            out.tree[path[len(prefix):]] = blob
    # Untracked files, ignored ones included (episodes kept out of git live here): never in the shared index.
    out.local |= {p[len(prefix):] for p in found["others"].split("\0") if p}
    if ref is None:  # no commit at all: everything is local
        out.local |= _all_files(root)
    out.local = {rel for rel in out.local if covered(rel)}
    out.gone = {rel for rel in out.gone if covered(rel)}
    return out


def _run_all(git: GitStore, calls: dict[str, list[str]]) -> dict[str, str]:
    """Run git commands at the same time; their outputs by name. Raises GitError naming the first that failed."""
    procs = {}
    try:
        for name, args in calls.items():
            procs[name] = subprocess.Popen(["git", *args], cwd=git.root, stdout=subprocess.PIPE,
                                           stderr=subprocess.PIPE)
    except OSError as exc:
        for proc in procs.values():
            proc.kill()
        raise GitError(f"cannot run git: {exc.strerror}") from None
    out = {}
    for name, proc in procs.items():
        stdout, stderr = proc.communicate()
        if proc.returncode != 0:
            detail = " ".join(stderr.decode(errors="replace").split()) or f"exit {proc.returncode}"
            raise GitError(f"git {calls[name][0]} failed: {detail}")
        out[name] = stdout.decode("utf-8", errors="surrogateescape")
    return out


def covered(rel: str) -> bool:
    """Whether ``rel`` is a plain path in one of the areas the shared index holds (no part that starts with a dot,
    so no ``..``; text: a name that is not UTF-8 is no memory's, and the database holds none)."""
    parts = rel.split("/")
    return len(parts) > 1 and parts[0] in AREAS and not any(p.startswith(".") for p in parts) and text_name(rel)


def in_place(doc: dict[str, Any]) -> bool:
    """Whether a shared row's path is where git keeps a memory of its kind and id (``facts/<id>.md``,
    ``procedures/<id>.<ext>``, a file under ``episodes/``), as every row a publish writes is. A row written into the
    database by other means may name one memory by its id and another by its path: the scope is tested on the path
    and the text read by the id, so such a row is left out. (A run's row, from :meth:`runs_of`, has no kind: its
    path is an episode file's.)"""
    path, item = doc.get("path"), doc.get("id")
    if not isinstance(path, str) or not isinstance(item, str) or not covered(path):
        return False
    kind = doc.get("kind", "episode")
    if kind == "fact":
        return path == f"facts/{item}.md"
    if kind == "procedure":
        name = path[len("procedures/"):] if path.startswith("procedures/") else ""
        return bool(name) and PurePosixPath(name).with_suffix("").as_posix() == item
    return kind == "episode" and path.startswith("episodes/")


def _all_files(root: Path) -> set[str]:
    found = set()
    for area in AREAS:
        for dirpath, _dirs, files in os.walk(root / area):
            for name in files:
                found.add(os.path.relpath(os.path.join(dirpath, name), root).replace(os.sep, "/"))
    return found


def reference(git: GitStore) -> str | None:
    """The upstream of the current branch, else HEAD, else None (one git call)."""
    try:
        out = git.run("rev-parse", "HEAD", "@{upstream}")
    except GitError:  # no upstream (or no commit): ask for HEAD alone
        try:
            return git.run("rev-parse", "--verify", "--quiet", "HEAD") or None
        except GitError:
            return None
    lines = out.split()
    return lines[-1] if lines else None


#: Times a publish starts again from a fresh read of the shared index when other hosts published meanwhile.
PUBLISH_TRIES = 3


def publish(shared: SharedIndex, git: GitStore, sources: Sources, state: Split, *, splitter: Any = None,
            max_tokens: int | None = None) -> SyncReport:
    """Bring the shared index to ``state.ref``: the paths whose blob differs from what it holds are read from git's
    objects and applied; a reference commit older than the shared index's is not published (never backwards).

    The commit and files the diff is made against are read before git's objects are (slow for a large diff): when
    another host published meanwhile, the write finds another commit under the vault's lock, writes nothing, and
    the publish starts again from the index as it is now (else a host that fetched an older commit wrote it over
    the newer one, and a file the newer one added stayed in the index for ever)."""
    from ..index.postgres import HeadMoved

    for _attempt in range(PUBLISH_TRIES):
        try:
            return _publish(shared, git, sources, state, splitter=splitter, max_tokens=max_tokens)
        except HeadMoved:
            continue
    report = SyncReport()
    report.warnings.append(f"other hosts published the shared index {PUBLISH_TRIES} times while this host was "
                           "publishing: not published; run 'memvault reindex' again")
    return report


def _publish(shared: SharedIndex, git: GitStore, sources: Sources, state: Split, *, splitter: Any,
             max_tokens: int | None) -> SyncReport:
    report = SyncReport()
    if state.ref is None:
        return report
    head = shared.head()
    refused = refusal(shared, git, head, state.ref)
    if refused is not None:
        report.warnings.append(refused)
        return report
    if head is not None and head != state.ref and not git.is_ancestor(head, state.ref):
        # This host had the shared index's commit, and neither contains the other: the upstream's history was
        # rewritten (a secret force-pushed away). The shared index follows it, or keeps what was removed for ever.
        report.warnings.append(f"the shared index reflected {head[:12]}, which the upstream {state.ref[:12]} does not "
                               "contain (its history was rewritten): published the upstream over it")
    known = shared.files()
    paths: dict[str, str | None] = {rel: blob for rel, blob in state.tree.items()
                                    if known.get(rel) != blob and kind_of(sources, rel) is not None}
    paths.update({rel: None for rel in known if rel not in state.tree})
    if not paths and head == state.ref:
        return report
    # A fact or runbook past its limit is named, never read: one cat-file of every blob held a 291 MB fact whole
    # (1.4 GB) on whichever host published next.
    sizes = _blob_sizes(git, sorted({b for b in paths.values() if b}))
    kinds = {rel: kind_of(sources, rel) for rel in paths}
    too_big = set()
    for rel, blob in paths.items():
        kind = kinds[rel]
        limit = sources.max_fact if kind == "fact" else sources.max_procedure if kind == "procedure" else None
        if blob and limit is not None and sizes.get(blob, 0) > limit:
            too_big.add(rel)
            report.problems.append(f"{rel}: {sizes[blob]} bytes, larger than [limits] "
                                   f"{'fact' if kind == 'fact' else 'procedure'}_bytes ({limit}): not indexed")
    blobs = _read_blobs(git, sorted({b for r, b in paths.items() if b and r not in too_big}))
    docs = []
    for rel, blob in paths.items():
        if blob is None or rel in too_big:
            continue
        kind = kinds[rel]
        assert kind is not None
        docs.extend(read_docs(sources, rel, kind, report.problems, data=blobs[blob]))
    report.merge(shared.apply(docs, paths, head=state.ref, splitter=splitter, max_tokens=max_tokens, expect=head))
    _record_roots(shared, git, state.ref)
    report.files_seen = len(state.tree)
    return report


def refusal(shared: SharedIndex, git: GitStore, head: str | None, ref: str) -> str | None:
    """Why this host may not put its commit ``ref`` in place of the shared index's ``head`` (None: it may): the
    team is ahead of this host, or the index holds another repository's history. (A history the upstream rewrote,
    which this host had, it may: see :func:`publish`.)"""
    if head is None or head == ref or git.is_ancestor(head, ref):
        return None
    reason = foreign(shared, git, head)
    if reason is not None:
        return f"not published: {reason}"
    if not git.has_commit(head) and _remote_tip(git) == ref:
        return None  # the remote holds exactly this host's upstream, so no history of it holds head: a rewrite
    if not git.has_commit(head) or git.is_ancestor(ref, head):  # the team is ahead of this host
        return (f"the shared index reflects {head[:12]}, which {ref[:12]} does not contain: not published (pull "
                "first; if the upstream's history was rewritten, a host that had synced the old one publishes over "
                "it)")
    return None


def _remote_tip(git: GitStore) -> str | None:
    """The commit the remote's branch that the current branch tracks is at now (one network call), or None when
    there is no upstream or the remote cannot be asked. A host that cloned after the team rewrote history cannot
    have the commit the shared index reflects, and could not tell the rewrite from being behind ("pull first", for
    ever when no host that had the old history published since): the remote's answer tells them apart."""
    try:
        branch = git.run("symbolic-ref", "--quiet", "--short", "HEAD")
        remote = git.run("config", "--get", f"branch.{branch}.remote")
        merge = git.run("config", "--get", f"branch.{branch}.merge")
        out = git.run("ls-remote", "--", remote, merge, env={"GIT_TERMINAL_PROMPT": "0"})
    except GitError:
        return None
    tips = {line.split("\t")[0] for line in out.splitlines() if line.endswith("\t" + merge)}
    return tips.pop() if len(tips) == 1 else None


#: Beside the vault in the shared index (its ``vault_meta``): the root commits of the histories published under its
#: name. Two repositories can take one name ([index] name, else the remote repository's: 'vault', 'memory'); a host
#: that holds none of these commits is another repository's, not one that has not fetched yet.
ROOTS = "git_roots"
MAX_ROOTS = 32


def foreign(shared: SharedIndex, git: GitStore, head: str | None) -> str | None:
    """A line saying the shared index holds another repository's history under this vault's name (its commit
    ``head`` is not here, nor any root commit published under the name); None when it is this repository's, or
    this cannot be told (nothing recorded yet: a shared index published by an older memvault)."""
    if head is None or git.has_commit(head):
        return None
    known = _recorded_roots(shared)
    if not known or any(git.has_commit(root) for root in sorted(known)):
        return None
    return (f"the team index's vault {shared.vault!r} holds another repository's history (none of its commits is "
            "here): give this vault a name of its own with [index] name in memvault.toml")


def _recorded_roots(shared: SharedIndex) -> set[str]:
    try:
        value = json.loads(shared.meta_get(ROOTS) or "[]")
    except (ValueError, RecursionError):
        return set()
    if not isinstance(value, list):
        return set()
    # A history is rewritten rarely: a few roots at most (a longer list, written by other means, costs no more).
    return {r for r in value[:MAX_ROOTS] if is_commit_id(r)}


def _record_roots(shared: SharedIndex, git: GitStore, ref: str) -> None:
    """Add the root commits of ``ref``'s history to the ones recorded (a rewritten history adds its new root: the
    hosts that still have the old one are this repository's too)."""
    mine = set(git.run("rev-list", "--max-parents=0", ref).split())
    known = _recorded_roots(shared)
    if not mine <= known:
        shared.meta_set(ROOTS, json.dumps(sorted(known | mine)))


def _blob_sizes(git: GitStore, shas: list[str]) -> dict[str, int]:
    """Each blob's size, from one ``git cat-file --batch-check`` (nothing read)."""
    if not shas:
        return {}
    proc = subprocess.run(["git", "cat-file", "--batch-check"], cwd=git.root,
                          input="\n".join(shas).encode() + b"\n", capture_output=True, check=False)
    sizes = {}
    for line in proc.stdout.decode(errors="replace").splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[2].isdigit():
            sizes[parts[0]] = int(parts[2])
    return sizes


def _read_blobs(git: GitStore, shas: list[str]) -> dict[str, bytes]:
    """Blob contents in one ``git cat-file --batch``."""
    if not shas:
        return {}
    proc = subprocess.run(["git", "cat-file", "--batch"], cwd=git.root, input="\n".join(shas).encode() + b"\n",
                          capture_output=True, check=False)
    if proc.returncode != 0:
        raise GitError(f"git cat-file failed: {proc.stderr.decode(errors='replace').strip()}")
    out, blobs, pos = proc.stdout, {}, 0
    for sha in shas:
        end = out.index(b"\n", pos)
        header = out[pos:end].split()
        if len(header) < 3 or header[1] == b"missing":
            raise GitError(f"git has no object {sha}")
        size = int(header[2])
        blobs[sha] = out[end + 1 : end + 1 + size]
        pos = end + 1 + size + 1
    return blobs
