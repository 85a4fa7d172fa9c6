"""Many writers at once, for real: every kind of client a deployment has, each its own process on one vault, then
the vault is checked whole.

The storm (``test_a_storm_of_every_client_leaves_a_whole_vault``) runs, side by side: episode appenders through
the Python API and the CLI, ``memvault fact set`` of people (on keys of their own and one they all share), a
person editing fact files in an editor, ``memvault sync`` and ``memvault prune`` from timers, ``reindex`` (every
other one ``--full``), agent hooks at session start and per prompt with recall, two MCP sessions with different
``[scopes]`` (each also trying to write the other's facts, and the narrower one checked never to recall them), the
web view answering requests and ``memvault watch`` keeping the index live. With ``MEMVAULT_STORM_SECONDS`` set, a
second run adds a git remote that the timers' syncs push to and a second host's clone writing and syncing. Each writer reports what it finished (tests/storm_worker.py);
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
from memvault.rules.fsutil import is_temp_name
from conftest import REPO_ROOT, git

WORKER = Path(__file__).with_name("storm_worker.py")
SECONDS = float(os.environ.get("MEMVAULT_STORM_SECONDS", "8"))
LONG = "MEMVAULT_STORM_SECONDS" in os.environ
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
    for k in range(2):
        v.facts.set(f"hand/ed-k{k}", "ed first text", source="user:ed")
    v.recall("first text")  # the index exists: every write tells it
    return v


def add_remote(vault: Vault) -> Path:
    """A remote that the timers' syncs push to; returns a second host's clone of it."""
    remote = vault.root.parent / "remote.git"
    git(vault.root.parent, "init", "-q", "--bare", str(remote))
    git(vault.root, "remote", "add", "origin", str(remote))
    git(vault.root, "push", "-q", "-u", "origin", "main")
    git(vault.root.parent, "clone", "-q", str(remote), str(vault.root.parent / "host2"))
    return vault.root.parent / "host2"


class Storm:
    """Worker processes on one vault, each reporting into ``reports/<name>.jsonl``."""

    def __init__(self, root: Path, tmp: Path, seconds: float) -> None:
        self.root, self.dir = root, tmp / "reports"
        self.dir.mkdir()
        self.deadline = time.time() + seconds
        self.procs: dict[str, subprocess.Popen] = {}

    def start(self, role: str, name: str, root: Path | None = None) -> subprocess.Popen:
        report = self.dir / f"{name}.jsonl"
        log = open(self.dir / f"{name}.log", "w")
        proc = subprocess.Popen([sys.executable, str(WORKER), role, name, str(root or self.root), str(report),
                                 str(self.deadline)], stdout=log, stderr=subprocess.STDOUT, env=env(),
                                start_new_session=True)  # its own group: a kill takes the memvault it runs too
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
    # a write killed between its temp file and the rename leaves the temp file (sync removes it after an hour)
    strays = [p.relative_to(root).as_posix() for p in root.rglob("*")
              if ".git" not in p.relative_to(root).parts and p.name.endswith(".tmp")]
    assert not strays or killed and all(is_temp_name(Path(p).name) for p in strays), f"temp files left: {strays}"
    assert sorted(git(root, "status", "--porcelain").splitlines()) == sorted(f"?? {p}" for p in strays)
    # -- facts: each parses, the last write of each key wins and HEAD holds it
    v = Vault.open(root)
    assert not [e for e in storm.entries() if e["op"] == "leak"], [e for e in storm.entries() if e["op"] == "leak"]
    by_key: dict[str, list[dict]] = defaultdict(list)
    for e in storm.entries():
        if e["op"] == "fact":
            by_key[e["key"]].append(e)
    begun = defaultdict(set)  # what a killed writer may have written before it could say so
    for e in storm.entries():
        if e["op"] == "intent" and e["by"] in killed and "key" in e:
            begun[e["key"]].add(e["text"])
    for key, writes in by_key.items():
        fact = v.facts.get(key)
        path = root / "facts" / f"{key}.md"
        assert git(root, "show", f"HEAD:facts/{key}.md") == path.read_text().rstrip("\n"), key
        writers = {w["by"] for w in writes}
        if len(writers) == 1 and not begun[key]:
            assert fact.text == writes[-1]["text"], f"{key}: last write lost"
        else:
            assert fact.text in {w["text"] for w in writes} | begun[key] | {"ed first text"}, (key, fact.text)
    # -- the index: whole, and recall finds each fact's text as it is now, never a text it had before
    index = v.index.connection()
    assert index.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    for key, writes in by_key.items():
        writes = writes + [{"text": t} for t in begun[key]]
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
        # until the storm ends, and past it until a first answer (a server starting on a loaded machine: at most 60 s)
        while (time.time() < deadline and not stop.is_set()) or (not answered and time.time() < started + 60):
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
                if not answered and time.time() < started + 60:  # not listening yet
                    time.sleep(0.25)
                    continue
                failures.append(f"{req.full_url}: no answer: {e}")
            else:
                answered.append(req.full_url)
    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    proc.reader = thread  # type: ignore[attr-defined]
    return proc


def interrupted(proc: subprocess.Popen, timeout: float) -> str:
    """Ctrl-C to ``proc``, then what it wrote on stderr; "hung on Ctrl-C" (and killed) when it did not stop."""
    proc.send_signal(signal.SIGINT)
    try:
        return proc.communicate(timeout=timeout)[1]
    except subprocess.TimeoutExpired:
        proc.kill()
        return "hung on Ctrl-C"


ROLES = [("api-append", "ap1"), ("api-append", "ap2"), ("cli-append", "cla"), ("cli-fact", "p1"),
         ("cli-fact", "p2"), ("api-fact", "af"), ("hand", "ed"), ("sync", "timer-sync"), ("sync", "timer-sync2"),
         ("prune", "timer-prune"),
         ("reindex", "reindexer"), ("reader", "hooks"), ("mcp", "mcp-a"), ("mcp", "mcp-b")]


SYNC_REBASE_DEFECT = ("a file saved while a sync rebases onto the remote leaves the rebase in progress and the sync "
                      "exits 0: test_a_file_saved_while_a_sync_rebases_never_leaves_the_rebase_in_progress")


# The long run adds episodes tracked in git, and a remote with a second host (never skipped: CI fails on a skip).
STORMS = [pytest.param(False, False, id="one-host")] + ([
    pytest.param(False, True, id="episodes-in-git"),
    pytest.param(True, False, id="with-a-remote-and-a-second-host", marks=pytest.mark.xfail(reason=SYNC_REBASE_DEFECT)),
] if LONG else [])


@pytest.mark.parametrize("remote, tracked", STORMS)
def test_a_storm_of_every_client_leaves_a_whole_vault(storm_vault, tmp_path, remote, tracked):
    root = storm_vault.root
    if tracked:  # episodes committed too: every append and prune goes through git
        toml = root / "memvault.toml"
        toml.write_text(toml.read_text().replace("track_in_git = false", "track_in_git = true"))
        (root / ".gitignore").write_text((root / ".gitignore").read_text().replace("episodes/\n", ""))
        git(root, "commit", "-qm", "track episodes", "--", "memvault.toml", ".gitignore")
    storm = Storm(root, tmp_path, SECONDS)
    for role, name in ROLES:
        storm.start(role, name)
    if remote:
        storm.start("host", "h2", add_remote(storm_vault))
    watcher = subprocess.Popen([sys.executable, "-m", "memvault", "--vault", str(root), "watch"], env=env(),
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    web_failures: list[str] = []
    web_answers: list[str] = []
    stop = threading.Event()
    web = web_reader(root, storm.deadline, web_failures, web_answers, stop)
    codes = storm.wait()
    stop.set()
    web.reader.join(timeout=60)
    web_err = interrupted(web, 30)
    watch_err = interrupted(watcher, 60)
    assert "Traceback" not in watch_err and "hung" not in watch_err and "internal error" not in watch_err, watch_err
    assert codes == {name: 0 for name in storm.procs}, {n: storm.log(n)[-1500:] for n, c in codes.items() if c}
    assert [e for e in storm.entries() if e["op"] == "refused"]  # the scoped sessions did try
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


# ------------------------------------------------------------------------------------------ kill -9 mid-write
def kill_writer(pid: int) -> None:
    """SIGKILL a worker and the memvault command it runs, as the out-of-memory killer or ``kill -9 PID`` does: the
    git a memvault started is not killed with it (only a SIGKILL of git itself leaves git's ``HEAD.lock``)."""
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        children = []
    for victim in [pid, *map(int, children)]:
        try:
            os.kill(victim, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_writers_killed_mid_write_leave_each_file_old_or_new_and_nothing_the_next_sync_does_not_mend(vault, tmp_path):
    """Writers killed with SIGKILL at random moments (with the memvault command each was running) while others
    write and a timer syncs: no torn line or fact, no acknowledged write lost, nothing left locked; what a killed
    write left half-committed is committed by the next sync, and the vault is as whole as after a calm storm."""
    root = vault.root
    vault.recall("anything")
    storm = Storm(root, tmp_path, SECONDS)
    for role, name in [("cli-fact", "p1"), ("api-append", "ap1"), ("sync", "timer-sync")]:
        storm.start(role, name)
    rng = random.Random(os.getpid())
    killed: set[str] = set()
    n = 0
    while time.time() < storm.deadline - 1:
        role, name = rng.choice([("api-fact", f"kv{n}"), ("api-append", f"ka{n}"), ("cli-append", f"kc{n}")])
        victim = storm.start(role, name)
        time.sleep(rng.uniform(0.3, 2.5))
        kill_writer(victim.pid)
        victim.wait()
        killed.add(name)
        del storm.procs[name]
        n += 1
    codes = storm.wait()
    assert codes == {"p1": 0, "ap1": 0, "timer-sync": 0}, {k: storm.log(k)[-1500:] for k in codes}
    assert not check_runs(storm), "\n".join(check_runs(storm))
    assert n >= 2 and [e for e in storm.entries() if e["by"] in killed and e["op"] in ("fact", "episode")]
    done = subprocess.run([sys.executable, "-m", "memvault", "--vault", str(root), "sync"], env=env(),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    check_vault(root, storm, killed=frozenset(killed))


# ------------------------------------------------------------------------------------------ fact set during reindex --full
def test_a_fact_set_while_a_full_reindex_reads_the_files_is_recalled_with_its_new_text(vault, monkeypatch):
    """A full reindex reads every file into a new generation and swaps it in; a fact set by another process after
    the rebuild read that fact (and told the old generation) must not be answered with its old text after the swap."""
    from memvault.index import update
    import memvault.index as index_module

    vault.facts.set("db/primary", "The primary listens on port OLDPORTWORD.", source="user:t")
    vault.recall("primary")
    other = Vault.open(vault.root)
    real = index_module.sync_text
    pending = [lambda: other.facts.set("db/primary", "The primary listens on port NEWPORTWORD.", source="user:t")]

    def read_then_meanwhile(*args, **kwargs):
        done = real(*args, **kwargs)
        if pending and kwargs.get("only", "x") is None:  # the rebuild's read of every file, not a write's own
            pending.pop()()
        return done

    monkeypatch.setattr(index_module, "sync_text", read_then_meanwhile)
    assert update.sync_text is not read_then_meanwhile
    vault.reindex(full=True)
    assert not pending
    monkeypatch.setattr(index_module, "sync_text", real)
    fresh = Vault.open(vault.root)
    hits = [h for h in fresh.recall("NEWPORTWORD", mode="keyword") if h.id == "db/primary"]
    assert hits and "NEWPORTWORD" in hits[0].text
    assert not [h for h in fresh.recall("OLDPORTWORD", mode="keyword") if h.id == "db/primary"]


def test_an_index_generation_swapped_away_while_it_is_opened_is_never_answered_from(vault, monkeypatch):
    """Another process's ``reindex --full`` swaps in a new generation and removes the old one between this
    process reading which generation ``index.db`` names and opening it (the storm's timer sync failed with "cannot
    open the index: disk I/O error", about 1 open in 200 against a looping full reindex). The open must follow the
    swap: never an error, never an empty file made in the removed one's place and answered from."""
    import memvault.index as index_module

    vault.facts.set("db/primary", "The primary listens on port 5432 ZEBRAWORD.", source="user:t")
    vault.recall("primary")
    fresh, other = Vault.open(vault.root), Vault.open(vault.root)
    before = fresh.index.current_target()
    real, pending = index_module.connect, [lambda: other.reindex(full=True)]

    def swapped_first(path, **options):
        if pending:
            pending.pop()()
        return real(path, **options)

    monkeypatch.setattr(index_module, "connect", swapped_first)
    hits = fresh.recall("ZEBRAWORD", mode="keyword")
    assert not pending and fresh.index.current_target() != before
    assert [h.id for h in hits] == ["db/primary"]
    assert not before.exists(), "an empty generation was made in place of the removed one"


# ------------------------------------------------------------------------------------------ found by the storm
@pytest.mark.parametrize("save", ["touched", "changed"])
def test_a_file_saved_while_a_sync_rebases_never_leaves_the_rebase_in_progress(storm_vault, save):
    """What the storm with a remote found: a person's editor saves a fact file while ``memvault sync`` rebases onto
    the remote (here a post-checkout hook saves it at that moment). The sync printed "pulled ..." and exited 0,
    leaving an interactive rebase in progress on a detached HEAD: every later write commits onto it, every later
    sync refuses ("a rebase is in progress ... HEAD was moved since it began"), nothing is pushed again."""
    root = storm_vault.root
    host2 = add_remote(storm_vault)
    done = subprocess.run([sys.executable, "-m", "memvault", "--vault", str(host2), "fact", "set", "other/y",
                           "from the second host"], env=env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    subprocess.run([sys.executable, "-m", "memvault", "--vault", str(host2), "sync"], env=env(), check=True,
                   capture_output=True, timeout=120)
    path = root / "facts/hand/ed-k0.md"
    path.write_text(path.read_text().replace("ed first text", "edited by hand"))
    hook = root / ".git/hooks/post-checkout"
    # "touched": rewritten as it was (git still takes it for a local change, and reschedules its pick);
    # "changed": an editor's save of the version the rebase had checked out
    pattern = "s/edited by hand/saved again mid-rebase/" if save == "touched" else "s/ed first text/saved mid-rebase/"
    hook.write_text(f"#!/bin/sh\nsed -i '{pattern}' '{path}'\n")
    hook.chmod(0o755)
    done = subprocess.run([sys.executable, "-m", "memvault", "--vault", str(root), "sync"], env=env(),
                          capture_output=True, text=True, timeout=120)
    hook.unlink()
    in_progress = (root / ".git/rebase-merge").exists() or (root / ".git/rebase-apply").exists()
    assert not in_progress, f"sync exited {done.returncode} and left a rebase in progress: {done.stdout}{done.stderr}"
    if save == "touched":  # nothing to keep: the sync went through
        assert done.returncode == 0, done.stderr
        shown = subprocess.run(["git", "-C", str(root), "show", "origin/main:facts/hand/ed-k0.md"],
                               capture_output=True, text=True).stdout
        assert "edited by hand" in shown
        return
    assert done.returncode == 1 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "facts/hand/ed-k0.md" in done.stderr and "run memvault sync again" in done.stderr
    assert "saved mid-rebase" in path.read_text()  # the save mid-rebase is kept, nothing lost
    assert subprocess.run(["git", "-C", str(root), "symbolic-ref", "-q", "HEAD"], capture_output=True).returncode == 0
    again = subprocess.run([sys.executable, "-m", "memvault", "--vault", str(root), "sync"], env=env(),
                           capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr
    shown = subprocess.run(["git", "-C", str(root), "show", "origin/main:facts/hand/ed-k0.md"],
                           capture_output=True, text=True).stdout
    assert "saved mid-rebase" in shown  # committed through the gate and pushed by the next sync
