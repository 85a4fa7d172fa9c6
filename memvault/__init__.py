"""memvault: a file-first memory vault for AI agents.

>>> from memvault import Vault
>>> vault = Vault.open()            # --vault / MEMVAULT_DIR / nearest parent holding memvault.toml
>>> vault.facts.set("db/primary", "The primary listens on 10.8.0.4:5432.", category="database")
"""
from __future__ import annotations

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: a hook importing this package does not pay for typing

__all__ = ["Vault", "MemvaultError"]
from .rules.version import VERSION as __version__  # noqa: E402 - one place for the number

if TYPE_CHECKING:
    from typing import Any

    from .core.vault import Vault
    from .rules.errors import MemvaultError


def __getattr__(name: str) -> Any:
    """``Vault`` and ``MemvaultError`` are imported when first asked for: a hook that only talks to the warm process
    (memvault.interfaces.warm_client) imports this package without the vault code (about 0.15 s)."""
    if name == "Vault":
        from .core.vault import Vault

        return Vault
    if name == "MemvaultError":
        from .rules.errors import MemvaultError

        return MemvaultError
    raise AttributeError(f"module 'memvault' has no attribute {name!r}")
