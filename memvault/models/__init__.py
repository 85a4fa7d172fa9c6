"""Layer 3, models: where vectors come from — loading an embedding model, the warm model process shared by
short-lived commands (the daemon), and the per-process engine that picks one of them."""

#: The module a warm process runs (``python -m MODULE --idle N``; :func:`memvault.models.daemon.start`). The warm
#: process serves whole vault calls too, so that module lives with the interfaces, and they name it here when they
#: are imported (memvault/interfaces/__init__.py): this layer never names a layer above it. In a process that
#: imported no interface (a library user) it stays None: no warm process is started from there (one already
#: running is still used), and models are loaded in the process.
warm_server: str | None = None
