"""Sync and episodes tracked in git (``[episodes] track_in_git``): whose host folder is whose, and the lines a sync
moves so that each clone appends to a folder no other clone writes.

Each clone appends to its own ``episodes/<folder>/`` (:mod:`memvault.stores.host_folders`). A pull can show another
clone writing there (a copy of this clone made with its local state, a teammate's commit, a laptop of the same
name): :func:`shared_folders` finds it, :func:`give_up` leaves the folder and draws another, and
:func:`move_own_lines` takes the lines this clone's rebased commits added there with it.
"""
from __future__ import annotations

import base64
import contextlib
import itertools
import json
import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

from ..rules.errors import EpisodeError, GitError, MemvaultError
from ..rules.fsread import read_regular_if_there
from ..rules.fsutil import (atomic_write, atomic_write_chunks, ensure_dir, read_pieces, read_regular, remove,
                            remove_dir)
from ..stores.episodes import Episode, line_id, month_of, new_lines, parse_line, split_new
from ..stores.gitstore import GitStore
from .gate import WriteGate

#: The trailer of the commit in which a sync moved this clone's lines out of a folder another clone writes.
MOVED_TRAILER = "Memvault-Moved-Episodes"


def shared_folders(gate: WriteGate, git: GitStore, base: str, fetched: str) -> set[str]:
    """The host folders this clone owns in which the remote's commits show another clone writing: lines or files
    added to the folder it appends to (its local state copied along with the repository, a teammate's commit), or
    any change to one it wrote before (``episodes/<hostname>/`` from before the upgrade, which a laptop of the same
    name also wrote, appends to or prunes). Two clones appending to, or pruning, one month file conflict at sync.
    Lines only removed from the current folder, or files deleted there (a teammate's purge), are no sign of another
    writer; a file created there is, even empty (this clone's own new file of that month met it at every rebase).
    ``base``: the merge base of this clone's head and ``fetched`` (after a rewrite of the remote's history, the
    remote's tip this clone last synced with)."""
    episodes = gate.episodes
    current = episodes.host
    own = sorted(f for f in episodes.own_folders() if f)
    if not own:
        return set()
    specs = [":(literal)" + git.rel(episodes.dir / folder) for folder in own]
    counts = git.run("diff", "--numstat", "-z", "--no-renames", base, fetched, "--", *specs, strip=False)
    created = git.run("diff", "--name-only", "-z", "--no-renames", "--diff-filter=AT", base, fetched, "--", *specs,
                      strip=False)
    changes = [(e.partition("\t")[0], e.partition("\t")[2].partition("\t")[2]) for e in counts.split("\0")]
    changes += [("+", path) for path in created.split("\0")]
    shared: set[str] = set()
    for added, path in changes:
        with contextlib.suppress(ValueError, IndexError):
            folder = (git.root / path).relative_to(episodes.dir).parts[0] if path else ""
            if folder in own and (added != "0" or folder != current):
                if folder == current and added not in ("+", "-") and not _adds_episodes(git, base, fetched, path):
                    continue  # lines only edited (a teammate's redaction) or removed: no one else appends here
                shared.add(folder)
    return shared


def _adds_episodes(git: GitStore, base: str, fetched: str, path: str) -> bool:
    """Whether the remote's ``path`` holds an episode the merge base's did not (:func:`new_lines`): all of it when the
    base has no such file, none when the remote has none."""
    before, after = git.blob_at(base, path), git.blob_at(fetched, path)
    if after is None:
        return False
    return before is None or new_lines(before, after)


def month_file(gate: WriteGate, git: GitStore, repo_rel: str) -> bool:
    """Whether ``repo_rel`` is an episode month file: ``episodes/YYYY-MM.jsonl`` or in a host folder."""
    try:
        parts = (git.root / repo_rel).relative_to(gate.episodes.dir).parts
    except ValueError:
        return False
    return 1 <= len(parts) <= 2 and month_of(Path(parts[-1])) is not None


def move_own_lines(gate: WriteGate, git: GitStore, shared: str, successor: str, fetched: str,
                    source: str) -> list[str]:
    """This clone gave up ``shared`` (another clone writes there: a copy of it, local state and all) for
    ``successor``: the episodes its rebased commits added there (lines of HEAD's month files there that
    ``fetched`` does not hold, by episode id) go to the same month file in ``successor``, in one commit through
    the commit's checks. The rebase resolved the files it stopped on so already (sync's line merge); a commit that
    rebased cleanly (a month the other did not write) left its lines in ``shared``, and the other clone, finding
    them, was moved on too. What to say: nothing when it went through; when the commit is refused, the lines stay
    where they are (nothing lost; the other clone moves on in turn) and every file is put back."""
    episodes = gate.episodes
    raw = git.run("diff", "--raw", "-z", "--no-renames", fetched, "HEAD", "--",
                  ":(literal)" + git.rel(episodes.dir / shared), strip=False).split("\0")
    files: dict[Path, bytes | None] = {}
    before: dict[Path, bytes | None] = {}  # what each file held, to put back
    made = [] if os.path.lexists(episodes.dir / successor) else [episodes.dir / successor]  # to remove on failure
    try:
        for info, path in zip(raw[0::2], raw[1::2]):
            if info.split(" ")[1:2] not in (["100644"], ["100755"]) or not month_file(gate, git, path):
                continue  # a link, a file deleted here, anything but a month file: no lines to move
            head = git.blob_at("HEAD", path)
            kept, mine = split_new(git.blob_at(fetched, path) or b"", head or b"")
            if not mine:
                continue
            here = git.root / path
            there = episodes.dir / successor / here.name  # one month file there for each here
            before[there] = read_regular_if_there(there)
            ahead = before[there] or b""
            before[here], files[here] = head, kept or None
            files[there] = _after(ahead, split_new(ahead, mine)[1])  # nothing written twice
        if not files:
            return []
        for path, data in files.items():
            _apply(path, data)
        gate.commit_files(files, f"sync: this clone's episodes moved from episodes/{shared}/ to "
                                 f"episodes/{successor}/ (another clone writes there)", author=source,
                          trailers={"Memvault-Source": source, MOVED_TRAILER: f"{shared} -> {successor}"})
    except MemvaultError as exc:
        _put_back(before, made)
        return [f"this clone's episodes in episodes/{shared}/ could not be moved to episodes/{successor}/ and stay "
                f"there (nothing lost; the other clone writing there is moved on too): {exc}"]
    except BaseException:
        _put_back(before, made)
        raise
    return []


def _put_back(files: dict[Path, bytes | None], made: list[Path]) -> None:
    """Every file as it was, and the folders ``made`` for the move gone again when nothing else is in them (git
    tracks no folder: an empty one left behind was never cleared by a commit or a sync)."""
    for path, data in files.items():
        with contextlib.suppress(OSError, MemvaultError):
            _apply(path, data)
    for folder in made:
        with contextlib.suppress(OSError, MemvaultError):
            remove_dir(folder)


def _apply(path: Path, data: bytes | None) -> None:
    """``data`` written at ``path`` (its folder made), or the file removed when None."""
    if data is None:
        remove(path)
    else:
        ensure_dir(path.parent)
        atomic_write(path, data)


def _after(ahead: bytes, lines: bytes) -> bytes:
    """``lines`` after ``ahead`` (a month file's bytes), the first of them on a line of its own."""
    return ahead + (b"\n" if ahead and not ahead.endswith((b"\n", b"\r")) else b"") + lines


def give_up(gate: WriteGate, shared: set[str], successor: str | None) -> list[str]:
    """What to say about ``shared`` (see :func:`shared_folders`), giving up those drawn by default: no longer
    pruned from here (their writer, or whoever finds them idle, does), and a new folder drawn when the current one
    is among them. A name the person chose is theirs to change: only named."""
    episodes = gate.episodes
    current = episodes.host
    shared = set(shared)
    said: list[str] = []
    if current in shared and episodes.named:
        shared.discard(current)
        said.append(f"the remote's commits add lines to episodes/{current}/, where this host appends too ([episodes] "
                    "host or MEMVAULT_HOST): two clones appending to one month file conflict at sync; give each its "
                    "own name")
    if shared and episodes.folders is not None:
        fresh = episodes.folders.disown(shared, successor)
        names = ", ".join(f"episodes/{f}/" for f in sorted(shared))
        now = f"; this clone now appends to episodes/{fresh}/" if fresh else ""
        said.append(f"the remote's commits change {names}, written here before: another clone writes there too (a "
                    f"copy of this clone with its local state, a teammate's commit, a laptop of the same name){now}; "
                    "no longer pruned from here (by its writer, or once idle)")
    return said


# ------------------------------------------------------------------------------- untracked files a pull brings
#: Where a sync keeps this clone's untracked month files while the pull checks the remote's over them (local state):
#: a record naming, for each repository path, its copy in :data:`ASIDE_DIR` (``{"paths": {path: name}}``). An older
#: memvault kept the bytes in the record itself, base64 (``{"files": {path: base64}}``): still read.
ASIDE_NAME = "sync-aside.json"
#: The folder beside the record holding the copies (one file each, 0600, never a whole month in memory).
ASIDE_DIR = "sync-aside"
#: What a record's entry is: a copy's path, or (an older record) the bytes themselves.
Kept = Path | bytes


def set_aside(gate: WriteGate, git: GitStore, head: str, fetched: str) -> None:
    """Keep in the local state (:data:`ASIDE_NAME`) every month file here that git does not track and the remote's
    commits add (``head``: this clone's HEAD): this clone kept that month's episodes untracked (``episodes/`` in
    .gitignore) and another clone, tracking episodes now, committed its own file of that name. Git checks a file out
    over an ignored one without a word; :func:`put_aside_back` adds this clone's lines to it once the rebase is over,
    whatever its outcome, or at the next sync when this one was killed. Copied in pieces: a month of 109 MB made a
    sync peak at 566 MB when it was read whole and kept base64 in one JSON string."""
    added = git.run("diff", "--name-only", "-z", "--no-renames", "--diff-filter=A", head, fetched, "--",
                    ":(literal)" + git.rel(gate.episodes.dir), strip=False)
    kept: dict[str, Kept] = {}
    for added_path in added.split("\0"):
        # The path, or a folder above it: git deletes an ignored file to check a folder out in its place too.
        parts = added_path.split("/") if added_path else []
        for path in ("/".join(parts[:n]) for n in range(len(parts), 0, -1)):
            if path not in kept and month_file(gate, git, path) and _regular(git.root / path):
                kept[path] = git.root / path
    if not kept:
        return
    record = gate.state_dir / ASIDE_NAME
    if os.path.lexists(record):  # one put_aside_back could not read: never written over
        raise GitError(f"sync stopped before changing anything: {record} holds episodes set aside by an earlier "
                       f"sync that could not be put back (copies in {gate.state_dir / ASIDE_DIR}); move them back by "
                       "hand and remove the record, then sync again")
    ensure_dir(gate.state_dir)
    _write_aside(gate, kept)


def put_aside_back(gate: WriteGate, git: GitStore) -> tuple[list[Path], list[str]]:
    """Add the lines of each file :func:`set_aside` kept to the file there now (the remote's, or this clone's own
    when the rebase was aborted), each line once (by episode id); a file gone is written as it was. The record goes
    only once every file is back: a sync killed meanwhile puts them back at its next run (each line once again).
    The files changed, and what to say (a record that cannot be read is left as it is, and named)."""
    record = gate.state_dir / ASIDE_NAME
    try:
        kept = _read_aside(gate)
    except FileNotFoundError:
        return [], []
    except (OSError, ValueError, TypeError, KeyError, AttributeError, MemvaultError) as exc:
        return [], [f"{record} cannot be read ({exc}): the episodes a sync set aside there were not put back; "
                    "they are in that file, which is left as it is"]
    changed: list[Path] = []
    left: dict[str, Kept] = {}  # what cannot be put back (a link committed there): kept in the record, named
    said: list[str] = []
    for path, mine in kept.items():
        target = git.root / path
        if not month_file(gate, git, path):
            continue  # only ever a month file of this vault's episodes/
        try:
            if _put_back_lines(target, mine):
                changed.append(target)
        except (OSError, MemvaultError) as exc:
            left[path] = mine
            said.append(f"{path}: this clone's untracked episodes set aside during a sync cannot be put back ({exc});"
                        f" they stay in {record}")
    _write_aside(gate, left)
    return changed, said


def _lines_of(kept: Kept) -> Iterator[bytes]:
    """The lines of a file set aside (split where :func:`split_new` splits), read in pieces."""
    if isinstance(kept, bytes):
        yield from kept.splitlines(keepends=True)
        return
    rest = b""
    for piece in read_pieces(kept):
        lines = (rest + piece).splitlines(keepends=True)
        # the last line may go on in the next piece (a CR at the end may be the first half of a CRLF)
        rest = lines.pop() if lines and not lines[-1].endswith(b"\n") else b""
        yield from lines
    if rest:
        yield rest


def _put_back_lines(target: Path, mine: Kept) -> bool:
    """Add to ``target`` the lines of ``mine`` it does not hold (:func:`split_new`'s rule: by episode id, or a line
    without one by its bytes), after its own; the whole of ``mine`` when ``target`` is gone. Whether it changed.
    Neither file is held whole: the ids of ``target`` are, and the lines are copied in pieces."""
    ids: set[str] = set()
    texts: set[bytes] = set()
    last = b""
    there = os.path.lexists(target)
    if there:
        for raw in _lines_of(target):
            key = raw.rstrip(b"\r\n")
            if key.strip():
                episode = line_id(key)
                if episode is not None:
                    ids.add(episode)
                else:
                    texts.add(key)
            last = raw

    def new() -> Iterator[bytes]:
        for raw in _lines_of(mine):
            key = raw.rstrip(b"\r\n")
            if not key.strip():
                continue
            episode = line_id(key)
            if (episode not in ids) if episode is not None else (key not in texts):
                yield raw if raw.endswith((b"\n", b"\r")) else raw + b"\n"

    if next(new(), None) is None:
        return False
    ensure_dir(target.parent)
    head = read_pieces(target) if there else iter(())
    gap = [b"\n"] if last and not last.endswith((b"\n", b"\r")) else []
    atomic_write_chunks(target, itertools.chain(head, gap, new()))
    return True


def drop_aside(gate: WriteGate, drop: Callable[[Episode], bool], *, what: str = "purged",
               dry_run: bool = False) -> list[str]:
    """Remove from the lines a sync set aside (:data:`ASIDE_NAME`, left by a sync killed before it put them back)
    every episode for which ``drop`` is true, as a purge or a prune (``what``) does in the month files: else the next
    sync put a purged or expired line back (and committed it, with episodes tracked), and a purged text stayed
    readable in the local state. A line that cannot be parsed is kept. ``dry_run``: only say what would go. The
    caller holds the append lock. What to say."""
    record = gate.state_dir / ASIDE_NAME
    try:
        kept = _read_aside(gate)
    except FileNotFoundError:
        return []
    except (OSError, ValueError, TypeError, KeyError, AttributeError, MemvaultError) as exc:
        return [f"{record} cannot be read ({exc}): the episodes a sync set aside there were not {what}; look at it"]

    def dropped(raw: bytes) -> bool:
        with contextlib.suppress(EpisodeError, UnicodeDecodeError):
            return bool(raw.strip()) and drop(parse_line(raw.decode("utf-8")))
        return False

    removed = sum(1 for data in kept.values() for raw in _lines_of(data) if dropped(raw))
    if not removed:
        return []
    if not dry_run:
        left: dict[str, Kept] = {}
        for path, data in kept.items():
            if any(raw.strip() and not dropped(raw) for raw in _lines_of(data)):
                left[path] = _filtered(data, dropped)
        _write_aside(gate, left)
    return [f"{removed} episode line{'s' if removed != 1 else ''} set aside by an interrupted sync ({record}) "
            + ("would be removed too" if dry_run else "removed too")]


class _filtered:
    """The lines of a file set aside that ``dropped`` keeps, as :func:`_write_aside` copies them."""

    def __init__(self, kept: Kept, dropped: Callable[[bytes], bool]) -> None:
        self.kept, self.dropped = kept, dropped

    def pieces(self) -> Iterator[bytes]:
        return (raw for raw in _lines_of(self.kept) if not self.dropped(raw))


def _read_aside(gate: WriteGate) -> dict[str, Kept]:
    """The files a record of lines set aside holds (repository path -> its copy, or its bytes in an older record);
    FileNotFoundError when there is none, else any of OSError, ValueError, TypeError, KeyError, AttributeError or
    MemvaultError when it cannot be read."""
    data = json.loads(read_regular(gate.state_dir / ASIDE_NAME))
    if "paths" in data:
        folder = gate.state_dir / ASIDE_DIR
        out: dict[str, Kept] = {}
        for path, name in data["paths"].items():
            if not isinstance(name, str) or not name.isdigit():
                raise ValueError(f"{name!r} is not the name of a copy")
            if not _regular(folder / name):
                raise ValueError(f"{folder / name} is missing")
            out[path] = folder / name
        return out
    return {path: base64.b64decode(text, validate=True) for path, text in data["files"].items()}


def _write_aside(gate: WriteGate, files: dict[str, Kept | _filtered]) -> None:
    """The record of ``files`` set aside (each copied in pieces into :data:`ASIDE_DIR`, 0600, then the record
    naming them), or none at all when there are none; copies no record names are removed."""
    record, folder = gate.state_dir / ASIDE_NAME, gate.state_dir / ASIDE_DIR
    names: dict[str, str] = {}
    if files:
        ensure_dir(folder, 0o700)
        taken = {p.name for p in _copies(folder)}
        fresh = (str(n) for n in itertools.count() if str(n) not in taken)
        for path, kept in files.items():
            name = names[path] = next(fresh)  # never over a copy the record still names: a kill stays safe
            pieces = kept.pieces() if isinstance(kept, _filtered) else (
                iter((kept,)) if isinstance(kept, bytes) else read_pieces(kept))
            atomic_write_chunks(folder / name, pieces, mode=0o600)
        atomic_write(record, json.dumps({"paths": names}, sort_keys=True).encode("utf-8"), mode=0o600)
    else:
        remove(record)
    for copy in _copies(folder):
        if copy.name not in names.values():
            remove(copy)
    if not names:
        remove_dir(folder)


def _copies(folder: Path) -> list[Path]:
    try:
        return [folder / name for name in os.listdir(folder) if name.isdigit()]
    except OSError:
        return []


def _regular(path: Path) -> bool:
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


__all__ = ["ASIDE_DIR", "ASIDE_NAME", "MOVED_TRAILER", "drop_aside", "give_up", "month_file", "move_own_lines", "put_aside_back",
           "set_aside", "shared_folders"]
