"""A shorter [retention] from the shared memvault.toml is not applied by itself: a teammate's pushed
``raw = "1s"`` made every host's daily prune timer delete the episodes it keeps only on this host (untracked, the
default), and take other clones' folders for idle ones. This host prunes by the longest retention it has pruned by
until a trusted source accepts the shorter one (``memvault prune --accept-retention``); a longer one applies at once."""
from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

import pytest

from memvault import Vault
from memvault.interfaces.cli import cli
from memvault.rules.errors import UntrustedSource
from memvault.stores.state import RecallLogEntry
from conftest import git

NOW = datetime.now(timezone.utc)


def set_retention(v: Vault, **ages: str) -> Vault:
    """memvault.toml's [retention] as a teammate's commit, pulled here, would leave it."""
    toml = v.root / "memvault.toml"
    text = toml.read_text()
    for kind, age in ages.items():
        text, n = re.subn(rf'(?m)^{kind} = "[^"]*"$', f'{kind} = "{age}"', text)
        assert n == 1, kind
    toml.write_text(text)
    git(v.root, "commit", "-qm", "retention", "--", "memvault.toml")
    return Vault.open(v.root)


def texts(v: Vault) -> list[str]:
    return sorted(e.text for e in v.episodes.list())


def test_a_shared_retention_shortened_after_this_host_pruned_is_kept_to_the_longer_one(strict_vault):
    v = strict_vault
    v.episodes.append("three days ago", source="user:ann", at=NOW - timedelta(days=3))
    v.episodes.append("forty days ago", source="user:ann", at=NOW - timedelta(days=40))
    assert v.prune().kinds["raw"]["removed"] == 1  # 30d, the default: this host prunes by it
    v = set_retention(v, raw="1s")
    report = v.prune()  # the daily timer
    assert texts(v) == ["three days ago"]
    assert report.kinds["raw"]["removed"] == 0
    [warning] = [w for w in report.warnings if "retention" in w]
    assert "raw" in warning and "1s" in warning and "30d" in warning and "--accept-retention" in warning


def test_a_trusted_source_accepts_the_shorter_retention(strict_vault):
    v = strict_vault
    v.episodes.append("three days ago", source="user:ann", at=NOW - timedelta(days=3))
    v.prune()
    v = set_retention(v, raw="1d")
    assert v.prune(dry_run=True, accept_retention=True).kinds["raw"]["removed"] == 1
    assert texts(v) == ["three days ago"]
    with pytest.raises(UntrustedSource):
        v.prune(accept_retention=True, source="agent:cron")
    assert texts(v) == ["three days ago"]
    report = v.prune(accept_retention=True, source="user:ann")
    assert report.kinds["raw"]["removed"] == 1 and texts(v) == []
    v.episodes.append("two days ago", source="user:ann", at=NOW - timedelta(days=2))
    assert v.prune().kinds["raw"]["removed"] == 1  # accepted: the timer prunes by it from now on


def test_a_longer_retention_applies_at_once_and_a_return_to_the_shorter_one_waits(strict_vault):
    v = strict_vault
    v.episodes.append("forty days ago", source="user:ann", at=NOW - timedelta(days=40))
    v = set_retention(v, raw="90d")
    assert v.prune().kinds["raw"]["removed"] == 0 and texts(v) == ["forty days ago"]
    v = set_retention(v, raw="30d")
    report = v.prune()
    assert texts(v) == ["forty days ago"] and any("--accept-retention" in w for w in report.warnings)


def test_a_kind_the_shared_file_names_for_the_first_time_is_held_to_the_default_it_had(strict_vault):
    v = strict_vault
    v.episodes.append("a debug line of last week", source="user:ann", kind="debug", at=NOW - timedelta(days=7))
    v.prune()
    toml = v.root / "memvault.toml"
    toml.write_text(toml.read_text().replace("[retention]\n", '[retention]\ndebug = "1h"\n'))
    git(v.root, "commit", "-qm", "retention", "--", "memvault.toml")
    v = Vault.open(v.root)
    assert v.prune().kinds["debug"]["removed"] == 0 and texts(v) == ["a debug line of last week"]


def test_the_recall_log_is_pruned_by_the_retention_in_force(strict_vault):
    v = strict_vault
    v.prune()
    v = set_retention(v, raw="1s")
    v.recall_log.log_recall(RecallLogEntry(at=(NOW - timedelta(days=2)).timestamp(), source="user:ann",
                                           query="where is the primary", options={}, hits=[], nothing_found=None,
                                           warnings=0, ms=1.0))
    assert v.prune().kinds["recall_log"] == {"kept": 1, "removed": 0, "bytes_freed": 0}
    assert v.prune(accept_retention=True, source="user:ann").kinds["recall_log"]["removed"] == 1


def test_cli_prune_accept_retention(strict_vault, runner):
    v = strict_vault
    v.episodes.append("three days ago", source="user:ann", at=NOW - timedelta(days=3))
    v.prune()
    set_retention(v, raw="1d")
    held = runner.invoke(cli, ["--vault", str(v.root), "prune"], env={"MEMVAULT_SOURCE": "user:ann"})
    assert held.exit_code == 0 and "--accept-retention" in held.output and texts(v) == ["three days ago"]
    done = runner.invoke(cli, ["--vault", str(v.root), "prune", "--accept-retention"],
                         env={"MEMVAULT_SOURCE": "user:ann"})
    assert done.exit_code == 0, done.output
    assert texts(v) == []
    refused = runner.invoke(cli, ["--vault", str(v.root), "prune", "--accept-retention"],
                            env={"MEMVAULT_SOURCE": "agent:cron"})
    assert refused.exit_code != 0 and len(refused.output.strip().splitlines()) == 1


def test_stats_says_what_retention_is_in_force_and_what_waits(strict_vault):
    """A person looking at the vault sees the retention held back, not only the cron mail of the prune."""
    v = strict_vault
    v.prune()
    v = set_retention(v, raw="1d")
    stats = v.stats()
    assert stats["retention"]["raw"] == "30d"
    assert stats["retention_held"] == {"raw": {"configured": "1d", "kept_to": "30d"}}
    assert any("--accept-retention" in line for line in stats["summary"])
    v.prune(accept_retention=True, source="user:ann")
    stats = v.stats()
    assert stats["retention"]["raw"] == "1d" and "retention_held" not in stats


def test_a_host_that_never_pruned_is_held_to_the_defaults_not_to_what_it_finds(strict_vault):
    """The first prune recorded whatever memvault.toml said: a clone made, or a host that had not pruned yet, after a
    teammate pushed raw = "1s" deleted every episode it kept only here on its first daily prune (trust on first
    use). A host with no record now starts from memvault's defaults; a shorter retention still waits for a trusted
    accept, and stats says so before any prune ran."""
    v = strict_vault
    v.episodes.append("three days ago", source="user:ann", at=NOW - timedelta(days=3))
    v = set_retention(v, raw="1s")
    assert v.stats()["retention_held"] == {"raw": {"configured": "1s", "kept_to": "30d"}}
    report = v.prune()
    assert texts(v) == ["three days ago"] and report.kinds["raw"]["removed"] == 0
    assert any("--accept-retention" in w and "1s" in w for w in report.warnings)
    assert v.prune(accept_retention=True, source="user:ann").kinds["raw"]["removed"] == 1
