"""Hand a whole read-only call to the warm process: for short-lived callers that must answer in a few tens of
milliseconds (an agent's session-start hook), where importing memvault's vault code alone would cost ~0.15 s.

>>> from memvault.interfaces.warm_client import call
>>> reply = call("/srv/memory", "recall", {"query": "primary database port", "k": 5})
>>> if reply is None:
...     ...  # no warm process (or not this install's): do it in this process instead

Stdlib only: this module and :mod:`memvault.models.channel` import nothing heavy, start nothing, and never raise.
The warm process is found with the same checks as every client of it: a private socket directory, the server's
uid, and a handshake on memvault's install and version (see :mod:`memvault.models.channel`). What it can serve is
the registry :data:`memvault.interfaces.warm.CALLS`.
"""
from __future__ import annotations

import os

TYPE_CHECKING = False  # typing is not imported at run time: a hook pays for every module
if TYPE_CHECKING:
    from typing import Any


def call(root: str, name: str, args: dict[str, Any], timeout: float = 2.0) -> dict[str, Any] | None:
    """Run the registered call ``name`` with ``args`` on the warm process's vault at ``root``.

    Returns the call's JSON reply; ``{"error": message, "exit_code": n}`` when the call itself failed as the CLI
    would (a bad argument, no vault there); None when there is no warm process, it is not this install's and
    version's or not this user's, or it did not answer within ``timeout`` seconds — then the caller does the work
    itself. A function that takes ``source`` is given ``args["source"]``, else the caller's ``MEMVAULT_SOURCE``,
    else ``user:$USER``, as the CLI would use.
    """
    try:
        from ..models import channel

        source = args.get("source") if isinstance(args, dict) else None
        header, _ = channel.call({"op": "call", "root": os.path.abspath(root), "name": name, "args": args,
                                  "source": source or _default_source()}, timeout)
    except Exception:  # noqa: BLE001 - never raises: None means "do it yourself"
        return None
    if header.get("ok") and isinstance(header.get("result"), dict):
        return header["result"]  # type: ignore[no-any-return]
    if header.get("served"):
        return {"error": str(header.get("error", "the call failed")), "exit_code": int(header.get("exit_code", 1))}
    return None


def _default_source() -> str:
    """What the CLI would stamp: ``MEMVAULT_SOURCE``, else ``user:$USER`` (validated by the warm process)."""
    env = os.environ.get("MEMVAULT_SOURCE")
    if env:
        return env
    import getpass

    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return f"user:{user or 'unknown'}"
