"""Secrets that must not come to rest where they should not: error messages (stderr, MCP replies, agents.log,
the watcher's log, import reports), recorded procedure arguments, and the purge recipe of docs/secrets.md."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO_ROOT

from memvault.interfaces.cli import cli
from memvault.rules.errors import EpisodeError, InvalidKey, InvalidValue, describe
from memvault.rules.secrets import find_secrets

# Synthetic, split so that no scanner reading this file takes it for a real token.
TOKEN = "gh" + "p_aB3dE5fG7hJ9kL1mN2pQ4rS6tU8vW0xYabcd"
SECRET_TAIL = TOKEN[4:]


@pytest.mark.parametrize("exc", [
    InvalidKey(f"db/{TOKEN}", "segment must be lower case"),
    InvalidValue("valid_until", f"not a date (YYYY-MM-DD): {TOKEN!r}"),
    EpisodeError(f"kind: {TOKEN!r} must be one lower-case word"),
    ValueError(f"bad value {TOKEN}"),  # a bug's message too: it goes to the same logs
], ids=["key", "value", "episode", "internal"])
def test_the_one_line_error_never_quotes_a_secret_back(exc):
    message, _ = describe(exc)
    assert SECRET_TAIL not in message
    assert "GitHub-token" in message  # says what was left out, so the person knows which argument was wrong


@pytest.mark.parametrize("args", [
    ("fact", "set", f"db/{TOKEN}", "hello"),
    ("fact", "set", "db/x", "hello", "--valid-until", TOKEN),
    ("episode", "add", "hello", "--at", TOKEN),
    ("episode", "add", "hello", "--kind", TOKEN),
], ids=["key", "valid-until", "at", "kind"])
def test_a_refused_argument_is_not_echoed_to_stderr(vault, runner, args):
    r = runner.invoke(cli, ["--vault", str(vault.root), *args])
    assert r.exit_code == 1, r.output
    assert SECRET_TAIL not in r.stderr and "memvault: error:" in r.stderr


@pytest.mark.parametrize("args, kept", [
    (["--password", "hunter2hunter2", "--verbose"], ["--password", "--verbose"]),
    (["--token", "Xk9pL2mQ7vZq"], ["--token"]),
    (["-H", "Authorization: Bearer", "Xk9pL2mQ7vZqWe"], ["-H", "Authorization: Bearer"]),
    (["DB_PASSWORD=", "Xk9pL2mQ7vZ"], ["DB_PASSWORD="]),
    ([f"--token={TOKEN}"], []),  # one argument: as before
], ids=["password", "token", "bearer", "assignment", "one-arg"])
def test_a_secret_given_as_the_argument_after_its_flag_is_not_recorded(vault, tmp_path, args, kept):
    script = tmp_path / "check.sh"
    script.write_text("#!/bin/sh\nexit 0\n")
    vault.procedures.add("ops/check", script, source="user:dev")
    ran = vault.procedures.run("ops/check", args, source="user:dev", stdout=-3, stderr=-3)
    recorded = ran.episode.meta["args"]
    assert len(recorded) == len(args)
    assert [a for a in recorded if not a.startswith("<redacted")] == kept
    on_disk = "".join(p.read_text() for p in (vault.root / "episodes").rglob("*.jsonl"))
    for secret in set(args) - set(kept):
        assert secret.split("=")[-1] not in on_disk, on_disk


# ------------------------------------------------------------------------------- docs/secrets.md: purge
def _block(name: str) -> str:
    text = (REPO_ROOT / "docs" / "secrets.md").read_text()
    assert f"```sh {name}\n" in text, f"docs/secrets.md has no `sh {name}` block"
    return text.split(f"```sh {name}\n", 1)[1].split("\n```", 1)[0]


def _sh(script: str, cwd: Path, stdin: str = "", **env: str) -> str:
    venv_bin = Path(sys.executable).parent
    full = {**os.environ, "PATH": f"{venv_bin}:{os.environ['PATH']}", "PYTHONPATH": str(REPO_ROOT),
            "MEMVAULT_NO_DAEMON": "1", **env}
    proc = subprocess.run(["bash", "-eu", "-c", script], cwd=cwd, env=full, input=stdin, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, (script, proc.stdout[-3000:], proc.stderr[-3000:])
    return proc.stdout


def _every_object(repo: Path) -> str:
    """Every object git holds in ``repo``, reachable or not, as text (what a copy of the folder gives away)."""
    return subprocess.run(["git", "cat-file", "--batch-all-objects", "--batch"], cwd=repo, capture_output=True,
                          check=True).stdout.decode("utf-8", "replace")


def test_the_documented_purge_removes_a_committed_secret_from_every_copy(tmp_path):
    remote, vault, mate = tmp_path / "remote.git", tmp_path / "vault", tmp_path / "mate"
    _sh(f"git init -q --bare -b main {remote} && memvault init {vault} >/dev/null 2>&1", tmp_path)
    _sh(f"""git remote add origin {remote}
memvault fact set db/primary "The primary listens on db01:5432." >/dev/null
memvault fact set ci/bot "The CI bot pushes releases with {TOKEN}." --allow-secret >/dev/null
memvault fact set ci/bot "The CI bot pushes releases with its own token." >/dev/null
memvault episode add "gave the bot {TOKEN}" --allow-secret >/dev/null
memvault recall "CI bot release token" >/dev/null
memvault sync >/dev/null 2>&1""", vault)
    _sh(f"git clone -q {remote} {mate}", tmp_path)
    # the teammate wrote after their last sync: that commit must survive, the old history must not come back
    _sh('memvault fact set db/replica "The replica is db02." >/dev/null', mate)
    assert SECRET_TAIL in _every_object(vault) and SECRET_TAIL in _every_object(mate)

    out = _sh(_block("purge-secret"), vault, stdin=TOKEN + "\n")
    old = re.search(r"old history ends at ([0-9a-f]{40})", out).group(1)
    _sh(_block("purge-secret-teammate"), mate, OLD=old)
    _sh("memvault sync >/dev/null 2>&1", mate)
    _sh("git reflog expire --expire=now --all && git gc -q --prune=now", remote)  # step 5

    for repo in (vault, mate, remote):
        assert SECRET_TAIL not in _every_object(repo), repo
    for path in (vault / ".git").rglob("*"):  # the index, its WAL, the state: everything memvault keeps
        assert not path.is_file() or SECRET_TAIL.encode() not in path.read_bytes(), path
    assert SECRET_TAIL not in "".join(p.read_text() for p in (vault / "episodes").rglob("*.jsonl"))
    assert "its own token" in (vault / "facts" / "ci" / "bot.md").read_text()  # the fact itself is kept
    log = subprocess.run(["git", "log", "--format=%s", "origin/main"], cwd=mate, capture_output=True, text=True,
                         check=True).stdout
    assert "fact set db/replica" in log and log.count("fact set ci/bot") == 1, log


# ------------------------------------------------------------------------- what an agent writes in prose
@pytest.mark.parametrize("text", [
    "the root password on prod is Xk9pL2mQ7vZ",
    "the admin password at the colo was changed to Tr0ub4dor&3",
    "ssh root@web1 with password Xk9pL2mQ7vZ worked",
    "logged in to the NAS using password 'Gr4fana!2026'",
    "unlocked the key with the passphrase hunter2hunter2",
], ids=["on", "at", "with", "using", "with-the"])
def test_a_password_an_agent_writes_in_a_sentence_is_found(text):
    assert [f.kind for f in find_secrets(text)] == ["password in prose"], text


@pytest.mark.parametrize("text", [
    "ssh root@web1 with password authentication disabled",
    "log in with password-less sudo",
    "the password on prod is stored in vault",
    "signed in using password 1234",  # a sentence about a length or a count, not a password of six or more
    "with password rotation every 90 days",
    "using the password from $PGPASSWORD",
    "with password <your-password>",
    "`connection string with password (base64-encoded)` for a Secret's data",
], ids=["auth", "less", "stored", "short", "rotation", "var", "placeholder", "remark"])
def test_prose_about_passwords_stays_prose(text):
    assert find_secrets(text) == [], text


def test_an_error_still_names_its_file():
    path = "/tmp/pytest-of-root/pytest-605/test_a_zstd_bomb_is_capped_and0/zst/rollout-2026-11-20T09-00-00-x.jsonl.zst"
    assert describe(EpisodeError("the zstd file ends inside a frame", path))[0].startswith(path)


@pytest.mark.parametrize("text", [
    "the log is ~/.codex/sessions/2026/11/20/rollout-2026-11-20T09-00-00-0199a213-81c0-7800-8aa1-bbab2a035a53.jsonl",
    "/home/dev/.codex/sessions/2026/11/20/rollout-2026-11-20T09-00-00-0199a213-81c0-7800-8aa1-bbab2a035a53.jsonl",
    "backup written to /srv/backups/billing/pg-20261120T013000Z-full/base.tar.zst",
])
def test_a_path_with_a_time_in_its_name_is_not_a_token(text):
    """A fact naming a Codex session log (its file name holds the time it started, "20T09") was refused as a
    high-entropy token, and capture redacted the path: a piece of digits around a 'T' is a time, not key material."""
    assert find_secrets(text) == []


@pytest.mark.parametrize("token", ["ghp_9fK2mQ7xL4pT8vR1sW6yZ3bN5cD0eH2jA7uG", "aK9x2T7mQ4pL8vR1sW6yZ3bN5cD0eH2jT7uGq1T9"])
def test_a_token_with_a_t_between_digits_is_still_a_token(token):
    assert find_secrets(f"the key is {token}")
