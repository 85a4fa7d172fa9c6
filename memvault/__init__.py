"""memvault: a file-first memory vault for AI agents.

>>> from memvault import Vault
>>> vault = Vault.open()            # --vault / MEMVAULT_DIR / nearest parent holding memvault.toml
>>> vault.facts.set("db/primary", "The primary listens on 10.8.0.4:5432.", category="database")
"""
from .rules.errors import MemvaultError
from .core.vault import Vault

__all__ = ["Vault", "MemvaultError"]
__version__ = "0.1.0"
