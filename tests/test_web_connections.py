"""The web view under uvicorn against clients that never finish asking (slowloris): a half-sent request head is
closed after a deadline, half-open connections are bounded (the oldest goes first) so the owner still gets in, and
a refused request does not keep its connection. Real sockets against a real server, no token on the attacker's
side (it needs none to hold a connection)."""
from __future__ import annotations

import socket
import time
import urllib.request

import pytest

from memvault.interfaces import connections
from web_fixtures import seeded_copy, seeded_template, serve  # noqa: F401 - fixtures


def _half_open(port: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # a request head never finished
    return s


def _closed(s: socket.socket, wait: float) -> bool:
    """Whether the server closed ``s`` within ``wait`` seconds."""
    s.settimeout(wait)
    try:
        while True:
            data = s.recv(4096)
            if not data:
                return True
    except (TimeoutError, socket.timeout):
        return False
    except ConnectionError:
        return True


def _port(view) -> int:
    return int(view.origin.rsplit(":", 1)[1])


def test_a_request_head_never_finished_is_closed_after_the_deadline(seeded_copy, monkeypatch):
    monkeypatch.setattr(connections, "HEAD_SECONDS", 1.0)
    with serve(seeded_copy(), refresh=False) as view:
        slow = _half_open(_port(view))
        started = time.monotonic()
        try:
            assert _closed(slow, 6.0), "a half-sent request head held its connection open"
            assert time.monotonic() - started < 5.0
        finally:
            slow.close()


def test_half_open_connections_are_bounded_and_the_owner_still_gets_in(seeded_copy, monkeypatch):
    monkeypatch.setattr(connections, "MAX_WAITING", 10)
    with serve(seeded_copy(), refresh=False) as view:
        flood = [_half_open(_port(view)) for _ in range(60)]
        try:
            request = urllib.request.Request(view.url + "/facts", headers={"Authorization": f"Bearer {view.token}"})
            with urllib.request.urlopen(request, timeout=10) as answer:
                assert answer.status == 200
            time.sleep(0.5)
            still_open = sum(not _closed(s, 0.05) for s in flood)
            assert still_open <= 10, f"{still_open} half-open connections held"
            assert not _closed(flood[-1], 0.05)  # the newest wait; the oldest were closed for them
        finally:
            for s in flood:
                s.close()


@pytest.mark.parametrize("head", [
    b"GET /facts HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n",  # no token, no session
    b"GET / HTTP/1.1\r\nHost: evil.example:{port}\r\n\r\n",  # a foreign Host
])
def test_a_refused_request_does_not_keep_its_connection(seeded_copy, head):
    with serve(seeded_copy(), refresh=False) as view:
        s = socket.create_connection(("127.0.0.1", _port(view)))
        try:
            s.sendall(head.replace(b"{port}", str(_port(view)).encode()))
            s.settimeout(2.0)
            answer = s.recv(65536)
            assert answer.startswith((b"HTTP/1.1 401", b"HTTP/1.1 421")), answer[:80]
            assert b"\r\nconnection: close\r\n" in answer.lower()
            assert _closed(s, 2.0), "a refused client kept its connection to send more"
        finally:
            s.close()
