"""``memvault proc run`` reviewed as an attacker (2026-12-06): the bytes that run are the bytes recorded, and a run
stopped midway is still recorded."""
from __future__ import annotations

import os
import signal
import sys
import time

import pytest

from memvault.stores.gitstore import blob_id
from memvault.stores.procedures import ProcedureStore

COMMITTED = "#!/usr/bin/env bash\necho committed\n"
SWAPPED = "#!/usr/bin/env bash\necho swapped\n"


def add(vault, tmp_path, name: str, text: str, mode: int = 0o755):
    source = tmp_path / f"src-{name.replace('/', '-')}.sh"
    source.write_text(text)
    source.chmod(mode)
    return vault.procedures.add(name, source, source="user:admin")


def test_the_bytes_that_run_are_the_bytes_recorded(vault, tmp_path, monkeypatch, capfd):
    """The run read the file (its blob recorded as what ran) and then executed the path again: a checkout, a pull or
    another process that changed the file in between ran other code under the committed blob's name."""
    added = add(vault, tmp_path, "ops/hello", COMMITTED)
    outside = tmp_path / "outside.sh"
    outside.write_text(SWAPPED)
    outside.chmod(0o755)
    original = ProcedureStore.get_many

    def then_swapped(self, items):
        found = original(self, items)
        for _, path in items:  # the file is replaced by a link once its bytes were read
            os.unlink(path)
            os.symlink(outside, path)
        return found

    monkeypatch.setattr(ProcedureStore, "get_many", then_swapped)
    result = vault.procedures.run("ops/hello", source="user:admin")
    assert capfd.readouterr().out == "committed\n"
    assert result.episode.meta["blob"] == added.blob == blob_id(COMMITTED.encode())


def test_a_runbook_still_knows_its_own_name_and_file(vault, tmp_path, capfd):
    """What runs is a private copy of the committed bytes; its name is the runbook's file name (usage lines print
    ``basename "$0"``) and ``MEMVAULT_PROCEDURE_FILE`` names the file in the vault."""
    add(vault, tmp_path, "ops/where", '#!/usr/bin/env bash\necho "$(basename "$0") $MEMVAULT_PROCEDURE_FILE"\n')
    add(vault, tmp_path, "ops/plain", 'echo "$(basename "$0")"\n', mode=0o644)  # run through bash: no x bit
    vault.procedures.run("ops/where", source="user:admin")
    vault.procedures.run("ops/plain", source="user:admin")
    assert capfd.readouterr().out.split("\n") == [f"where.sh {vault.root / 'procedures/ops/where.sh'}", "plain.sh", ""]
    assert not any((vault.state_dir / "run").iterdir())  # the copies are gone


@pytest.mark.skipif(sys.platform != "linux", reason="signals to the parent, as a terminal's ^C or a kill would")
def test_a_run_interrupted_midway_is_recorded_and_the_script_may_clean_up(vault, tmp_path):
    """^C or a kill of memvault during a run killed the script at once (SIGKILL after 0.25 s) and left no record: a
    half-done runbook's side effects had no episode saying it ran."""
    marker = tmp_path / "cleaned"
    add(vault, tmp_path, "ops/slow", "#!/usr/bin/env bash\n"
        f"trap 'kill $!; echo cleaned > {marker}; exit 130' INT\n"
        "kill -INT $PPID\nsleep 5 &\nwait $!\necho not interrupted\n")
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):  # the ^C still stops memvault, after the record is written
        vault.procedures.run("ops/slow", source="user:admin")
    assert time.monotonic() - started < 4
    assert marker.read_text() == "cleaned\n"
    (episode,) = vault.episodes.list()
    assert episode.meta["exit_code"] == 130 and episode.meta["interrupted"] == "SIGINT"
    assert "interrupted" in episode.text
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_an_mcp_run_with_a_flood_of_output_keeps_only_its_tail_in_memory(vault, tmp_path):
    """The MCP tool read the whole output of a run into memory to keep its last 100,000 characters: a runbook that
    printed for its 15 minutes (a loop, `yes`) took the server down with it."""
    import tracemalloc

    from memvault.interfaces.mcp import OUTPUT_LIMIT, _run_procedure

    add(vault, tmp_path, "ops/loud", "#!/usr/bin/env bash\nhead -c 40000000 /dev/zero | tr '\\0' 'y'\necho é-end\n")
    tracemalloc.start()
    try:
        result = _run_procedure(vault, "ops/loud", [], "user:admin")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert result["stdout"].endswith("yyyé-end\n") and len(result["stdout"]) == OUTPUT_LIMIT
    assert result["stdout_truncated"] and not result["stderr_truncated"] and result["stderr"] == ""
    assert peak < 5_000_000


@pytest.mark.skipif(sys.platform != "linux", reason="POSIX signals")
def test_a_run_whose_memvault_is_terminated_is_recorded_then_memvault_ends_by_that_signal(vault, tmp_path):
    """``kill`` of ``memvault proc run`` (a CI job cancelled, a service stopped) ended memvault at once: the script
    ran on, orphaned, and no episode said it had run."""
    import subprocess

    from conftest import REPO_ROOT

    started, marker = tmp_path / "started", tmp_path / "terminated"
    add(vault, tmp_path, "ops/long", "#!/usr/bin/env bash\n"
        f"trap 'kill $!; echo term > {marker}; exit 143' TERM\n"
        f"echo started > {started}\nsleep 30 &\nwait $!\n")
    proc = subprocess.Popen([sys.executable, "-m", "memvault", "--vault", str(vault.root), "proc", "run", "ops/long",
                             "--source", "user:admin"], env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 30
    while not started.exists():
        assert time.monotonic() < deadline and proc.poll() is None, proc.stderr.read() if proc.poll() else "slow"
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(20) == -signal.SIGTERM
    assert marker.read_text() == "term\n"
    (episode,) = vault.episodes.list()
    assert episode.meta["interrupted"] == "SIGTERM" and episode.meta["exit_code"] == 143


def test_a_runbook_acts_as_the_source_that_runs_it(vault, tmp_path, monkeypatch, capfd):
    """A runbook inherited the runner's MEMVAULT_SOURCE: run over MCP as agent:runner (or with --source agent:x),
    its own `memvault fact set` or `memvault recall` acted as the person who started the server (user:admin,
    trusted, no scope), past the agent's trust and [scopes]."""
    from memvault.interfaces.mcp import _run_procedure

    monkeypatch.setenv("MEMVAULT_SOURCE", "user:admin")
    add(vault, tmp_path, "ops/who", '#!/usr/bin/env bash\necho "$MEMVAULT_SOURCE"\n')
    assert _run_procedure(vault, "ops/who", [], "agent:runner")["stdout"] == "agent:runner\n"
    vault.procedures.run("ops/who", source="agent:deployer")
    assert capfd.readouterr().out == "agent:deployer\n"


def test_a_run_past_its_timeout_is_killed_and_recorded(vault, tmp_path):
    add(vault, tmp_path, "ops/stuck", "#!/usr/bin/env bash\nexec sleep 30\n")
    started = time.monotonic()
    result = vault.procedures.run("ops/stuck", source="user:admin", timeout=0.5)
    assert result.exit_code == -9 and time.monotonic() - started < 10
    assert vault.episodes.list()[0].meta["exit_code"] == -9


def test_the_private_copy_a_killed_memvault_left_is_removed_by_the_next_run(vault, tmp_path, capfd):
    """A memvault killed (SIGKILL, a power cut) during a run left its private copy in <state>/run/ for good: one
    more folder per such run, for months. A run removes the copies of runs whose memvault is gone; a live one's
    stays."""
    import subprocess

    add(vault, tmp_path, "ops/hello", COMMITTED)
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(gone.stdout)
    scratch = vault.state_dir / "run"
    scratch.mkdir(mode=0o700, exist_ok=True)
    left = scratch / f"run-{dead_pid}-abc123"
    left.mkdir()
    (left / "hello.sh").write_text(COMMITTED)
    alive = scratch / f"run-{os.getppid()}-def456"  # a memvault still running its runbook
    alive.mkdir()
    vault.procedures.run("ops/hello", source="user:admin")
    assert capfd.readouterr().out == "committed\n"
    assert not left.exists() and alive.is_dir()


def test_a_runbook_run_from_a_git_hook_acts_on_the_repository_it_names(vault, tmp_path):
    """memvault run from another repository's hook (a post-commit that runs `memvault proc run`) passed git's
    GIT_DIR, GIT_WORK_TREE and GIT_INDEX_FILE on to the runbook: its `git -C <repo> ...` acted on the hook's
    repository instead of the one it named."""
    import subprocess

    from conftest import REPO_ROOT, git

    target = tmp_path / "target"
    git(tmp_path, "init", "-q", str(target))
    add(vault, tmp_path, "ops/where", '#!/usr/bin/env bash\ngit -C "$1" rev-parse --absolute-git-dir\n'
        'echo "index=${GIT_INDEX_FILE-unset} dir=${GIT_DIR-unset} tree=${GIT_WORK_TREE-unset}"\n')
    app = tmp_path / "app"
    git(tmp_path, "init", "-q", str(app))
    out = tmp_path / "hook.out"
    hook = app / ".git" / "hooks" / "pre-commit"  # git gives a pre-commit hook GIT_INDEX_FILE of its own
    # as git sets them for hooks in a worktree or with --git-dir (absolute here: "$1" is elsewhere)
    hook.write_text(f"#!/bin/sh\nexport GIT_DIR=\"$PWD/.git\" GIT_WORK_TREE=\"$PWD\"\nPYTHONPATH={REPO_ROOT} {sys.executable} "
                    f"-m memvault --vault {vault.root} proc run ops/where --source user:admin -- {target} "
                    f"> {out} 2>&1\nexit 0\n")
    hook.chmod(0o755)
    (app / "a.txt").write_text("a\n")
    git(app, "add", "a.txt")
    # a commit of named paths: git gives the hook a temporary index of its own in GIT_INDEX_FILE
    subprocess.run(["git", "-C", str(app), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x",
                    "--", "a.txt"], check=True)
    lines = out.read_text().splitlines()
    assert lines[0] == str((target / ".git").resolve()), out.read_text()
    assert lines[1] == "index=unset dir=unset tree=unset", out.read_text()
    (episode,) = [e for e in vault.episodes.list() if e.kind == "procedure_run"]
    assert episode.meta["exit_code"] == 0


def test_a_runbook_keeps_the_rest_of_its_callers_environment(vault, tmp_path, monkeypatch, capfd):
    """Only git's repository-local variables are dropped (``git rev-parse --local-env-vars``, as git drops them for
    a submodule); what the person chose for every command they run stays: LD_PRELOAD (a wrapper such as fakeroot or
    torsocks), an author, ``git -c`` options."""
    monkeypatch.setenv("GIT_DIR", str(tmp_path / "elsewhere.git"))
    monkeypatch.setenv("GIT_OBJECT_DIRECTORY", str(tmp_path / "objects"))
    monkeypatch.setenv("GIT_COMMON_DIR", str(tmp_path / "common"))
    monkeypatch.setenv("LD_PRELOAD", "")
    monkeypatch.setenv("GIT_AUTHOR_NAME", "Ada")
    monkeypatch.setenv("GIT_CONFIG_PARAMETERS", "'color.ui'='never'")
    add(vault, tmp_path, "ops/env", '#!/usr/bin/env bash\necho "${GIT_DIR-unset} ${GIT_OBJECT_DIRECTORY-unset} '
        '${GIT_COMMON_DIR-unset} ${LD_PRELOAD+set} $GIT_AUTHOR_NAME $GIT_CONFIG_PARAMETERS"\n')
    monkeypatch.delenv("GIT_DIR")  # the add above committed to the vault; the run is what is under test
    monkeypatch.delenv("GIT_OBJECT_DIRECTORY")
    monkeypatch.delenv("GIT_COMMON_DIR")
    capfd.readouterr()
    env = {"GIT_DIR": str(tmp_path / "elsewhere.git"), "GIT_OBJECT_DIRECTORY": str(tmp_path / "objects"),
           "GIT_COMMON_DIR": str(tmp_path / "common")}
    monkeypatch.setattr(os, "environ", {**os.environ, **env})
    vault.procedures.run("ops/env", source="user:admin")
    assert capfd.readouterr().out == "unset unset unset set Ada 'color.ui'='never'\n"


@pytest.mark.skipif(sys.platform != "linux", reason="POSIX signals")
def test_a_run_whose_memvault_is_killed_is_recorded_once_by_the_next_runs(vault, tmp_path):
    """A memvault SIGKILLed during `proc run` (an out-of-memory kill, a CI runner torn down) left no episode: the
    runbook's side effects had no record that it ran. The next runs record it, once, though two sweep at a time,
    and again not after a sweep that was itself killed between its append and the record's removal."""
    import shutil
    import subprocess

    from conftest import REPO_ROOT

    started = tmp_path / "started"
    added = add(vault, tmp_path, "ops/long", f"#!/usr/bin/env bash\necho $$ > {started}\nexec sleep 30\n")
    add(vault, tmp_path, "ops/hello", COMMITTED)
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}

    def memvault(*args):
        return subprocess.Popen([sys.executable, "-m", "memvault", "--vault", str(vault.root), "proc", "run", "--source", "user:admin",
                                 *args], env=env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    killed = memvault("ops/long", "--", "--password", "hunter2hunter2")
    deadline = time.monotonic() + 30
    while not started.exists() or not started.read_text().strip():
        assert time.monotonic() < deadline and killed.poll() is None, killed.stderr.read() if killed.poll() else ""
        time.sleep(0.05)
    killed.kill()
    assert killed.wait(20) == -signal.SIGKILL
    os.kill(int(started.read_text()), signal.SIGKILL)  # the orphaned script
    assert vault.episodes.list() == []
    (record,) = (vault.state_dir / "run").glob("run-*.json")
    kept = tmp_path / "record.json"
    shutil.copy(record, kept)

    racing = [memvault("ops/hello"), memvault("ops/hello")]
    for proc in racing:
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0 and out == b"committed\n", err
    shutil.copy(kept, record)  # as a sweep killed after its append would leave it
    assert memvault("ops/hello").wait(60) == 0

    runs = [e for e in vault.episodes.list() if e.meta.get("name") == "ops/long"]
    assert len(runs) == 1, [e.text for e in runs]
    (episode,) = runs
    assert episode.kind == "procedure_run" and "interrupted: memvault was killed" in episode.text
    assert episode.meta["interrupted"] == "memvault killed"
    assert episode.meta["blob"] == added.blob and episode.meta["commit"] == added.commit
    assert episode.meta["args"] == ["--password", "<redacted: password on command line>"]
    assert episode.created_at == episode.meta["started_at"] and episode.source == "user:admin"
    assert len([e for e in vault.episodes.list() if e.meta.get("name") == "ops/hello"]) == 3
    assert not list((vault.state_dir / "run").glob("run-*"))


def test_a_damaged_record_of_a_dead_run_is_reported_and_dropped_never_blocking_a_run(vault, tmp_path, capfd):
    import subprocess

    add(vault, tmp_path, "ops/hello", COMMITTED)
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    scratch = vault.state_dir / "run"
    scratch.mkdir(mode=0o700, exist_ok=True)
    (scratch / f"run-{int(gone.stdout)}-abc123.json").write_text("{not json")
    (scratch / f"run-{int(gone.stdout)}-def456.json").write_text('{"id": "x", "source": "not a source!"}')
    result = vault.procedures.run("ops/hello", source="user:admin")
    assert result.exit_code == 0 and capfd.readouterr().out == "committed\n"
    assert len(result.episode.warnings) == 2 and all("not recorded" in w for w in result.episode.warnings)
    assert not list(scratch.glob("run-*")) and len(vault.episodes.list()) == 1


@pytest.mark.parametrize("arg", ["\udcff", "\ud800"])
def test_an_argument_that_is_not_utf8_is_refused_before_the_script_runs(vault, tmp_path, arg):
    """A byte that is not UTF-8 on the command line (a latin-1 file name: Python reads it as '\\udcff') ran the
    script, and only then was its record refused (meta.args: not UTF-8 text), so a run with side effects had no
    episode; a lone surrogate from JSON (MCP) stopped with an internal error at exec. Both are refused, naming the
    argument, before anything runs."""
    from memvault.rules.errors import InvalidValue

    ran = tmp_path / "ran"
    add(vault, tmp_path, "ops/touch", f"#!/usr/bin/env bash\ntouch {ran}\n")
    with pytest.raises(InvalidValue, match=r"args\[1\]"):
        vault.procedures.run("ops/touch", ["ok", arg], source="user:admin")
    assert not ran.exists() and vault.episodes.list() == []
