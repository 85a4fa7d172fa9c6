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
    ("interfaces/cli/__init__.py", "os.open"): "opens os.devnull (a device, not a file memvault writes) to silence "
                                               "a broken stdout",
    ("interfaces/web/facts.py", "vault.facts.write_text"): "memvault's own FactStore.write_text (the write gate), "
                                                           "not Path.write_text",
    ("core/vault.py", "self.write_text"): "Vault.write_text (the write gate calling itself), not Path.write_text",
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
    if isinstance(node, ast.JoinedStr):
        return any(isinstance(v, ast.Constant) and "mode=ro" in str(v.value) for v in node.values)
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
    expected = {(n, m.group(1)) for n, line in enumerate(lines, 1) if (m := re.search(r"  # catches: ([\w.-]+)$", line))}
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
