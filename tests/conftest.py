"""Test isolation: every test gets its own HOME, git config, runtime directory and environment; no test sees the
real user's, and no process a test started outlives the suite."""
from __future__ import annotations

import itertools
import os
import shutil
import signal
import subprocess
import tempfile
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from memvault import Vault
from memvault.interfaces.cli import cli

REPO_ROOT = Path(__file__).resolve().parents[1]
pytest_plugins = ["ci_guard"]


#: Every test's runtime directory (where the warm process's socket lives) is under this one, made at start.
RUNTIME_BASE = Path(tempfile.mkdtemp(prefix="mvt-", dir="/tmp"))
_runtime_ids = itertools.count()


#: Where exported ONNX graphs are kept across tests (and across runs, in pytest's own cache): the first test that
#: loads the packaged model exports it once. Set by pytest_configure.
MODEL_CACHE: Path | None = None


def pytest_configure(config):
    global MODEL_CACHE
    cache = getattr(config, "cache", None)
    MODEL_CACHE = Path(cache.mkdir("memvault-model-cache")) if cache is not None else RUNTIME_BASE / "model-cache"
    # Outside any test too (a thread still running after its test, a session fixture): never the user's runtime
    # directory, never a warm process unless a test asks for one. pytest_sessionfinish finds any left behind.
    (RUNTIME_BASE / "session").mkdir(mode=0o700, exist_ok=True)
    os.environ["XDG_RUNTIME_DIR"] = str(RUNTIME_BASE / "session")
    os.environ["MEMVAULT_NO_DAEMON"] = "1"


@pytest.fixture(autouse=True)
def isolated_env(tmp_path_factory, monkeypatch):
    return isolate(tmp_path_factory.mktemp("home"), monkeypatch)


def isolate(home: Path, monkeypatch) -> Path:
    """Point HOME, git's config, the temp folder and the runtime directory into ``home`` (the runtime directory is
    short, under /tmp) and clear memvault's variables (also used by session-scoped fixtures that build a vault once,
    with a ``pytest.MonkeyPatch.context()``)."""
    gitconfig = home / ".gitconfig"
    gitconfig.write_text("[user]\n\tname = Test User\n\temail = test@example.com\n[init]\n\tdefaultBranch = main\n")
    monkeypatch.setenv("HOME", str(home))
    # Temp files (an invalid `fact edit` is kept in one on purpose) stay inside the test's directory.
    tmp = home / "tmp"
    tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(gitconfig))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("USER", "tester")
    # CLI recall would start a warm process that outlives the test; the tests of the warm process turn it back on,
    # in this test's own runtime directory (never the user's), and stop it (pytest_sessionfinish checks).
    monkeypatch.setenv("MEMVAULT_NO_DAEMON", "1")
    runtime = RUNTIME_BASE / str(next(_runtime_ids))
    runtime.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    monkeypatch.setenv("XDG_CACHE_HOME", str(MODEL_CACHE or RUNTIME_BASE / "model-cache"))
    # A vault outside git keeps its state under XDG_STATE_HOME (memvault.rules.places): the test's own.
    monkeypatch.setenv("XDG_STATE_HOME", str(home / ".local" / "state"))
    # No test reaches the network: model hubs are never asked (subprocesses included), and a socket to anything
    # but this machine fails at once in this process.
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    for name in ("MEMVAULT_DIR", "MEMVAULT_SOURCE", "GIT_DIR", "GIT_WORK_TREE", "EDITOR", "VISUAL",
                 "GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL"):
        monkeypatch.delenv(name, raising=False)
    return home


@pytest.fixture(autouse=True)
def no_network(monkeypatch):
    """Connections to other machines are refused in tests; loopback and unix sockets work."""
    import ipaddress
    import socket

    real_connect = socket.socket.connect
    real_connect_ex = socket.socket.connect_ex

    def local(address) -> bool:
        if not isinstance(address, tuple):
            return True  # AF_UNIX
        host = address[0]
        if host in ("localhost", ""):
            return True
        try:
            return ipaddress.ip_address(host).is_loopback
        except ValueError:
            return False  # a name: it would need DNS, which is the network too

    def connect(self, address):
        if not local(address):
            raise OSError(f"tests do not reach the network ({address!r})")
        return real_connect(self, address)

    def connect_ex(self, address):
        if not local(address):
            return 101  # ENETUNREACH
        return real_connect_ex(self, address)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket.socket, "connect_ex", connect_ex)


@pytest.fixture
def options(request) -> dict:
    """What tests pass to Vault: the fake models when the test asks for them (``models``), nothing otherwise."""
    return {"embedder_factory": request.getfixturevalue("models")} if "models" in request.fixturenames else {}


@pytest.fixture
def vault(tmp_path, options) -> Vault:
    """A new vault that trusts agents too (the core tests write as agents); trust tests use strict_vault."""
    v = Vault.init(tmp_path / "vault")
    toml = v.root / "memvault.toml"
    toml.write_text(toml.read_text().replace('trusted = ["user:*"]', 'trusted = ["user:*", "agent:*"]'))
    git(v.root, "commit", "-qm", "trust agents in tests", "--", "memvault.toml")
    return Vault.open(v.root, **options)


@pytest.fixture
def strict_vault(tmp_path, options) -> Vault:
    """A new vault with the default trust: only user:* writes facts directly."""
    return Vault.init(tmp_path / "strict", **options)


@pytest.fixture
def models():
    """Model loading replaced by deterministic fakes (one per model name) that count loads and calls; passed to
    every Vault a test builds through ``options`` (never a global switch in the library)."""
    from fake_embedder import Models

    return Models()


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


@pytest.fixture
def invoke(runner, vault, options):
    """Run the CLI against the test vault: invoke("fact", "get", "x") -> click Result."""
    from memvault.interfaces.cli import Context

    def run(*args: str, input: str | bytes | None = None, vault_path: Path | None = None):
        return runner.invoke(cli, ["--vault", str(vault_path or vault.root), *args], input=input,
                             obj=Context(**options))

    return run


def use_editor(monkeypatch, script: Path, body: str) -> None:
    """``$EDITOR`` is a Python script that runs ``body`` with ``p``, the path of the file it is asked to edit."""
    script.write_text("import sys, pathlib\np = pathlib.Path(sys.argv[1])\n" + body)
    monkeypatch.setenv("EDITOR", f"{sys.executable} {script}")


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.rstrip("\n")


def with_settings(vault: Vault, text: str, message: str = "settings") -> Vault:
    """``vault`` with ``text`` appended to its memvault.toml, committed, and opened again."""
    toml = vault.root / "memvault.toml"
    toml.write_text(toml.read_text() + text)
    git(vault.root, "commit", "-qm", message, "--", "memvault.toml")
    return Vault.open(vault.root)


def leftover_processes(base: Path = RUNTIME_BASE) -> list[tuple[int, str]]:
    """Processes started by this session's tests (their XDG_RUNTIME_DIR is under ``base``) that are still alive."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            env = (entry / "environ").read_bytes().split(b"\0")
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        if any(e.startswith(b"XDG_RUNTIME_DIR=" + str(base).encode()) for e in env) and cmdline:
            found.append((int(entry.name), cmdline))
    return found


def pytest_sessionfinish(session, exitstatus):
    """No test leaves a process behind (a warm process, a server): each one found is named, stopped, and fails the
    run."""
    left = leftover_processes()
    for pid, _cmdline in left:
        try:
            os.kill(pid, signal.SIGTERM)
        except OSError:
            pass
    shutil.rmtree(RUNTIME_BASE, ignore_errors=True)
    if left:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        lines = [f"processes left running by the tests (stopped now): {cmdline} (pid {pid})" for pid, cmdline in left]
        if reporter is not None:
            reporter.write_line("\n".join(lines), red=True)
        session.exitstatus = 1


@pytest.fixture
def live(vault, models):
    """The test vault, seeded and committed, held as a warm process holds it: with a file watcher."""
    v = Vault.open(vault.root, embedder_factory=models)
    v.facts.set("db/primary", "The primary database listens on port 5432.", source="user:t")
    v.facts.set("web/front", "The web front is nginx on web1.", source="user:t")
    v.facts.set("ops/backup", "The nightly backup runs at 03:15 from db2.", source="user:t")
    feed = v.follow()
    assert feed.running, feed.reason
    yield v
    v.close()
