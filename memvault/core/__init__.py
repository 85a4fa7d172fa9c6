"""Layer 4, the facade: the :class:`~memvault.core.vault.Vault`, its one write gate and its one read path
(recall), lifecycle operations, git sync with the remote, and a team's shared index. It coordinates the stores
and the index explicitly; nothing below calls back up into it."""
