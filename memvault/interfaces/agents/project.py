"""The project an agent session works in, read from its working directory without running anything slow: the git
repository's name (its origin's, else its folder's), the branch, the last commit subjects and the README's title.
Together they are the question a session starts with; the name's slug is the tag captured turns carry and the key
prefix of facts "for this project" (``facts/<slug>/...`` or ``facts/projects/<slug>/...``)."""
from __future__ import annotations

import os
import re
import stat
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

#: Branch names that say nothing about the work.
_PLAIN_BRANCHES = {"main", "master", "trunk", "develop", "dev", "head", "default"}
_SLUG = re.compile(r"[^a-z0-9._-]+")
_README = ("README.md", "README.rst", "README.txt", "README", "readme.md")


@dataclass
class Project:
    """What a working directory says about the work done in it."""

    cwd: str
    root: str | None = None
    name: str = ""
    branch: str | None = None
    subjects: list[str] = field(default_factory=list)
    title: str | None = None

    @property
    def slug(self) -> str:
        """The name as a key segment and a tag: lower case, ``[a-z0-9._-]``, at most 60 characters (the name can
        come from a remote URL, which a cloned repository chooses)."""
        return _SLUG.sub("-", self.name.lower())[:60].strip("-.") or "project"

    def query(self, max_words: int = 32) -> str:
        """The question a session starts with: name, branch words, README title, last commit subjects."""
        parts = [self.name.replace("-", " ").replace("_", " ")]
        if self.branch and self.branch.lower() not in _PLAIN_BRANCHES:
            parts.append(re.sub(r"[/_\-.]+", " ", self.branch))
        if self.title:
            parts.append(self.title)
        parts += self.subjects
        words = " ".join(parts).split()
        return " ".join(words[:max_words])

    def contains(self, path: str | None) -> bool:
        """Whether ``path`` (a session's cwd) is inside this project."""
        if not path:
            return False
        base = self.root or self.cwd
        return path == base or path.startswith(base.rstrip("/") + "/")

    def describe(self) -> str:
        """"project NAME (branch BRANCH)" on one line, each name at most :data:`SHOWN_NAME` characters: a folder or
        a pushed branch is named by anyone, and a line break in one started lines of its own above the memories, a
        long one (escaped, four times longer) pushed them out of the hook's cap."""
        return f"project {shown(self.name)}" + (f" (branch {shown(self.branch)})" if self.branch else "")


#: The most characters of a project's or branch's name shown in the line above the memories.
SHOWN_NAME = 80


def shown(name: str, limit: int = SHOWN_NAME) -> str:
    """``name`` on one line (runs of white space, line breaks included, become one space), cut to ``limit``."""
    flat = " ".join(name.split())
    return flat if len(flat) <= limit else flat[:limit - 1] + "…"


def detect(cwd: str | None, *, commits: int = 5, timeout: float = 0.5) -> Project:
    """The project at ``cwd``: its git work tree when there is one (``.git`` file or folder above), else the folder
    itself. The commit subjects come from ``git log`` (skipped after ``timeout`` seconds)."""
    here = os.path.abspath(cwd or os.getcwd())
    project = Project(cwd=here)
    root, gitdir = _git_root(here)
    project.root = root
    top = Path(root or here)
    project.name = top.name
    if gitdir is not None:
        project.name = _origin_name(gitdir) or project.name
        project.branch = _branch(gitdir)
        if commits:
            project.subjects = _reflog_subjects(gitdir, commits) or _subjects(top, commits, timeout)
    project.title = _readme_title(top)
    return project


def _git_root(start: str) -> tuple[str | None, Path | None]:
    current = Path(start)
    for candidate in (current, *current.parents):
        dot = candidate / ".git"
        if dot.is_dir():
            return str(candidate), dot
        if dot.is_file():  # a worktree or submodule: "gitdir: <path>"
            try:
                text = dot.read_text(encoding="utf-8", errors="replace").strip()
            except OSError:
                return str(candidate), None
            if text.startswith("gitdir:"):
                gitdir = Path(text[7:].strip())
                return str(candidate), gitdir if gitdir.is_absolute() else candidate / gitdir
            return str(candidate), None
    return None, None


def _common_dir(gitdir: Path) -> Path:
    try:
        common = (gitdir / "commondir").read_text(encoding="utf-8").strip()
    except OSError:
        return gitdir
    path = Path(common)
    return path if path.is_absolute() else gitdir / path


def _origin_name(gitdir: Path) -> str | None:
    """The last segment of ``remote.origin.url`` (``git@host:org/name.git`` -> ``name``)."""
    try:
        text = (_common_dir(gitdir) / "config").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    section = None
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("["):
            section = stripped
            continue
        if section in ('[remote "origin"]',) and stripped.split("=", 1)[0].strip() == "url" and "=" in stripped:
            url = stripped.split("=", 1)[1].strip().rstrip("/")
            name = re.split(r"[/:]", url)[-1]
            name = name[:-4] if name.endswith(".git") else name
            return name or None
    return None


def _branch(gitdir: Path) -> str | None:
    try:
        head = (gitdir / "HEAD").read_text(encoding="utf-8").strip()
    except OSError:
        return None
    if head.startswith("ref: refs/heads/"):
        return head[len("ref: refs/heads/"):]
    return None  # detached


def _reflog_subjects(gitdir: Path, n: int) -> list[str]:
    """The last ``n`` commit subjects made in this work tree, from the reflog (no git process: a session start
    pays for every millisecond); [] when it has fewer (a fresh clone), and ``git log`` answers instead."""
    try:
        with open(gitdir / "logs" / "HEAD", "rb") as f:
            size = f.seek(0, os.SEEK_END)
            f.seek(max(0, size - 65536))
            lines = f.read().decode("utf-8", errors="replace").splitlines()
    except OSError:
        return []
    found: list[str] = []
    for line in reversed(lines):
        message = line.partition("\t")[2]
        action, _, subject = message.partition(": ")
        if action.startswith("commit") and subject.strip() and subject.strip() not in found:
            found.append(subject.strip()[:200])
            if len(found) == n:
                return found
    return []


def _subjects(top: Path, n: int, timeout: float) -> list[str]:
    try:
        out = subprocess.run(["git", "log", f"-{n}", "--no-merges", "--format=%s"], cwd=top, capture_output=True,
                             text=True, timeout=timeout, env={**os.environ, "GIT_OPTIONAL_LOCKS": "0"})
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.strip()[:200] for line in out.stdout.splitlines() if line.strip()] if out.returncode == 0 else []


def _readme_title(top: Path) -> str | None:
    for name in _README:
        try:
            head = _head(top / name, 4096)
        except OSError:
            continue
        for line in head.splitlines():
            line = line.strip()
            if line.startswith("#"):
                return line.lstrip("#").strip()[:200] or None
            if line and not line.startswith(("<", "[", "!", "=")):
                return line[:200]
        return None
    return None


def _head(path: Path, size: int) -> str:
    """The first ``size`` bytes of the regular file at ``path``, never through a link at its name (a repository's
    ``README.md -> ~/.aws/credentials`` would put a line of this host's file in the question) nor from a FIFO
    (which would hold the hook); OSError otherwise."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path}: not a regular file")
        return os.read(fd, size).decode("utf-8", errors="replace")
    finally:
        os.close(fd)
