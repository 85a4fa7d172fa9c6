"""Many writers at once, for real: every kind of client a deployment has, each its own process on one vault, then
the vault is checked whole.

The storm (``test_a_storm_of_every_client_leaves_a_whole_vault``) runs, side by side: episode appenders through
the Python API and the CLI, ``memvault fact set`` of people (on keys of their own and one they all share), a
person editing fact files in an editor, ``memvault sync`` and ``memvault prune`` from timers, ``reindex`` (every
other one ``--full``), agent hooks at session start and per prompt with recall, two MCP sessions with different
``[scopes]``, and the web view answering requests. Each writer reports what it finished (tests/storm_worker.py);
afterwards every month file, fact, the git repository and the index are checked against those reports.

By default it storms for ``MEMVAULT_STORM_SECONDS`` (8 s: the default suite stays well under 30 s for this file's
storm); ``MEMVAULT_STORM_SECONDS=60 pytest tests/test_concurrency_storm.py`` is the long run.
"""
from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections import defaultdict
from pathlib import Path

import pytest

from memvault import Vault
from conftest import REPO_ROOT, git

WORKER = Path(__file__).with_name("storm_worker.py")
SECONDS = float(os.environ.get("MEMVAULT_STORM_SECONDS", "8"))
#: How long after the deadline every process must have exited: a writer waiting longer is hung.
GRACE = 90
SCOPES = """
[scopes."agent:mcp-a"]
read = ["facts/storm/**", "episodes/**"]
write = ["facts/storm/mcp-a/**", "episodes/**"]

[scopes."agent:mcp-b"]
read = ["facts/storm/mcp-b/**", "episodes/**"]
write = ["facts/storm/mcp-b/**", "episodes/**"]
"""


def env() -> dict[str, str]:
    # keyword-only recall: the configured model cannot load offline, nothing is downloaded, no warm process
    return {**os.environ, "PYTHONPATH": str(REPO_ROOT), "HF_HUB_OFFLINE": "1", "MEMVAULT_NO_DAEMON": "1"}


@pytest.fixture
def storm_vault(vault) -> Vault:
    toml = vault.root / "memvault.toml"
    toml.write_text(toml.read_text() + SCOPES)
    git(vault.root, "commit", "-qm", "scopes of the storm's MCP sessions", "--", "memvault.toml")
    v = Vault.open(vault.root)
    for name in ("ed",):
        for k in range(2):
            v.facts.set(f"hand/{name}-k{k}", f"{name} first text", source="user:ed")
    v.recall("first text")  # the index exists: every write tells it
    return v


class Storm:
    """Worker processes on one vault, each reporting into ``reports/<name>.jsonl``."""

    def __init__(self, root: Path, tmp: Path, seconds: float) -> None:
        self.root, self.dir = root, tmp / "reports"
        self.dir.mkdir()
        self.deadline = time.time() + seconds
        self.procs: dict[str, subprocess.Popen] = {}

    def start(self, role: str, name: str) -> subprocess.Popen:
        report = self.dir / f"{name}.jsonl"
        log = open(self.dir / f"{name}.log", "w")
        proc = subprocess.Popen([sys.executable, str(WORKER), role, name, str(self.root), str(report),
                                 str(self.deadline)], stdout=log, stderr=subprocess.STDOUT, env=env())
        self.procs[name] = proc
        return proc

    def wait(self) -> dict[str, int | str]:
        codes: dict[str, int | str] = {}
        for name, proc in self.procs.items():
            try:
                codes[name] = proc.wait(timeout=max(1.0, self.deadline + GRACE - time.time()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                codes[name] = "hung"
        return codes

    def entries(self, name: str | None = None) -> list[dict]:
        files = [self.dir / f"{name}.jsonl"] if name else sorted(self.dir.glob("*.jsonl"))
        return [dict(json.loads(line), by=f.stem) for f in files if f.exists()
                for line in f.read_text().splitlines()]

    def log(self, name: str) -> str:
        path = self.dir / f"{name}.log"
        return path.read_text() if path.exists() else ""


def month_lines(root: Path) -> list[dict]:
    """Every line of every month file, each parsed on its own: a torn or interleaved line fails here."""
    out = []
    for path in sorted((root / "episodes").rglob("*.jsonl")):
        data = path.read_bytes()
        assert data == b"" or data.endswith(b"\n"), f"{path}: last line cut short"
        for n, line in enumerate(data.splitlines(), 1):
            entry = json.loads(line)  # a torn line raises, naming nothing: say where
            assert isinstance(entry, dict), f"{path}:{n}"
            assert entry.get("created_at") and entry.get("source") and entry.get("id"), f"{path}:{n}: {line!r}"
            out.append(entry)
    return out


def check_runs(storm: Storm) -> list[str]:
    """What went wrong in any command a worker ran: a hang, a traceback, exit 70, an error of more than one line."""
    bad = []
    for e in storm.entries():
        if e["op"] != "run":
            continue
        err = e.get("err") or ""
        if e["rc"] == "hung" or e["rc"] == 70 or "Traceback" in err or "internal error" in err:
            bad.append(f"{e['by']}: {' '.join(e['argv'])} -> {e['rc']}: {err[-600:]}")
        elif e["rc"] not in (0,) and e["argv"][:1] != ["mcp"]:
            errors = [line for line in err.splitlines() if "error" in line]
            if len(errors) != 1:
                bad.append(f"{e['by']}: {' '.join(e['argv'])} -> {e['rc']} without one error line: {err[-600:]}")
            else:
                bad.append(f"{e['by']}: {' '.join(e['argv'])} -> {e['rc']}: {errors[0]}")
    return bad


def check_vault(root: Path, storm: Storm, *, killed: frozenset[str] = frozenset()) -> None:
    """The invariants every storm must leave: see the module's docstring."""
    # -- episodes: whole lines, no duplicate id, every line any writer finished is there
    lines = month_lines(root)
    ids = [e["id"] for e in lines]
    assert len(ids) == len(set(ids)), "duplicate episode ids"
    reported = [e for e in storm.entries() if e["op"] == "episode"]
    assert reported, "no writer finished an episode"
    missing = {e["id"] for e in reported} - set(ids)
    assert not missing, f"{len(missing)} acknowledged episodes lost, e.g. {sorted(missing)[:3]}"
    # -- git: whole, nothing left locked or half-written, nothing of memvault's uncommitted
    fsck = subprocess.run(["git", "fsck", "--no-progress"], cwd=root, capture_output=True, text=True)
    assert fsck.returncode == 0 and "error" not in fsck.stderr.lower(), fsck.stderr
    assert not (root / ".git" / "index.lock").exists()
    # git's own lock files (memvault's flock files stay, empty, by design: memvault-commit.lock, memvault/)
    git_locks = [p for p in (root / ".git").rglob("*.lock")
                 if p.name != "memvault-commit.lock" and "memvault" not in p.relative_to(root / ".git").parts]
    assert not git_locks, git_locks
    strays = [p for p in root.rglob("*") if ".git" not in p.relative_to(root).parts and p.name.endswith(".tmp")]
    assert not strays, f"temp files left: {strays}"
    assert git(root, "status", "--porcelain") == ""
    # -- facts: each parses, the last write of each key wins and HEAD holds it
    v = Vault.open(root)
    by_key: dict[str, list[dict]] = defaultdict(list)
    for e in storm.entries():
        if e["op"] == "fact":
            by_key[e["key"]].append(e)
    for key, writes in by_key.items():
        fact = v.facts.get(key)
        path = root / "facts" / f"{key}.md"
        assert git(root, "show", f"HEAD:facts/{key}.md") == path.read_text().rstrip("\n"), key
        writers = {w["by"] for w in writes}
        if len(writers) == 1 and writes[0]["by"] not in killed:
            assert fact.text == writes[-1]["text"], f"{key}: last write lost"
        else:
            assert fact.text in {w["text"] for w in writes} | {f"{key.split('/')[-1]} first text"}, key
    # -- the index: whole, and recall finds each fact's text as it is now, never a text it had before
    index = v.index.connection()
    assert index.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    for key, writes in by_key.items():
        now = v.facts.get(key).text
        hits = [h for h in v.recall(now.split()[-1], k=5, mode="keyword") if h.kind == "fact"]
        assert hits and hits[0].id == key and hits[0].text == now, (key, now, [(h.id, h.text) for h in hits])
        for old in {w["text"] for w in writes} - {now}:
            stale = [h for h in v.recall(old.split()[-1], k=5, mode="keyword") if h.kind == "fact" and h.id == key]
            assert not stale, f"{key}: old text {old!r} still recalled"
    v.close()


def web_reader(root: Path, deadline: float, failures: list[str], answered: list[str],
               stop: threading.Event) -> subprocess.Popen:
    """``memvault ui`` on a free port, read by one client until the deadline; every answer but 200 is a failure."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    token = "storm-token-0123456789abcdef"
    proc = subprocess.Popen([sys.executable, "-m", "memvault", "--vault", str(root), "ui", "--port", str(port)],
                            env={**env(), "MEMVAULT_UI_TOKEN": token}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)

    def read() -> None:
        pages = ["/", "/facts", "/timeline", "/inbox"]
        i, started = 0, time.time()
        while time.time() < deadline and not stop.is_set():
            req = urllib.request.Request(f"http://127.0.0.1:{port}{pages[i % len(pages)]}",
                                         headers={"Authorization": f"Bearer {token}"})
            i += 1
            try:
                with urllib.request.urlopen(req, timeout=30) as answer:
                    if answer.status != 200:
                        failures.append(f"{req.full_url}: {answer.status}")
            except urllib.error.HTTPError as e:
                failures.append(f"{req.full_url}: {e.code}")
            except OSError as e:
                if not answered and time.time() < started + 30:  # not listening yet
                    time.sleep(0.25)
                    continue
                failures.append(f"{req.full_url}: no answer: {e}")
            else:
                answered.append(req.full_url)
    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    proc.reader = thread  # type: ignore[attr-defined]
    return proc


ROLES = [("api-append", "ap1"), ("api-append", "ap2"), ("cli-append", "cla"), ("cli-fact", "p1"),
         ("cli-fact", "p2"), ("api-fact", "af"), ("hand", "ed"), ("sync", "timer-sync"), ("prune", "timer-prune"),
         ("reindex", "reindexer"), ("reader", "hooks"), ("mcp", "mcp-a"), ("mcp", "mcp-b")]


def test_a_storm_of_every_client_leaves_a_whole_vault(storm_vault, tmp_path):
    root = storm_vault.root
    storm = Storm(root, tmp_path, SECONDS)
    for role, name in ROLES:
        storm.start(role, name)
    web_failures: list[str] = []
    web_answers: list[str] = []
    stop = threading.Event()
    web = web_reader(root, storm.deadline, web_failures, web_answers, stop)
    codes = storm.wait()
    stop.set()
    web.reader.join(timeout=60)
    web.send_signal(signal.SIGINT)
    try:
        web_err = web.communicate(timeout=30)[1]
    except subprocess.TimeoutExpired:
        web.kill()
        web_err = "hung on Ctrl-C"
    assert codes == {name: 0 for _, name in ROLES}, {n: storm.log(n)[-1500:] for n, c in codes.items() if c}
    assert not check_runs(storm), "\n".join(check_runs(storm))
    assert web_answers and not web_failures and "Traceback" not in web_err, (web_failures[:5], web_err[-1500:])
    # hand edits made after the timer's last sync are this sync's to commit; nothing else may be pending
    pending = git(root, "status", "--porcelain").splitlines()
    assert all(line[3:].startswith("facts/hand/") for line in pending), pending
    done = subprocess.run([sys.executable, "-m", "memvault", "--vault", str(root), "sync"], env=env(),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    check_vault(root, storm)


# ------------------------------------------------------------------------------------------ a stuck lock holder
HOLD = """
import fcntl, os, sys, time
os.makedirs(os.path.dirname(sys.argv[1]), exist_ok=True)
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)
fcntl.flock(fd, fcntl.LOCK_EX)
print("held", flush=True)
time.sleep(600)
"""


@pytest.fixture
def holder():
    """``hold(path)``: another process takes the flock on ``path`` and keeps it (a write stuck in a git hook that
    waits on a dead network share, a ``memvault`` stopped with Ctrl-Z), until the test ends."""
    procs = []

    def hold(path: Path) -> None:
        proc = subprocess.Popen([sys.executable, "-c", HOLD, str(path)], stdout=subprocess.PIPE, text=True)
        procs.append(proc)
        assert proc.stdout.readline().strip() == "held"

    yield hold
    for proc in procs:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("lock, command", [
    ("write.lock", ["fact", "set", "db/x", "a new value"]),
    ("episodes.lock", ["episode", "add", "disk full on db01"]),
    ("sync.lock", ["sync"]),
])
def test_a_writer_behind_a_stuck_lock_holder_fails_naming_the_lock_instead_of_hanging(vault, holder, lock, command):
    holder(vault.state_dir / "locks" / lock)
    start = time.monotonic()
    try:
        done = subprocess.run([sys.executable, "-m", "memvault", "--vault", str(vault.root), *command],
                              env={**env(), "MEMVAULT_LOCK_WAIT": "2"}, capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        pytest.fail(f"memvault {' '.join(command)} still waiting for {lock} after 30 s")
    assert done.returncode == 1 and time.monotonic() - start < 30
    [line] = done.stderr.strip().splitlines()[-1:]
    assert line.startswith("memvault: error:") and lock in line and "MEMVAULT_LOCK_WAIT" in line, done.stderr
    assert "Traceback" not in done.stderr
    assert not (vault.root / "facts/db/x.md").exists() and git(vault.root, "status", "--porcelain") == ""
