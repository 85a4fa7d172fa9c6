"""What a session starting in a service's repository is given (issue 26): that service's deploy facts, where its
data lives, its rollback runbook and yesterday's failed deploy — chosen over the newer chatter of captured turns —
no other service's deploy, within Claude Code's 10,000-character hook cap, and none of memvault's own health
notices (those go to agents.log and `agent status`). The scenarios are bench/context_scenarios.json."""
from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from agent_fixtures import call_hook, payload

BENCH = Path(__file__).resolve().parent.parent / "bench" / "context_scenarios.py"
CLAUDE_HOOK_CAP = 10_000


def _bench():
    spec = importlib.util.spec_from_file_location("context_scenarios", BENCH)
    module = importlib.util.module_from_spec(spec)
    sys.modules["context_scenarios"] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def services(tmp_path_factory):
    from conftest import isolate

    base = tmp_path_factory.mktemp("services")
    with pytest.MonkeyPatch.context() as mp:
        isolate(tmp_path_factory.mktemp("services-home"), mp)
        bench = _bench()
        vault, scenarios = bench.build(base)
    return bench, vault.root, scenarios


def _context(monkeypatch, root: Path, repo: Path) -> str:
    out = call_hook(monkeypatch, ["session-start", "--runtime", "claude-code", "--vault", str(root)],
                    payload("claude-code", "SessionStart", cwd=repo, source="startup"))
    return json.loads(out)["hookSpecificOutput"]["additionalContext"]


@pytest.mark.parametrize("slug", ["shop-api", "billing", "search-svc", "notify"])
def test_a_session_in_a_services_repository_gets_what_it_needs_and_no_other_deploy(services, slug, monkeypatch):
    bench, root, scenarios = services
    scenario = next(s for s in scenarios if s.slug == slug)
    text = _context(monkeypatch, root, scenario.repo)
    must = {i.must: i for i in scenario.items if i.must}
    assert set(must) == {"deploy", "data", "rollback", "failed-deploy"}
    for what, item in must.items():
        assert item.marker() in text, f"{slug}: {what} ({item.id}) missing"
    leaked = [f"{i.service} {i.id}" for s in scenarios if s is not scenario for i in s.items
              if i.deploy_related and i.marker() in text]
    assert leaked == []
    assert len(text) <= CLAUDE_HOOK_CAP
    assert [line for line in text.splitlines() if bench.HEALTH.search(line)] == []


def test_an_untrusted_failure_is_chosen_and_still_fenced(services, monkeypatch):
    _bench_, root, scenarios = services
    scenario = next(s for s in scenarios if s.slug == "search-svc")  # its failed deploy is a captured agent turn
    text = _context(monkeypatch, root, scenario.repo)
    failed = next(i for i in scenario.items if i.must == "failed-deploy")
    block = text[text.index(failed.marker()):]
    block = block[:block.index("</episode>")]
    assert 'trusted="false"' in block and "<untrusted-data" in block


def test_the_health_notices_go_to_the_log_and_agent_status(services, monkeypatch):
    _bench_, root, scenarios = services
    from memvault import Vault

    state = Vault.open(root).state_dir
    log = state / "agents.log"
    before = log.read_text() if log.exists() else ""
    _context(monkeypatch, root, scenarios[0].repo)  # no warm process in tests: keyword-only, which is a notice
    added = log.read_text()[len(before):]
    assert "keyword-only" in added and "session-start (claude-code)" in added

    from click.testing import CliRunner
    from memvault.interfaces.cli import Context, cli

    done = CliRunner().invoke(cli, ["--vault", str(root), "agent", "status"], obj=Context())
    assert done.exit_code == 0 and "keyword-only" in done.stdout
