"""The team index's URL a host connects to: never the shared file's word alone.

memvault.toml is shared by everyone who can push. A teammate's ``[index] url`` naming a server they run would be
given, by every host that pulls it, the PostgreSQL password the host offers (``PGPASSWORD``, sent in clear to a
server that asks for it so), every question asked there and the text of everything published. So a URL taken from
the shared file is used only once this host has accepted it (``memvault reindex --accept-index-url``, recorded in
``index-url.json`` in its state directory, where no commit reaches), as direnv asks before it loads a changed
``.envrc``; a changed URL waits for the same word again. ``MEMVAULT_INDEX_URL`` and this host's ``local.toml``
are this host's own word, used as they are.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from urllib.parse import urlsplit

from ..rules.config import CONFIG_NAME, Config
from ..rules.errors import ConfigError, MemvaultError
from ..rules.fsread import read_regular
from ..rules.fsutil import atomic_write
from ..rules.markup import printable_line

RECORD_NAME = "index-url.json"


def shown(url: str) -> str:
    """``url`` as a person may see it: scheme, user, host, port and database; never a password or the query."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or "(local socket)"
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return "(a URL that cannot be read)"
    user = f"{parts.username}@" if parts.username else ""
    return printable_line(f"{parts.scheme}://{user}{host}{port}{parts.path}")


def _digest(url: str) -> str:
    return hashlib.sha256(url.encode("utf-8", "surrogateescape")).hexdigest()


def usable(config: Config, state_dir: Path) -> str | None:
    """The URL of the team's index this host may connect to (None: none is set). ConfigError, naming the URL
    without its password, when it is the shared file's and this host has not accepted it."""
    url = config.index_url()
    if url is None or not config.index_url_shared():
        return url
    try:
        record = json.loads(read_regular(state_dir / RECORD_NAME, limit=4096))
    except (OSError, ValueError, MemvaultError):  # none yet, or unreadable: not accepted
        record = {}
    if isinstance(record, dict) and record.get("sha256") == _digest(url):
        return url
    had = record.get("shown") if isinstance(record, dict) else None
    changed = f" (this host accepted {had!s:.200} before)" if had else ""
    raise ConfigError(config.path or CONFIG_NAME,
                      f"[index] url = {shown(url)} is the shared file's word and this host has not accepted it"
                      f"{changed}: a pushed url would be given this host's password and questions. Run 'memvault "
                      "reindex --accept-index-url' to use it, or set it in this host's local.toml or "
                      "MEMVAULT_INDEX_URL")


def accept(config: Config, state_dir: Path) -> str | None:
    """Record the shared file's ``[index] url`` as accepted by this host; what is recorded, as shown (None: the URL
    in use is not the shared file's, nothing to accept)."""
    url = config.index_url()
    if url is None or not config.index_url_shared():
        return None
    record = {"sha256": _digest(url), "shown": shown(url)}
    atomic_write(state_dir / RECORD_NAME, json.dumps(record).encode(), mode=0o600)
    return record["shown"]
