"""A scripted tour of memvault on a throw-away copy of the example vault.

    python -m memvault.demo [--from vault/] [--keep]

It copies the shipped ``vault/`` to a temporary directory (the original is never touched), puts it in a git
repository of its own, and runs real ``memvault`` commands, printing each one before its output: read a
fact, build the index and recall, change the fact and show the git diff and the fresh recall, run a runbook
and show the episode that recorded the run.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import subprocess
import sys
from pathlib import Path

from ..rules.errors import UnsafePath
from ..rules.fsutil import copy_tree, make_temp_dir, remove_tree

#: The example vault in a checkout (README links it), and the copy a wheel carries as package data (setup.py).
REPO_VAULT = Path(__file__).resolve().parents[2] / "vault"
PACKAGED_VAULT = Path(__file__).resolve().parents[1] / "example_vault"


def example_vault() -> Path | None:
    """The checkout's ``vault/`` when run from the source tree, else the one installed with the package."""
    for path in (REPO_VAULT, PACKAGED_VAULT):
        if (path / "memvault.toml").is_file():
            return path
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m memvault.demo", description=__doc__.splitlines()[0])
    parser.add_argument("--from", dest="source", type=Path, default=None,
                        help="vault to copy (default: the example vault, vault/ in a checkout)")
    parser.add_argument("--keep", action="store_true", help="keep the demo copy and print where it is")
    args = parser.parse_args(argv)
    if args.source is None:
        args.source = example_vault()
        if args.source is None:
            print(f"memvault demo: error: no example vault in {REPO_VAULT} or {PACKAGED_VAULT} (this install lacks "
                  "it): pass --from VAULT, or run from a checkout of the repository", file=sys.stderr)
            return 1
    if not (args.source / "memvault.toml").is_file():
        print(f"memvault demo: error: {args.source}: not a vault (no memvault.toml)", file=sys.stderr)
        return 1
    workdir = make_temp_dir("memvault-demo-")
    vault = workdir / "vault"
    try:
        copy_tree(args.source.resolve(), vault, skip=frozenset({".memvault"}))
    except UnsafePath as exc:
        print(f"memvault demo: error: {exc}", file=sys.stderr)
        remove_tree(workdir)
        return 1
    env = dict(
        os.environ,
        MEMVAULT_DIR=str(vault),
        MEMVAULT_SOURCE="user:demo",
        MEMVAULT_DEMO_ROOT=str(workdir / "scratch"),
        # The demo's recalls share one warm embedder of its own, stopped at the end (see memvault.models.daemon).
        XDG_RUNTIME_DIR=str(workdir),
        # A machine with no git identity still gets readable commits.
        GIT_AUTHOR_NAME=os.environ.get("GIT_AUTHOR_NAME", "memvault demo"),
        GIT_AUTHOR_EMAIL=os.environ.get("GIT_AUTHOR_EMAIL", "demo@memvault.invalid"),
        GIT_COMMITTER_NAME=os.environ.get("GIT_COMMITTER_NAME", "memvault demo"),
        GIT_COMMITTER_EMAIL=os.environ.get("GIT_COMMITTER_EMAIL", "demo@memvault.invalid"),
    )
    memvault = [sys.executable, "-P", "-m", "memvault"]
    failed = False

    def step(title: str) -> None:
        print(f"\n\033[1m== {title}\033[0m" if sys.stdout.isatty() else f"\n== {title}", flush=True)

    def run(cmd: list[str], *, shown: str | None = None, expect: int = 0) -> None:
        nonlocal failed
        print(f"$ {shown or shlex.join(cmd)}", flush=True)
        code = subprocess.run(cmd, cwd=vault, env=env).returncode
        if code != expect:
            print(f"(exit {code}, expected {expect})", flush=True)
            failed = True

    def mv(*words: str, expect: int = 0) -> None:
        run([*memvault, *words], shown=shlex.join(["memvault", *words]), expect=expect)

    try:
        step(f"a copy of the example vault in {vault}, in a git repository of its own")
        run(["git", "init", "-q", "-b", "main"])
        run(["git", "add", "-A"])
        run(["git", "commit", "-q", "-m", "import the example vault"])
        step("facts: one markdown file each, found by key")
        mv("fact", "list", "--category", "database")
        mv("fact", "get", "db/primary")
        step("build the search index (derived from the files; delete it any time)")
        mv("reindex")
        mv("recall", "which port does the main postgres server listen on", "-k", "2")
        step("change a fact in place: the old value is gone from the file, kept in git")
        mv("fact", "set", "db/primary",
           "The primary PostgreSQL 16.4 server is db1 (db1.acme.internal, 10.8.0.4); since the pgbouncer rollout "
           "applications connect on port 6432 and PostgreSQL itself listens on 5432.",
           "--source", "user:admin")
        run(["git", "--no-pager", "log", "-1", "-p", "--stat", "--", "facts/db/primary.md"],
            shown="git log -1 -p -- facts/db/primary.md")
        step("recall sees the change at once: the old text never comes back")
        mv("recall", "which port does the main postgres server listen on", "-k", "1", "--explain")
        step("procedures: whole runbooks with the git version that ran")
        mv("proc", "list")
        mv("proc", "run", "db/rotate-pg-logs", "--", "3")
        step("the run was recorded as an episode with its commit and blob")
        mv("episode", "list", "--kind", "procedure_run", "--limit", "1", "--json")
        step("a context block for an agent, within a token budget")
        mv("recall", "how do I take a web host out of rotation for maintenance", "--format", "prompt",
           "--budget", "900")
        step("what happened recently")
        mv("episode", "list", "--since", "2026-11-25", "--until", "2026-11-27", "--source", "agent:*")
        step("bad input: one clear line, non-zero exit, nothing written")
        mv("fact", "set", "../etc/passwd", "nope", expect=1)
        run(["git", "status", "--short", "--", "facts"], shown="git status --short -- facts   # nothing changed")
    finally:
        _stop_daemon(workdir, vault)
        if args.keep:
            print(f"\nthe demo vault is kept at {vault}")
        else:
            with contextlib.suppress(OSError):
                remove_tree(workdir)
    print("\ndemo failed" if failed else "\ndemo finished: every step behaved as expected")
    return 1 if failed else 0


def _stop_daemon(workdir: Path, vault: Path) -> None:
    """Stop the warm process the demo's commands started in its own runtime directory."""
    from ..models import daemon

    previous = os.environ.get("XDG_RUNTIME_DIR")
    os.environ["XDG_RUNTIME_DIR"] = str(workdir)
    try:
        daemon.stop()
    except Exception:  # noqa: BLE001 - best effort: an idle daemon also stops by itself
        pass
    finally:
        if previous is None:
            os.environ.pop("XDG_RUNTIME_DIR", None)
        else:
            os.environ["XDG_RUNTIME_DIR"] = previous


if __name__ == "__main__":
    sys.exit(main())
