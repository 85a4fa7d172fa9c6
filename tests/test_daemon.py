"""The warm process: its private channel (directory, peer uid, install key), restarts after idling out, the same
vectors as in-process, whole calls for hooks (warm_client), and no process left behind."""
from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from memvault import Vault
from memvault.interfaces import warm_client
from memvault.models import channel, daemon
from memvault.rules.errors import DaemonUnavailable
from conftest import REPO_ROOT, git
from fake_embedder import FakeEmbedder
from warm_server import answering_once, serving

MODEL = "all-MiniLM-L6-v2"
NOBODY = 65534


@pytest.fixture
def warm_on(monkeypatch):
    """The warm process allowed (in this test's own runtime directory) and stopped after the test. It runs this
    checkout's code: an installed memvault elsewhere (a venv's editable install of another worktree) is other code,
    which never answers this install's socket."""
    monkeypatch.delenv("MEMVAULT_NO_DAEMON")
    monkeypatch.setenv("PYTHONPATH", str(REPO_ROOT))
    yield
    daemon.stop()


def minilm_vault(root: Path, **embedding: str) -> Vault:
    v = Vault.init(root)
    toml = v.root / "memvault.toml"
    text = toml.read_text().replace('model = "BAAI/bge-small-en-v1.5"', 'model = "all-MiniLM-L6-v2"')
    for name, value in embedding.items():
        text = re.sub(rf"(?m)^{name} = .*$", f"{name} = {json.dumps(value)}", text)
    toml.write_text(text)
    git(v.root, "commit", "-qm", "model", "--", "memvault.toml")
    return Vault.open(v.root)


def wait_for(predicate, what: str, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)
    return value


# ------------------------------------------------------------------------------------------------ the directory
def test_socket_dir_must_be_private(monkeypatch, tmp_path):
    run = Path(os.environ["XDG_RUNTIME_DIR"])
    (run / "memvault").mkdir(mode=0o755)
    os.chmod(run / "memvault", 0o755)
    with pytest.raises(DaemonUnavailable, match="not private"):
        channel.private_dir()
    with pytest.raises(DaemonUnavailable):
        daemon.start()


def test_a_symlinked_socket_dir_is_refused_without_following_it(tmp_path):
    """The check of the old code followed the link: a link to any directory of ours with mode 0700 passed."""
    run = Path(os.environ["XDG_RUNTIME_DIR"])
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    (run / "memvault").symlink_to(elsewhere)
    with pytest.raises(DaemonUnavailable, match="not a private directory"):
        channel.private_dir()
    with pytest.raises(DaemonUnavailable):
        channel.connect(1.0)
    assert list(elsewhere.iterdir()) == []  # nothing bound or written through the link


def test_a_parent_others_may_write_to_must_be_sticky(monkeypatch):
    base = Path(tempfile.mkdtemp(prefix="mvb-", dir=os.environ["XDG_RUNTIME_DIR"]))
    os.chmod(base, 0o777)  # world-writable, not sticky: another user could rename our directory away
    monkeypatch.setattr(channel, "TMP_BASE", str(base))
    monkeypatch.delenv("XDG_RUNTIME_DIR")
    with pytest.raises(DaemonUnavailable, match="not sticky"):
        channel.private_dir()
    os.chmod(base, 0o1777)
    os.close(channel.private_dir())  # /tmp's own mode: fine
    assert (base / f"memvault-{os.getuid()}").stat().st_mode & 0o777 == 0o700


# ------------------------------------------------------------------------------------------------ another user
_FAKE_DAEMON = r"""
import json, os, socket, sys
path, log = sys.argv[1], sys.argv[2]
os.makedirs(os.path.dirname(path), exist_ok=True)
srv = socket.socket(socket.AF_UNIX)
srv.bind(path)
os.chmod(path, 0o777)
os.chmod(os.path.dirname(path), 0o777)
srv.listen(8)
open(log + ".ready", "w").close()
while True:
    conn, _ = srv.accept()
    conn.settimeout(2)
    got = b""
    try:
        got = conn.recv(65536)
    except OSError:
        pass
    with open(log, "ab") as f:
        f.write(got)
    # forged vectors: all zeros would empty a recall
    conn.sendall(json.dumps({"ok": True, "key": sys.argv[3], "identity": {"name": "x", "revision": "r", "dims": 384,
                 "query_prefix": "", "max_tokens": 256}, "shape": [1, 384], "bytes": 1536}).encode() + b"\n"
                 + b"\0" * 1536)
    conn.close()
"""


def _other_user_available() -> bool:
    return os.getuid() == 0 and shutil.which("setpriv") is not None and os.path.exists("/usr/bin/python3")


needs_other_user = pytest.mark.skipif(not _other_user_available(),
                                      reason="needs root, setpriv and /usr/bin/python3 to run a process as nobody")


@pytest.fixture
def world_tmp(monkeypatch):
    """A stand-in for /tmp (world-writable, sticky) with no XDG_RUNTIME_DIR: where the hijack was possible."""
    base = Path(tempfile.mkdtemp(prefix="mvw-", dir="/tmp"))
    os.chmod(base, 0o1777)
    monkeypatch.setattr(channel, "TMP_BASE", str(base))
    monkeypatch.delenv("XDG_RUNTIME_DIR")
    procs: list[subprocess.Popen] = []
    yield base, procs
    for proc in procs:
        proc.kill()
        proc.wait()
    shutil.rmtree(base, ignore_errors=True)


def start_as_nobody(procs, socket_path: Path, log: Path) -> None:
    procs.append(subprocess.Popen(
        ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "/usr/bin/python3", "-c",
         _FAKE_DAEMON, str(socket_path), str(log), channel.install_key()],
        env={"PATH": "/usr/bin:/bin"}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    wait_for(lambda: Path(str(log) + ".ready").exists(), "the other user's fake warm process", 15)


@needs_other_user
def test_daemon_socket_hijack_by_another_user_is_refused(world_tmp, monkeypatch, tmp_path):
    """Another local user makes /tmp/memvault-<uid> before us and listens there as our warm process: nothing is
    sent to it, and the model is loaded in-process instead."""
    base, procs = world_tmp
    spool = base / "spool"
    spool.mkdir(mode=0o777)
    os.chmod(spool, 0o777)
    log = spool / "received"
    ours = base / f"memvault-{os.getuid()}"
    start_as_nobody(procs, ours / channel.socket_name(), log)
    assert ours.stat().st_uid == NOBODY
    with pytest.raises(DaemonUnavailable, match="not private to this user"):
        channel.connect(2.0)
    with pytest.raises(DaemonUnavailable):
        daemon.start()

    from memvault.models import embeddings
    from memvault.models.engine import Engine

    monkeypatch.setattr(embeddings, "load_embedder", lambda name, **_: FakeEmbedder(name=name))
    monkeypatch.delenv("MEMVAULT_NO_DAEMON")
    engine = Engine(MODEL, daemon=True)
    assert engine.get().embed_query("the primary database password").shape == (32,)
    assert engine.source == "process"
    assert not log.exists() or log.read_bytes() == b""


@needs_other_user
def test_a_symlink_planted_by_another_user_is_not_followed(world_tmp, tmp_path):
    base, procs = world_tmp
    spool = base / "spool"
    spool.mkdir(mode=0o777)
    os.chmod(spool, 0o777)
    theirs = spool / "theirs"
    start_as_nobody(procs, theirs / channel.socket_name(), spool / "received")
    # the old check: a link to a directory of ours that is 0700 passed, then the link was swapped to theirs
    mine = Path(tempfile.mkdtemp(dir=base))
    subprocess.run(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "/bin/ln", "-s",
                    str(mine), str(base / f"memvault-{os.getuid()}")], check=True)
    with pytest.raises(DaemonUnavailable, match="not a private directory"):
        channel.connect(2.0)
    assert list(mine.iterdir()) == []
    assert not (spool / "received").exists()


@needs_other_user
def test_a_server_of_another_uid_is_refused_before_anything_is_sent(world_tmp, monkeypatch):
    """Even if a path led to another user's socket (the directory swapped after the check), the client asks the
    kernel who listens and sends nothing to a stranger."""
    base, procs = world_tmp
    spool = base / "spool"
    spool.mkdir(mode=0o777)
    os.chmod(spool, 0o777)
    theirs = spool / "theirs" / "s.sock"
    start_as_nobody(procs, theirs, spool / "received")
    os.close(channel.private_dir())  # our own directory passes its check...
    monkeypatch.setattr(channel, "at", lambda fd, name: str(theirs))  # ...and the path still leads to theirs
    with pytest.raises(DaemonUnavailable, match=f"another user \\(uid {NOBODY}\\)"):
        channel.call({"op": "embed_query", "text": "the primary database password"}, 2.0)
    time.sleep(0.3)
    assert not (spool / "received").exists() or (spool / "received").read_bytes() == b""


@needs_other_user
def test_the_server_refuses_a_peer_of_another_uid(world_tmp):
    base, _procs = world_tmp
    path = base / "s.sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    os.chmod(path, 0o777)
    server.listen(1)
    peer = subprocess.Popen(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
                             "/usr/bin/python3", "-c",
                             f"import socket,time; s=socket.socket(socket.AF_UNIX); s.connect({str(path)!r}); "
                             "time.sleep(2)"])
    try:
        conn, _ = server.accept()
        with conn:
            assert channel.peer_uid(conn) == NOBODY and not channel.peer_allowed(conn)
    finally:
        peer.kill()
        peer.wait()
        server.close()


def test_a_peer_of_another_user_is_refused():
    import struct

    class Peer:
        def __init__(self, uid):
            self.uid = uid

        def getsockopt(self, level, option, size):
            assert (level, option) == (socket.SOL_SOCKET, socket.SO_PEERCRED)
            return struct.pack("3i", 1234, self.uid, self.uid)

    assert channel.peer_allowed(Peer(os.getuid()))
    assert not channel.peer_allowed(Peer(os.getuid() + 1))
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with a, b:
        assert channel.peer_allowed(a)  # a real socket of this process


# ------------------------------------------------------------------------------------------------ one install
def test_two_installs_or_versions_never_share_a_warm_process(monkeypatch, tmp_path):
    ours = channel.install_key()
    monkeypatch.setattr(channel, "_key", None)
    monkeypatch.setattr(channel, "version", lambda: "99.0")
    assert channel.install_key() != ours
    monkeypatch.setattr(channel, "_key", None)
    monkeypatch.setattr(channel, "_PACKAGE", tmp_path)  # another checkout: another directory, other code
    (tmp_path / "x.py").write_text("")
    other = channel.install_key()
    assert other != ours and channel.socket_name() != f"{channel.SOCKET_PREFIX}{ours[:16]}.sock"


def test_a_warm_process_of_another_version_is_never_talked_to(tmp_path):
    """The handshake: the server refuses a request stamped with another install's key, and the client refuses a
    reply that is not stamped with its own."""
    server = daemon.Server({})
    thread = threading.Thread(target=server.serve, daemon=True)
    thread.start()
    assert server.listening.wait(10)
    try:
        with channel.connect(5.0) as sock:
            sock.sendall(json.dumps({"op": "hello", "key": "another-install"}).encode() + b"\n")
            reply = json.loads(sock.makefile("rb").readline())
        assert not reply["ok"] and "another memvault install or version" in reply["error"]
        assert channel.call({"op": "hello"}, 5.0)[0]["ok"]
    finally:
        server.stopping.set()
        thread.join(5)

    # a process that answers with another key (an old one that kept our socket's name)
    impostor = json.dumps({"ok": True, "key": "another-install", "pid": 1}).encode() + b"\n"
    with answering_once(impostor), pytest.raises(DaemonUnavailable, match="another memvault install or version"):
        channel.call({"op": "hello"}, 5.0)


def test_a_short_reply_is_daemon_unavailable_not_a_crash():
    short = b'{"ok": true, "shape": [1, 384], "bytes": 1536, "key": "%s"}\n' + b"\0" * 10
    with answering_once(short), pytest.raises(DaemonUnavailable, match="short reply"):
        channel.call({"op": "embed_query", "text": "x"}, 5.0)


# ------------------------------------------------------------------------------------------------ the process
def test_unavailable_model_is_reported_not_hung(warm_on, monkeypatch):
    from memvault.rules.errors import ModelUnavailable

    with pytest.raises(ModelUnavailable, match="bge"):
        daemon.connect("BAAI/bge-small-en-v1.5", None)
    assert daemon.status() is not None  # the process stays up for other models and vaults


def test_a_stale_socket_is_replaced_and_the_process_stops(warm_on):
    with channel.opened_dir() as fd:
        stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        stale.bind(channel.at(fd, channel.socket_name()))  # a dead process's leftover: nobody listens
    stale.close()
    daemon.start(idle=60)
    status = daemon.status()
    assert status is not None and status["pid"] != os.getpid() and status["rss_bytes"] > 0
    assert daemon.stop()
    # stop() returns once the process has exited, not when it has only been asked to: the test that started it
    # last in a run was reported as a process left running (its loop takes up to a second to see the stop).
    assert daemon.status() is None and _exited(status["pid"])


def _exited(pid: int) -> bool:
    """Whether ``pid`` is gone or a zombie (exited, not yet reaped by this process, which started it)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def test_a_warm_process_of_other_code_says_so_at_once(warm_on, monkeypatch):
    """A process whose code changed since it computed its install key (memvault upgraded or edited under a
    long-lived MCP server) started a warm process that listened under the new code's name, where it never looked:
    it waited START_TIMEOUT (30 s) and said only that the process 'did not listen'."""
    monkeypatch.setattr(channel, "_key", "0" * 20)  # the key this process computed before the code changed
    started = time.monotonic()
    with pytest.raises(DaemonUnavailable, match="exited at start.*upgraded or edited"):
        daemon.start(idle=60)
    assert time.monotonic() - started < daemon.START_TIMEOUT / 2
    monkeypatch.setattr(channel, "_key", None)
    assert daemon.status() is None  # it did not stay behind, listening for nobody


@pytest.mark.model
def test_daemon_vectors_equal_in_process(warm_on):
    from memvault.models.embeddings import SentenceTransformerEmbedder

    remote = daemon.connect(MODEL, None)
    local = SentenceTransformerEmbedder(MODEL)  # torch: the vectors the index has always held
    assert remote.identity == local.identity
    query = "which port does the primary database listen on"
    assert list(remote.embed_query(query)) == pytest.approx(list(local.embed_query(query)), abs=1e-5)
    docs = ["web1 serves the site", "the backup runs at 03:15", "x " * 400]
    assert remote.embed_documents(docs) == pytest.approx(local.embed_documents(docs), abs=1e-5)
    assert remote.split("word " * 600, 100) == local.split("word " * 600, 100)
    assert remote.count_tokens("Ünïcödé and emoji 🚀") == local.count_tokens("Ünïcödé and emoji 🚀")
    assert {m["backend"] for m in daemon.status()["models"]} == {"onnx"}


@pytest.mark.model
def test_cold_cli_through_the_daemon_matches_in_process_top_10(warm_on, tmp_path):
    root = tmp_path / "vault"
    shutil.copytree(REPO_ROOT / "vault", root)
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    v = Vault.open(root, daemon=False)
    v.reindex()
    queries = ["when does the nightly database backup run", "how do I drain a web host", "certificate expiry"]
    for query in queries:
        inproc = [(h.kind, h.id) for h in v.recall(query, k=10, record_access=False)]
        out = subprocess.run([sys.executable, "-m", "memvault", "--vault", str(root), "recall", query, "--json",
                              "--no-record"], capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr
        assert [(h["kind"], h["id"]) for h in json.loads(out.stdout)["hits"]] == inproc
    assert daemon.status() is not None  # the CLI went through the warm process


@pytest.mark.model
def test_a_warm_client_outlives_its_model_process_idling_out(warm_on, tmp_path):
    """Attack 2: once the model process idled out, every later recall failed with "embedder daemon at ...sock: No
    such file or directory" (DaemonUnavailable from the Python API)."""
    v = minilm_vault(tmp_path / "v", daemon_idle="2s")
    v.facts.set("db/primary", "The primary database listens on 10.8.0.4 port 5432.", source="user:t")
    first = [h.id for h in v.recall("which port does the database listen on", k=3)]
    assert first == ["db/primary"] and v.engine.source == "daemon"
    pid = daemon.status()["pid"]
    wait_for(lambda: daemon.status() is None, "the warm process to idle out", 60)
    again = v.recall("which port does the database listen on", k=3)
    assert [h.id for h in again] == first and again.mode == "hybrid", again.warnings
    assert daemon.status()["pid"] != pid and v.engine.loaded().restarts >= 1


@pytest.mark.model
def test_an_mcp_server_outlives_its_model_process_idling_out(warm_on, tmp_path):
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters, stdio_client

    v = minilm_vault(tmp_path / "v", daemon_idle="4s")  # long enough to read its pid on a loaded machine
    v.facts.set("db/primary", "The primary database listens on 10.8.0.4 port 5432.", source="user:t")
    params = StdioServerParameters(command=sys.executable, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
                                   args=["-m", "memvault.mcp_server", "--vault", str(v.root)])

    async def go():
        with open(tmp_path / "stderr.log", "w") as errlog:
            async with Client(stdio_client(params, errlog=errlog)) as client:
                first = await client.call_tool("recall", {"query": "which port does the database listen on"})
                pid = daemon.status()["pid"]  # read at once: the idle clock (4 s) started with the call's end
                while daemon.status() is not None:
                    await asyncio.sleep(0.2)
                second = await client.call_tool("recall", {"query": "which port does the database listen on"})
                return first, pid, second, daemon.status()["pid"]

    first, pid, second, pid_after = asyncio.run(asyncio.wait_for(go(), 180))
    assert not first.is_error and not second.is_error, (first.content, second.content)
    assert [h["id"] for h in second.structured_content["hits"]] == ["db/primary"]
    assert second.structured_content["mode"] == "hybrid"
    assert pid_after != pid


# ------------------------------------------------------------------------------------------------ whole calls
def test_warm_client_returns_none_without_a_warm_process(vault):
    started = time.monotonic()
    assert warm_client.call(str(vault.root), "recall", {"query": "anything"}) is None
    assert time.monotonic() - started < 1.0
    assert daemon.status() is None  # and it started none


def test_warm_client_serves_recall_as_the_cli_would(vault, models, monkeypatch):
    """A warm process serving calls (in this process, on a thread, with the fake model): the same answer as the
    library, the caller's source, a bad argument as the CLI's one line, an unknown call refused."""
    vault.facts.set("db/primary", "The primary database listens on 10.8.0.4 port 5432.", source="user:t")
    fake = Vault.open(vault.root, embedder_factory=models)
    expected = [h.id for h in fake.recall("primary database port", k=3, record_access=False)]
    with serving(models) as server:
        monkeypatch.setenv("MEMVAULT_SOURCE", "agent:hook")
        reply = warm_client.call(str(vault.root), "recall", {"query": "primary database port", "k": 3,
                                                              "record": False})
        assert [h["id"] for h in reply["hits"]] == expected
        assert fake.recall_log.recalls(limit=1)[0].source == "agent:hook"  # the caller's, as the CLI records it
        prompt = warm_client.call(str(vault.root), "recall", {"query": "primary database port", "fmt": "prompt"})
        assert prompt["rendered"].startswith("<memory")
        bad = warm_client.call(str(vault.root), "recall", {"query": "x", "k": 0})
        assert bad["exit_code"] == 1 and "k" in bad["error"]
        unknown = warm_client.call(str(vault.root), "set_fact", {"key": "a", "text": "b"})
        assert "not a call the warm process serves" in unknown["error"]
        forged = warm_client.call(str(vault.root), "recall", {"query": "x", "source": "not a source"})
        assert "source" in forged["error"]
        nowhere = warm_client.call(str(vault.root / "nope"), "recall", {"query": "x"})
        assert "not a vault" in nowhere["error"]
        assert server.vaults.roots() == [str(vault.root)]


@pytest.mark.model
def test_a_hook_process_gets_recall_from_the_warm_process(warm_on, tmp_path):
    v = minilm_vault(tmp_path / "v")
    v.facts.set("db/primary", "The primary database listens on 10.8.0.4 port 5432.", source="user:t")
    v.recall("warm up", k=1)  # starts the warm process, as any CLI recall does
    code = ("import json, sys; from memvault.interfaces.warm_client import call; "
            "print(json.dumps(call(sys.argv[1], 'recall', {'query': 'which port does the database use', 'k': 2})))")
    out = subprocess.run([sys.executable, "-c", code, str(v.root)], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "MEMVAULT_SOURCE": "agent:session-hook"})
    reply = json.loads(out.stdout)
    assert [h["id"] for h in reply["hits"]] == ["db/primary"] and reply["mode"] == "hybrid"
    status = daemon.status()
    assert status["vaults"] == [str(v.root)]
    # the hook imported neither the vault code nor numpy
    check = subprocess.run([sys.executable, "-c", "import sys; from memvault.interfaces.warm_client import call; "
                            "call(sys.argv[1], 'recall', {'query': 'x'}); "
                            "print(sorted(m for m in sys.modules if m.startswith(('memvault.core', 'numpy', "
                            "'memvault.index', 'torch'))))", str(v.root)], capture_output=True, text=True, timeout=60)
    assert check.stdout.strip() == "[]", check.stdout + check.stderr


def test_stats_reports_the_warm_process_and_never_starts_one(vault, monkeypatch):
    monkeypatch.delenv("MEMVAULT_NO_DAEMON")
    v = Vault.open(vault.root)
    stats = v.stats()
    assert stats["warm_process"] is None and "none running" in stats["summary"][-1]
    assert daemon.status() is None
    with serving():
        stats = v.stats()
        assert stats["warm_process"]["rss_bytes"] > 10 * 2**20
        assert "resident" in stats["summary"][-1] and str(os.getpid()) in stats["summary"][-1]


def test_a_warm_process_that_never_listens_is_not_left_running(warm_on, monkeypatch, tmp_path):
    """start() gave up after START_TIMEOUT and left the process it had started running (a model load stuck on a
    network share, a wedged import): each later start added one more, each holding memory until killed."""
    import memvault.models as models

    (tmp_path / "never_listens.py").write_text("import time\ntime.sleep(120)\n")
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path}:{REPO_ROOT}")
    monkeypatch.setattr(models, "warm_server", "never_listens")
    monkeypatch.setattr(daemon, "START_TIMEOUT", 1.0)
    with pytest.raises(DaemonUnavailable, match="did not listen"):
        daemon.start(idle=60)

    def running() -> list[str]:
        out = []
        for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
            try:
                args = cmdline.read_bytes().split(b"\0")
            except OSError:
                continue
            if b"-m" in args[:-1] and args[args.index(b"-m") + 1] == b"never_listens":  # not pytest's own -k
                out.append(cmdline.parent.name)
        return out

    assert running() == []


def test_a_gone_warm_process_loads_the_model_here_once_for_threads_asking_together():
    """Recall embeds on two threads at once (the question and, with ``[recall] rest_weight``, the question less its
    subject; or the pending chunks beside the question): when the warm process is gone for good, each found no local
    model yet and loaded its own copy (a second model in memory, seconds each)."""
    import threading

    from memvault.models.daemon import RemoteEmbedder
    from memvault.rules.errors import DaemonUnavailable

    from fake_embedder import FakeEmbedder

    fake = FakeEmbedder(dims=32, name="fake-hash")
    loads = []
    started = threading.Barrier(2)

    def load():
        loads.append(1)
        time.sleep(0.2)
        return fake

    client = object.__new__(RemoteEmbedder)  # a client whose warm process is gone and will not start again
    client.model, client.query_prefix, client.backend, client.threads = "fake-hash", None, "auto", 0
    client.identity, client.fallback, client._local = fake.identity, load, None

    def gone(request):
        raise DaemonUnavailable("gone")

    client._call = gone
    vectors = []

    def ask(text):
        started.wait()
        vectors.append(client.embed_query(text))

    threads = [threading.Thread(target=ask, args=(t,)) for t in ("the question", "the rest")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert len(vectors) == 2 and len(loads) == 1
