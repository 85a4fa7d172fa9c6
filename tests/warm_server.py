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


@contextlib.contextmanager
def answering_once(reply: bytes) -> Iterator[None]:
    """A process at the warm channel's socket that reads one request and sends ``reply`` (``%s`` in it: this
    install's key) instead of a warm process's answer: an impostor, a short or malformed reply."""
    import socket

    from memvault.models import channel

    with channel.opened_dir() as fd:
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(channel.at(fd, channel.socket_name()))
    listener.listen(1)

    def answer() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.makefile("rb").readline()
            conn.sendall(reply.replace(b"%s", channel.install_key().encode()))

    thread = threading.Thread(target=answer)
    thread.start()
    try:
        yield
    finally:
        thread.join(5)
        listener.close()
