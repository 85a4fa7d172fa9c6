"""One door to the file system (memvault/rules/fsutil.py): every write, append, rename, delete, mkdir and sweep goes
through it, and it never follows a link: a folder on the way or the final name that is a symlink is refused with one
line, and what the link points at is untouched. The first test reads every module to hold "no code outside the door
opens a path for writing"; the others plant the links an attacker would commit."""
from __future__ import annotations

import ast
import os
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "memvault"
DOOR = "rules/fsutil.py"
FIXTURE = Path(__file__).parent / "fixtures" / "door" / "raw_writes.py"

# ---------------------------------------------------------------------------------------------- the raw writes
WRITE_MODE = re.compile(r"[wax+]")
PATH_METHODS = {"write_text", "write_bytes", "touch", "mkdir", "unlink", "rename", "rmdir", "symlink_to",
                "hardlink_to", "chmod", "lchmod"}
OS_CALLS = {"replace", "rename", "renames", "unlink", "remove", "rmdir", "removedirs", "mkdir", "makedirs", "symlink",
            "link", "chmod", "lchmod", "chown", "lchown", "truncate", "mkfifo", "mknod"}
SHUTIL_CALLS = {"rmtree", "copy", "copy2", "copyfile", "copytree", "move", "copymode", "copystat"}
TEMPFILE_CALLS = {"mkstemp", "mkdtemp", "NamedTemporaryFile", "TemporaryDirectory"}
WRITE_FLAGS = {"O_WRONLY", "O_RDWR", "O_CREAT", "O_TRUNC", "O_APPEND", "O_EXCL"}
SQLITE_MODULES = {"sqlite3", "module", "sqlite_module"}

#: The only raw primitives allowed outside the door: (module under memvault/, the call as written) -> why.
ALLOWED = {
    ("interfaces/pipes.py", "os.open"): "opens os.devnull (a device, not a file memvault writes) to silence "
                                               "a broken stdout",
    ("interfaces/web/facts.py", "vault.facts.write_text"): "memvault's own FactStore.write_text (the write gate), "
                                                           "not Path.write_text",
    ("core/views.py", "self.write_text"): "the facts view's write_text (the write gate calling itself), not "
                                          "Path.write_text",
}


def _arg(call: ast.Call, position: int, keyword: str) -> ast.expr | None:
    for kw in call.keywords:
        if kw.arg == keyword:
            return kw.value
    return call.args[position] if len(call.args) > position else None


def _writes_mode(node: ast.expr | None, *, unknown: bool) -> bool:
    if node is None:
        return False
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return bool(WRITE_MODE.search(node.value))
    return unknown


def _is_door_checked(node: ast.expr | None) -> bool:
    """A database path that went through fsutil.sqlite_path, or one SQLite cannot create (memory, read-only)."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "str" and node.args:
        node = node.args[0]
    if isinstance(node, ast.Call):
        func = node.func
        return (isinstance(func, ast.Name) and func.id == "sqlite_path") or (
            isinstance(func, ast.Attribute) and func.attr == "sqlite_path")
    if isinstance(node, ast.Constant):
        return node.value == ":memory:"
    if isinstance(node, ast.JoinedStr):  # a URI SQLite cannot create from: read-only, or read-write of a checked path
        modes = "".join(str(v.value) for v in node.values if isinstance(v, ast.Constant))
        return "mode=ro" in modes or "mode=rw" in modes and any(
            isinstance(n, ast.Call) and _is_door_checked(n) for n in ast.walk(node))
    return False


def raw_writes(source: str) -> list[tuple[int, str, str]]:
    """(line, kind, the call as written) for each raw write primitive in ``source``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module in ("os", "shutil"):
            names = OS_CALLS if node.module == "os" else SHUTIL_CALLS
            for alias in node.names:
                if alias.name in names:
                    found.append((node.lineno, f"from-{node.module}-import", alias.name))
            continue
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        text = ast.unparse(func)
        owner = func.value if isinstance(func, ast.Attribute) else None
        owner_name = owner.id if isinstance(owner, ast.Name) else None
        kind = None
        if isinstance(func, ast.Name) and func.id == "open":
            kind = "open-write" if _writes_mode(_arg(node, 1, "mode"), unknown=True) else None
        elif isinstance(func, ast.Attribute) and func.attr == "open":
            if owner_name == "os":
                flags = _arg(node, 1, "flags")
                names = {n.attr if isinstance(n, ast.Attribute) else n.id for n in ast.walk(flags or ast.Pass())
                         if isinstance(n, (ast.Attribute, ast.Name)) and (isinstance(n, ast.Name) or
                                                                           n.attr.startswith("O_"))}
                named = {n for n in names if n.startswith("O_")}
                kind = "os.open-write" if flags is not None and (names & WRITE_FLAGS or not named) else None
            elif owner_name in ("io", "codecs"):
                kind = "open-write" if _writes_mode(_arg(node, 1, "mode"), unknown=True) else None
            else:  # Path.open(mode): only a literal mode is known to be one (Vault.open(root) is not a write)
                kind = "open-write" if _writes_mode(_arg(node, 0, "mode"), unknown=False) else None
        elif isinstance(func, ast.Attribute) and owner_name == "os":
            kind = f"os.{func.attr}" if func.attr in OS_CALLS else None
        elif isinstance(func, ast.Attribute) and owner_name == "shutil":
            kind = f"shutil.{func.attr}" if func.attr in SHUTIL_CALLS else None
        elif isinstance(func, ast.Attribute) and owner_name == "tempfile":
            kind = f"tempfile.{func.attr}" if func.attr in TEMPFILE_CALLS else None
        elif isinstance(func, ast.Attribute) and func.attr == "connect" and (
                owner_name in SQLITE_MODULES or (isinstance(owner, ast.Call) and ast.unparse(owner.func)
                                                 in SQLITE_MODULES)):
            kind = None if _is_door_checked(_arg(node, 0, "database")) else "sqlite-connect"
        elif isinstance(func, ast.Attribute) and func.attr in PATH_METHODS:
            kind = func.attr
        elif isinstance(func, ast.Attribute) and func.attr == "replace":
            # Path.replace(target) takes one argument; str.replace two or three, datetime.replace keywords.
            literal = isinstance(owner, ast.Constant)
            kind = "replace" if len(node.args) == 1 and not node.keywords and not literal else None
        if kind is not None:
            found.append((node.lineno, kind, text))
    return sorted(found)


def test_the_check_catches_each_kind_of_raw_write_and_passes_over_look_alikes():
    lines = FIXTURE.read_text().splitlines()
    marks = [(n, re.search(r"  # catches: ([\w.-]+)$", line)) for n, line in enumerate(lines, 1)]
    expected = {(n, m.group(1)) for n, m in marks if m}
    fine = {n for n, line in enumerate(lines, 1) if line.endswith("# fine")}
    found = {(line, kind) for line, kind, _ in raw_writes(FIXTURE.read_text())}
    assert len(expected) > 50 and len(fine) > 10
    assert found - expected == set(), "flagged a line that is not a raw write"
    assert expected - found == set(), "missed a raw write"
    assert not {line for line, _ in found} & fine


def test_no_module_outside_the_door_writes_a_path_directly():
    offences = []
    used = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel == DOOR:
            continue
        for line, kind, text in raw_writes(path.read_text(encoding="utf-8")):
            if (rel, text) in ALLOWED:
                used.add((rel, text))
                continue
            offences.append(f"memvault/{rel}:{line}: {text}() ({kind}): go through memvault.rules.fsutil")
    assert not offences, "raw writes outside the door:\n" + "\n".join(offences)
    assert used == set(ALLOWED), f"allow-list entries no longer needed: {set(ALLOWED) - used}"


# ---------------------------------------------------------------------------------------------- the door's behaviour
from memvault.rules import fsutil  # noqa: E402
from memvault.rules.errors import UnsafePath  # noqa: E402

DECOY_TEXT = b"precious host file\n"


@pytest.fixture
def decoy(tmp_path):
    """A folder outside the vault that links point at: nothing in it may change, appear or go."""
    folder = tmp_path / "decoy"
    (folder / "sub").mkdir(parents=True)
    (folder / "victim.txt").write_bytes(DECOY_TEXT)
    (folder / "sub" / "deep.txt").write_bytes(DECOY_TEXT)
    (folder / "victim.db").write_bytes(b"")
    return folder


def snapshot(folder: Path) -> dict[str, tuple[bytes | None, int]]:
    out = {}
    for path in sorted(folder.rglob("*")):
        st = path.lstat()
        out[path.relative_to(folder).as_posix()] = (path.read_bytes() if path.is_file() else None, st.st_mode)
    return out


@pytest.fixture(params=["vault", "state"])
def area(request, vault):
    """A folder inside the vault, and one inside its local state: links are planted in both."""
    base = vault.root / "facts" if request.param == "vault" else vault.state_dir
    base.mkdir(parents=True, exist_ok=True)
    return base


def _lock(path: Path) -> None:
    with fsutil.locked(path):
        pass


def _sweep(path: Path) -> None:
    fsutil.sweep(path, keep=lambda name: False)


# name -> (operation on a path, whether it acts on a folder)
OPERATIONS = {
    "atomic_write": (lambda p: fsutil.atomic_write(p, b"attacker's bytes\n"), False),
    "open_private": (lambda p: os.close(fsutil.open_private(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)), False),
    "append": (lambda p: fsutil.append(p, b"a log line\n"), False),
    "write_new_exclusive": (lambda p: fsutil.write_new_exclusive(p, b"new\n"), False),
    "sqlite_path": (lambda p: fsutil.sqlite_path(p), False),
    "locked": (_lock, False),
    "copy_file": (lambda p: fsutil.copy_file(Path(__file__), p), False),
    "replace_onto": (lambda p: fsutil.replace(p.parent.parent / "moved.txt", p), False),
    "remove": (lambda p: fsutil.remove(p), False),
    "remove_tree": (lambda p: fsutil.remove_tree(p), True),
    "remove_dir": (lambda p: fsutil.remove_dir(p), True),
    "ensure_dir": (lambda p: fsutil.ensure_dir(p), True),
    "sweep": (_sweep, True),
}


@pytest.mark.parametrize("op", OPERATIONS)
def test_a_link_on_the_way_is_refused_and_its_target_untouched(op, area, decoy):
    """A folder on the way that is a symlink (a committed ``facts/way -> DIR`` or ``.memvault/way -> DIR``)."""
    run, on_folder = OPERATIONS[op]
    (area / "way").symlink_to(decoy)
    (area / "moved.txt").write_bytes(b"mine\n")  # replace_onto's source, beside the way
    target = area / "way" / ("sub" if on_folder else "victim.txt")
    if op == "replace_onto":
        target = area / "way" / "victim.txt"
        run = lambda p: fsutil.replace(area / "moved.txt", p)  # noqa: E731
    before = snapshot(decoy)
    with pytest.raises(UnsafePath, match=re.escape(str(area / "way")) + ".*symlink"):
        run(target)
    assert snapshot(decoy) == before


@pytest.mark.parametrize("op", OPERATIONS)
def test_a_link_at_the_name_is_refused_or_removed_itself_never_followed(op, area, decoy):
    """The final name is a symlink: writing through it is refused; removing or replacing it acts on the link."""
    run, on_folder = OPERATIONS[op]
    link = area / "name"
    link.symlink_to(decoy / ("sub" if on_folder else "victim.txt"))
    (area / "moved.txt").write_bytes(b"mine\n")
    if op == "replace_onto":
        run = lambda p: fsutil.replace(area / "moved.txt", p)  # noqa: E731
    before = snapshot(decoy)
    acts_on_the_link = op in ("remove", "remove_tree", "replace_onto")
    if acts_on_the_link:
        run(link)
        assert not link.is_symlink()
    elif op in ("remove_dir",):
        assert run(link) is False and link.is_symlink()
    else:
        with pytest.raises((UnsafePath, FileExistsError)):
            run(link)
        assert link.is_symlink()
    assert snapshot(decoy) == before


def swap_once_opened(monkeypatch, folder: Path, moved_to: Path, decoy: Path) -> None:
    """The race: as soon as the door has opened ``folder``, it is moved to ``moved_to`` and a link to ``decoy``
    takes its name."""
    real_open_dir = fsutil.open_dir

    def open_then_swap(path, **kw):
        fd = real_open_dir(path, **kw)
        if Path(path) == folder and not folder.is_symlink():
            folder.rename(moved_to)
            folder.symlink_to(decoy)
        return fd

    monkeypatch.setattr(fsutil, "open_dir", open_then_swap)


def test_a_folder_swapped_for_a_link_after_the_check_cannot_redirect_the_write(area, decoy, monkeypatch):
    """The race the old path-based checks lost: the folder is checked, then replaced by a link before the write.
    The door holds the folder's descriptor from the walk on, so the write lands in the folder it checked."""
    folder = area / "swapped"
    folder.mkdir()
    swap_once_opened(monkeypatch, folder, area / "was-swapped", decoy)
    before = snapshot(decoy)
    fsutil.atomic_write(folder / "victim.txt", b"written\n")
    assert (area / "was-swapped" / "victim.txt").read_bytes() == b"written\n"
    assert snapshot(decoy) == before


def test_a_live_folder_swapped_for_a_link_mid_sweep_empties_nothing_outside(area, decoy, monkeypatch):
    """Attack 1 of issue 23 (``.memvault/live -> DIR`` emptied DIR), raced: the sweep lists and unlinks through
    the descriptor it opened, never the path again."""
    live = area / "live"
    live.mkdir()
    (live / "99999999-stale").write_bytes(b"")
    swap_once_opened(monkeypatch, live, area / "live-was", decoy)
    before = snapshot(decoy)
    assert fsutil.sweep(live, keep=lambda name: False) == ["99999999-stale"]
    assert snapshot(decoy) == before and not list((area / "live-was").iterdir())


def test_a_name_swapped_for_a_link_after_the_check_is_replaced_not_followed(area, decoy, monkeypatch):
    target = area / "note.md"
    target.write_bytes(b"old\n")
    real_lstat_at = fsutil._lstat_at

    def check_then_swap(dfd, name):
        st = real_lstat_at(dfd, name)
        if name == "note.md" and not target.is_symlink():
            target.unlink()
            target.symlink_to(decoy / "victim.txt")
        return st

    monkeypatch.setattr(fsutil, "_lstat_at", check_then_swap)
    before = snapshot(decoy)
    fsutil.atomic_write(target, b"new\n")
    assert not target.is_symlink() and target.read_bytes() == b"new\n"
    assert snapshot(decoy) == before


def test_atomic_write_keeps_the_mode_and_a_failed_rename_leaves_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "script.sh"
    path.write_bytes(b"old\n")
    path.chmod(0o751)
    fsutil.atomic_write(path, b"new\n")
    assert path.read_bytes() == b"new\n" and path.stat().st_mode & 0o777 == 0o751

    def crash(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(fsutil.os, "replace", crash)
    with pytest.raises(OSError):
        fsutil.atomic_write(path, b"newer\n")
    assert path.read_bytes() == b"new\n" and sorted(p.name for p in tmp_path.iterdir()) == ["script.sh"]


def test_atomic_write_leaves_old_or_new_when_killed_at_any_moment(tmp_path):
    import signal
    import subprocess
    import sys
    import time

    path = tmp_path / "data.bin"
    old, new = b"o" * 1_000_003, b"n" * 2_000_017
    path.write_bytes(old)
    code = ("import sys, pathlib; from memvault.rules.fsutil import atomic_write\n"
            f"p = pathlib.Path({str(path)!r}); a, b = b'o' * 1_000_003, b'n' * 2_000_017\n"
            "print('ready', flush=True)\n"
            "while True:\n    atomic_write(p, b); atomic_write(p, a)\n")
    for delay in (0.05, 0.11, 0.17, 0.23, 0.31):
        proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, cwd=REPO)
        assert proc.stdout.readline() == b"ready\n"
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert path.read_bytes() in (old, new)


def test_sqlite_path_refuses_a_linked_wal_and_creates_the_database_private(tmp_path, decoy):
    db = tmp_path / "state" / "x.db"
    assert fsutil.sqlite_path(db) == db and db.stat().st_mode & 0o777 == 0o600
    (tmp_path / "state" / "x.db-wal").symlink_to(decoy / "victim.db")
    with pytest.raises(UnsafePath, match=r"x\.db-wal"):
        fsutil.sqlite_path(db)


def test_remove_tree_removes_links_inside_never_what_they_point_at(tmp_path, decoy):
    tree = tmp_path / "tree"
    (tree / "a" / "b").mkdir(parents=True)
    (tree / "a" / "b" / "file").write_bytes(b"x")
    (tree / "a" / "to-dir").symlink_to(decoy)
    (tree / "to-file").symlink_to(decoy / "victim.txt")
    before = snapshot(decoy)
    assert fsutil.remove_tree(tree) and not tree.exists()
    assert snapshot(decoy) == before


def test_read_regular_refuses_a_link_and_a_fifo(tmp_path, decoy):
    (tmp_path / "CLAUDE.md").symlink_to(decoy / "victim.txt")
    with pytest.raises(UnsafePath, match=r"CLAUDE\.md: a symlink"):
        fsutil.read_regular(tmp_path / "CLAUDE.md")
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(UnsafePath, match="not a regular file"):
        fsutil.read_regular(tmp_path / "fifo")
    (tmp_path / "real.md").write_bytes(b"# hi\n")
    assert fsutil.read_regular(tmp_path / "real.md") == b"# hi\n"


# ---------------------------------------------------------------------------------------------- through memvault
def test_a_live_folder_that_is_a_link_is_never_swept(vault, decoy):
    """Issue 23 attack 1: a committed ``live -> DIR`` made the watcher's stale-marker sweep empty DIR."""
    from memvault.index.changes import LIVE_DIR, ChangeFeed

    vault.state_dir.mkdir(parents=True, exist_ok=True)
    (vault.state_dir / LIVE_DIR).symlink_to(decoy)
    before = snapshot(decoy)
    feed = ChangeFeed(vault.root, vault.state_dir)
    try:
        assert feed.start() is False and "symlink" in (feed.reason or "")
    finally:
        feed.stop()
    assert snapshot(decoy) == before


def test_the_hook_log_that_is_a_link_is_never_appended_to(vault, decoy):
    """Issue 23 attack 2: a committed ``agents.log -> FILE`` made every hook append to FILE."""
    from memvault.interfaces.agents import hook

    vault.state_dir.mkdir(parents=True, exist_ok=True)
    log = vault.state_dir / hook.LOG_NAME
    log.symlink_to(decoy / "victim.txt")
    before = snapshot(decoy)
    hook._log(str(vault.root), "session-start: 3 memories")
    assert snapshot(decoy) == before and log.is_symlink()


def test_export_is_created_private_whole_and_never_through_a_link(invoke, vault, tmp_path, decoy):
    vault.facts.set("ops/owner", "The ops team owns the payments API.")
    out = tmp_path / "export.jsonl"
    r = invoke("export", "--output", str(out))
    assert r.exit_code == 0, r.output
    assert out.stat().st_mode & 0o777 == 0o600 and b"payments API" in out.read_bytes()
    out.chmod(0o644)
    assert invoke("export", "--output", str(out)).exit_code == 0
    assert out.stat().st_mode & 0o777 == 0o600  # replaced by a new private file, not rewritten in place

    link = tmp_path / "linked.jsonl"
    link.symlink_to(decoy / "victim.txt")
    before = snapshot(decoy)
    r = invoke("export", "--output", str(link))
    assert r.exit_code != 0
    message = [line for line in r.output.splitlines() if line.strip()]
    assert len(message) == 1 and "linked.jsonl" in message[0] and "symlink" in message[0]
    assert snapshot(decoy) == before and link.is_symlink()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []  # no temp file left

    folder = tmp_path / "md"
    assert invoke("export", "--format", "markdown", "--output", str(folder)).exit_code == 0
    assert folder.stat().st_mode & 0o777 == 0o700
    (tmp_path / "md-link").symlink_to(decoy / "sub")
    r = invoke("export", "--format", "markdown", "--output", str(tmp_path / "md-link"))
    assert r.exit_code != 0 and snapshot(decoy) == before


@pytest.mark.parametrize("planted", [".mcp.json", ".claude/settings.json", ".claude"])
def test_agent_install_in_a_project_never_writes_through_a_committed_link(planted, isolated_env, vault, tmp_path,
                                                                          decoy, runner):
    """Issue 23 attack 4: ``agent install claude-code --scope project`` wrote through a repository's
    ``.claude/settings.json`` or ``.mcp.json`` symlink ("created ...decoy-newfile.conf")."""
    from memvault.interfaces.agents import runtimes
    from memvault.interfaces.cli import cli

    project = tmp_path / "proj"
    project.mkdir()
    if planted == ".claude":
        (project / ".claude").symlink_to(decoy / "sub")
    else:
        (project / planted).parent.mkdir(parents=True, exist_ok=True)
        (project / planted).symlink_to(decoy / "newfile.conf")  # dangling: following it would create it
    before = snapshot(decoy)
    with pytest.raises(UnsafePath, match="symlink"):
        runtimes.install("claude-code", vault.root, scope="project", project=project)
    r = runner.invoke(cli, ["agent", "install", "claude-code", "--scope", "project", "--project", str(project),
                            "--vault", str(vault.root)])
    assert r.exit_code != 0
    message = [line for line in r.output.splitlines() if line.strip()]
    assert len(message) == 1 and planted.split("/")[0] in message[0] and "symlink" in message[0], r.output
    assert snapshot(decoy) == before and not (project / ".mcp.json").is_file()
    assert "symlink" in " ".join(runtimes.status("claude-code", scope="project", project=project).notes)


def test_import_claude_code_refuses_a_symlinked_claude_md_before_writing_anything(invoke, vault, tmp_path, decoy):
    """Issue 23 attack 5: a CLAUDE.md pointing at a passwd-like file was imported."""
    project = tmp_path / "proj"
    (project / ".claude").mkdir(parents=True)
    (project / ".claude" / "CLAUDE.md").write_text("# Build\n\nRun make test before pushing.\n")
    (decoy / "passwd").write_text("root:x:0:0:root:/root:/bin/bash\n")
    (project / "CLAUDE.md").symlink_to(decoy / "passwd")
    r = invoke("import", "claude-code", str(project))
    assert r.exit_code != 0
    message = [line for line in r.output.splitlines() if line.strip()]
    assert len(message) == 1 and "CLAUDE.md" in message[0] and "symlink" in message[0], r.output
    assert not list(vault.facts.dir.rglob("*.md")) and not list(vault.facts.inbox_dir.rglob("*.md"))
    assert "root:x" not in (vault.root / ".git" / "index").read_bytes().decode("latin-1")


def test_the_lock_probe_never_follows_a_link_and_says_free(area, decoy):
    (area / "locks").symlink_to(decoy)
    assert fsutil.lock_held(area / "locks" / "victim.txt") is False
    with pytest.raises(UnsafePath):
        with fsutil.try_lock(area / "locks" / "watch.lock"):
            pass
    assert not (decoy / "watch.lock").exists()
