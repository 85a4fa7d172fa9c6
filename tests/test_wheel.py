"""What a user gets from ``pip install memvault`` (a built wheel), not from an editable checkout.

The wheel holds only what pyproject.toml (and setup.py's build step) packages: every data file the code reads at
run time must be inside it. Built here from a copy of the source tree (about 3 s, no network, no install), and
read as a zip listing.
"""
from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
#: What a build reads from the source tree (the rest, tests/ and docs/, is not packaged).
BUILD_INPUTS = ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md", "memvault", "vault")
SKIP = shutil.ignore_patterns("__pycache__", "*.pyc", ".memvault", "*.egg-info")


def _tracked(folder: str) -> list[str]:
    """The files git tracks under ``folder`` (what a clone has; a developer's stray state files are not shipped)."""
    out = subprocess.run(["git", "ls-files", "-z", "--", folder], cwd=REPO_ROOT, capture_output=True, check=True)
    return [p for p in out.stdout.decode().split("\0") if p]


@pytest.fixture(scope="module")
def wheel_names(tmp_path_factory) -> set[str]:
    src = tmp_path_factory.mktemp("src")
    for name in BUILD_INPUTS:
        path = REPO_ROOT / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=SKIP, symlinks=True)
        elif path.exists():
            shutil.copy2(path, src / name)
    out = tmp_path_factory.mktemp("wheel")
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "--no-build-isolation",
                           "--no-index", "-q", "-w", str(out)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    [wheel] = out.glob("memvault-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        return set(zf.namelist())


def test_wheel_holds_every_data_file_of_the_package(wheel_names):
    """Templates, static files, anything not .py the package keeps beside its code (web/app.py reads them)."""
    data = [p for p in _tracked("memvault") if not p.endswith(".py")]
    assert any(p.endswith(".html") for p in data)
    assert [p for p in data if p not in wheel_names] == []
    assert [p for p in _tracked("memvault") if p.endswith(".py") and p not in wheel_names] == []


def test_wheel_holds_the_example_vault_the_demo_copies(wheel_names):
    """``python -m memvault.demo`` from an installed wheel: the example vault is package data, every file of it."""
    files = _tracked("vault")
    assert "vault/memvault.toml" in files
    missing = [p for p in files if "memvault/example_vault/" + p.removeprefix("vault/") not in wheel_names]
    assert missing == []
    # Nothing else of the repository (tests, docs, benchmarks) rides along.
    assert not [n for n in wheel_names if n.startswith(("tests/", "docs/", "bench/", "vault/"))]


def test_demo_finds_the_packaged_example_vault_when_there_is_no_source_tree(tmp_path, monkeypatch):
    """Installed from a wheel, ``parents[2] / "vault"`` is site-packages' parent: the packaged copy is used."""
    from memvault.interfaces import demo

    packaged = tmp_path / "pkg" / "example_vault"
    (packaged / "facts").mkdir(parents=True)
    (packaged / "memvault.toml").write_text("")
    monkeypatch.setattr(demo, "REPO_VAULT", tmp_path / "nowhere" / "vault")
    monkeypatch.setattr(demo, "PACKAGED_VAULT", packaged)
    assert demo.example_vault() == packaged
    monkeypatch.setattr(demo, "REPO_VAULT", tmp_path / "pkg" / "example_vault")
    monkeypatch.setattr(demo, "PACKAGED_VAULT", tmp_path / "gone")
    assert demo.example_vault() == tmp_path / "pkg" / "example_vault"


def test_demo_without_any_example_vault_says_so_in_one_line(tmp_path, monkeypatch, capsys):
    from memvault.interfaces import demo

    monkeypatch.setattr(demo, "REPO_VAULT", tmp_path / "nowhere" / "vault")
    monkeypatch.setattr(demo, "PACKAGED_VAULT", tmp_path / "gone")
    assert demo.main([]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "example vault" in err[0] and "--from" in err[0], err
