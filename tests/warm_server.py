"""A warm process served from a thread of the test's own process (its vaults on the fake model when given)."""
from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any


@contextlib.contextmanager
def serving(models: Any = None, idle: float = 60.0) -> Iterator[Any]:
    """The warm process's server, listening in this test's runtime directory until the block ends."""
    from memvault import Vault
    from memvault.interfaces import warm
    from memvault.models import daemon

    vaults = warm.WarmVaults(daemon.Models(), open_vault=(lambda root: Vault.open(root, embedder_factory=models))
                             if models is not None else None)
    server = warm.build(idle, vaults=vaults)
    thread = threading.Thread(target=server.serve, daemon=True)
    thread.start()
    assert server.listening.wait(10), "the warm process did not listen"
    try:
        yield server
    finally:
        server.stopping.set()
        thread.join(10)
        vaults.close()
