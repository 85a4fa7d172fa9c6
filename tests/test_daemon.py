"""The warm embedder daemon: same vectors as in-process, private socket, stale sockets healed."""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from memvault.models import daemon
from memvault.models.embeddings import load_embedder
from conftest import REPO_ROOT

MODEL = "all-MiniLM-L6-v2"


@pytest.fixture
def runtime(monkeypatch):
    run = Path(tempfile.mkdtemp(prefix="mv", dir="/tmp"))  # short: AF_UNIX paths are limited to 108 bytes
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(run))
    monkeypatch.delenv("MEMVAULT_NO_DAEMON")
    yield run
    daemon.stop(MODEL, None)
    shutil.rmtree(run, ignore_errors=True)


def test_socket_dir_must_be_private(monkeypatch):
    run = Path(tempfile.mkdtemp(prefix="mv", dir="/tmp"))
    (run / "memvault").mkdir(mode=0o755)
    os.chmod(run / "memvault", 0o755)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(run))
    with pytest.raises(daemon.DaemonUnavailable, match="not private"):
        daemon.socket_path(MODEL, None)


def test_unavailable_model_is_reported_not_hung(runtime, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from memvault.rules.errors import ModelUnavailable

    with pytest.raises(ModelUnavailable, match="bge"):
        daemon.connect("BAAI/bge-small-en-v1.5", None)


@pytest.mark.model
def test_daemon_vectors_equal_in_process_and_stale_socket_is_healed(runtime):
    path = daemon.socket_path(MODEL, None)
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(path))  # a socket file nobody listens on: a dead daemon's leftover
    stale.close()
    remote = daemon.connect(MODEL, None)
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    local = load_embedder(MODEL)
    assert remote.identity == local.identity
    query = "which port does the primary database listen on"
    assert list(remote.embed_query(query)) == pytest.approx(list(local.embed_query(query)), abs=1e-6)
    docs = ["web1 serves the site", "the backup runs at 03:15"]
    assert remote.embed_documents(docs) == pytest.approx(local.embed_documents(docs), abs=1e-6)
    assert remote.split("word " * 600, 100) == local.split("word " * 600, 100)
    assert daemon.stop(MODEL, None)


@pytest.mark.model
def test_cold_cli_through_the_daemon_matches_in_process_top_10(runtime, tmp_path):
    root = tmp_path / "vault"
    shutil.copytree(REPO_ROOT / "vault", root)
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull}
    subprocess.run(["git", "init", "-q"], cwd=root, check=True, env=env)
    from memvault import Vault

    v = Vault.open(root)
    v.reindex()
    queries = ["when does the nightly database backup run", "how do I drain a web host", "certificate expiry"]
    for query in queries:
        inproc = [(h.kind, h.id) for h in v.recall(query, k=10, record_access=False)]
        out = subprocess.run([sys.executable, "-m", "memvault", "--vault", str(root), "recall", query, "--json",
                              "--no-record"], capture_output=True, text=True, timeout=300, env=env)
        assert out.returncode == 0, out.stderr
        assert [(h["kind"], h["id"]) for h in json.loads(out.stdout)["hits"]] == inproc
    assert daemon.socket_path(MODEL, None).exists()  # the CLI went through the daemon


def test_a_peer_of_another_user_is_refused():
    import struct

    class Peer:
        def __init__(self, uid):
            self.uid = uid

        def getsockopt(self, level, option, size):
            assert (level, option) == (socket.SOL_SOCKET, socket.SO_PEERCRED)
            return struct.pack("3i", 1234, self.uid, self.uid)

    assert daemon.peer_allowed(Peer(os.getuid()))
    assert not daemon.peer_allowed(Peer(os.getuid() + 1))
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with a, b:
        assert daemon.peer_allowed(a)  # a real socket of this process


def test_a_short_reply_is_daemon_unavailable_not_a_crash(tmp_path):
    import threading

    path = Path(tempfile.mkdtemp(prefix="mv", dir="/tmp")) / "s.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(1)

    def lying_daemon():
        conn, _ = server.accept()
        with conn:
            conn.makefile("rb").readline()
            conn.sendall(json.dumps({"ok": True, "shape": [1, 384], "bytes": 1536}).encode() + b"\n" + b"\0" * 10)

    thread = threading.Thread(target=lying_daemon)
    thread.start()
    client = daemon.RemoteEmbedder.__new__(daemon.RemoteEmbedder)
    client.path, client.timeout = path, 5.0
    with pytest.raises(daemon.DaemonUnavailable, match="short reply"):
        client._call({"op": "embed_query", "text": "x"})
    thread.join()
    server.close()
    shutil.rmtree(path.parent, ignore_errors=True)


@pytest.mark.model
def test_an_idle_daemon_exits_and_removes_its_socket(runtime):
    remote = daemon.connect(MODEL, None, idle=2.0)
    path = daemon.socket_path(MODEL, None)
    assert path.exists() and remote.embed_query("x") is not None
    deadline = time.monotonic() + 30
    while path.exists():
        assert time.monotonic() < deadline, "the idle daemon did not exit"
        time.sleep(0.2)
    with pytest.raises(daemon.DaemonUnavailable):
        daemon.connect(MODEL, None, start=False)
