"""Secrets that must not come to rest where they should not: error messages (stderr, MCP replies, agents.log,
the watcher's log, import reports), recorded procedure arguments, and the purge recipe of docs/secrets.md."""
from __future__ import annotations

import pytest

from memvault.interfaces.cli import cli
from memvault.rules.errors import EpisodeError, InvalidKey, InvalidValue, describe

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
