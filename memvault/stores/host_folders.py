"""Host folders: where this clone appends its episodes when they are tracked in git (``[episodes] track_in_git``).

Each host writes only its own folder, so two hosts sharing a remote never append to one file. The folder is the
name the person chose (``[episodes] host``, else ``MEMVAULT_HOST``), or the hostname with an id this clone drew once
and keeps in its local state (:class:`HostFolders`): two laptops named ``MacBook-Pro.local`` are two folders.
"""
from __future__ import annotations

import json
import os
import re
import secrets
from pathlib import Path
from typing import Any

from ..rules import jsontext
from ..rules.errors import InvalidValue, MemvaultError
from ..rules.fsread import read_regular
from ..rules.fsutil import atomic_write, ensure_dir, locked

#: The id's alphabet: Crockford's base32 in lower case (no i, l, o, u), as a folder name reads it.
_ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"


def chosen_host(configured: str | None) -> str | None:
    """The folder name the person chose: ``[episodes] host``, else ``MEMVAULT_HOST``; None when neither is set."""
    return configured or os.environ.get("MEMVAULT_HOST") or None


def host_folder(configured: str | None) -> str:
    """A host folder's name from ``[episodes] host``, else ``MEMVAULT_HOST``, else the hostname, made safe for a
    path. Without a chosen name :class:`HostFolders` adds an id to the hostname: this alone is what older memvaults
    wrote to."""
    return _path_name(chosen_host(configured) or _hostname())


def _hostname() -> str:
    import socket  # only with episodes per host

    return socket.gethostname()


def _path_name(raw: str) -> str:
    """``raw`` as a folder name: lower case; letters, digits, ``.``, ``_``, ``-``; never empty, ``.`` or ``..``."""
    name = re.sub(r"[^a-z0-9._-]+", "-", raw.lower()).strip(".-")
    return name or "host"


#: The file in a vault's state directory naming this clone's host folders (see :class:`HostFolders`).
EPISODE_FOLDERS = "episode-folders.json"
#: A folder name read back from local state: what :func:`host_folder` can make (never ``.``, ``..`` or a path).
_FOLDER_NAME = re.compile(r"^[a-z0-9_](?:[a-z0-9._-]{0,98}[a-z0-9_])?$")
#: How much of the hostname a default folder keeps before its id.
_HOSTNAME_PART = 40


class HostFolders:
    """This clone's episode folders, kept in its local state (``episode-folders.json``, out of reach of commits).

    ``folder`` is where this clone appends when no name is chosen: ``<hostname>-<id>``, the id eight random base32
    characters drawn once, so two laptops named ``MacBook-Pro.local``, containers named ``localhost`` or CI runners
    never append to one file. ``older`` are folders this clone wrote before and still prunes: on the upgrade from a
    memvault that wrote ``episodes/<hostname>/``, that folder when this clone's state shows it appended, synced or
    pruned here before (the append lock exists, and no record: this version keeps one before it first takes that
    lock, episodes tracked or not, when no name is chosen), since a fresh clone's folder of that name is another host's.

    A record that is missing or unreadable (the state dir deleted) is drawn afresh: a new folder, read like any
    other; the old one is pruned by whoever finds it idle, as a host that left.
    """

    def __init__(self, path: Path, episodes_dir: Path, append_lock: Path) -> None:
        self.path = path
        self.dir = episodes_dir
        self.append_lock = append_lock

    def current(self) -> str:
        """This clone's default folder, drawn and recorded on first use. Read at each call, not kept: a long-running
        process (the MCP server, the watcher) follows a new folder drawn by another (see :meth:`disown`)."""
        record = self._read()
        if record is None:
            with locked(self._lock_path()):
                record = self._read()  # another process may have drawn it meanwhile
                if record is None:
                    legacy = _path_name(_hostname())  # where an older memvault appended
                    # The append lock is an older memvault's evidence only when this version never kept a record
                    # here: a damaged record means the lock is this version's, and the folder another laptop's.
                    upgraded = os.path.lexists(self.append_lock) and not os.path.lexists(self.path)
                    older = [legacy] if upgraded and self._exists(legacy) else []
                    record = {"folder": self._draw(), "older": older}
                    self._write(record)
        return str(record["folder"])

    def known(self) -> set[str]:
        """Every folder the record names (its current and older ones); empty when there is no record yet."""
        record = self._read()
        return set() if record is None else {record["folder"], *record["older"]}

    def disown(self, folders: set[str], successor: str | None = None) -> str | None:
        """``folders`` are written by another clone too (it pulled their new lines): drop them from this clone's
        own, and when the current folder is among them move to ``successor`` (from :meth:`draw`, which a sync has
        already moved this clone's lines to) or a new one. The new folder, or None."""
        if successor is not None and not _valid_folder(successor):
            raise InvalidValue("folder", f"{successor!r} is not a host folder name")
        with locked(self._lock_path()):
            record = self._read()
            if record is None or not ({record["folder"], *record["older"]} & folders):
                return None
            older = [f for f in record["older"] if f not in folders]
            fresh = record["folder"] in folders
            record = {"folder": (successor or self._draw()) if fresh else record["folder"], "older": older}
            self._write(record)
            return record["folder"] if fresh else None

    # -- the record ----------------------------------------------------------------------------------------
    def _lock_path(self) -> Path:
        return self.append_lock.with_name("episode-folders.lock")

    def _read(self) -> dict[str, Any] | None:
        try:
            data = jsontext.parse(read_regular(self.path, limit=1 << 16))
        except (OSError, ValueError, MemvaultError):  # missing, a link, damaged: drawn afresh
            return None
        if not isinstance(data, dict) or not _valid_folder(data.get("folder")):
            return None
        older = data.get("older")
        return {"folder": data["folder"],
                "older": [f for f in older if _valid_folder(f)] if isinstance(older, list) else []}

    def _write(self, record: dict[str, Any]) -> None:
        ensure_dir(self.path.parent)
        atomic_write(self.path, (json.dumps(record, sort_keys=True) + "\n").encode("utf-8"), mode=0o600)

    def draw(self) -> str:
        """A new folder name (see :meth:`_draw`), recorded nowhere: :meth:`disown` records it."""
        return self._draw()

    def _draw(self) -> str:
        """``<hostname>-<id>``, an id whose folder is not in the work tree (a teammate may have committed one)."""
        base = _path_name(_hostname())[:_HOSTNAME_PART].rstrip(".-")
        while True:
            suffix = "".join(_ALPHABET[secrets.randbelow(32)] for _ in range(8))
            name = f"{base}-{suffix}" if base else suffix
            if not self._exists(name):
                return name

    def _exists(self, folder: str) -> bool:
        return os.path.lexists(self.dir / folder)


def _valid_folder(name: object) -> bool:
    return isinstance(name, str) and bool(_FOLDER_NAME.match(name))
