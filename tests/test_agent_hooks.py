"""hooks/agents: the session-start and session-end scripts work against a real vault through the real CLI."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from memvault import Vault
from conftest import REPO_ROOT

HOOKS = REPO_ROOT / "hooks" / "agents"


@pytest.fixture
def env(vault, tmp_path):
    """The scripts' environment: memvault as `python -m memvault`, a model that cannot load offline (so recall
    is keyword-only and fast), and one seeded fact."""
    vault.facts.set("db/primary", "The primary database listens on 10.8.0.4 port 5432; dumps run at 03:15 UTC.",
                    category="database", source="user:admin")
    return {
        **os.environ,
        "MEMVAULT": f"{sys.executable} -m memvault",
        "MEMVAULT_PYTHON": sys.executable,
        "MEMVAULT_DIR": str(vault.root),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_HOME": str(tmp_path / "hf-home"),
    }


def run(script: str, *args: str, env, input: str | None = None):
    return subprocess.run(["sh", str(HOOKS / script), *args], input=input, env=env, capture_output=True,
                          text=True, timeout=120)


def test_session_start_prints_a_prompt_block_with_the_relevant_fact(env):
    result = run("session-start.sh", "which port does the primary database listen on", env=env)
    assert result.returncode == 0, result.stderr
    assert "10.8.0.4 port 5432" in result.stdout and "<memory" in result.stdout
    # The same task on stdin, and as a harness's JSON payload (Claude Code's UserPromptSubmit).
    piped = run("session-start.sh", env=env, input="primary database port\n")
    assert "10.8.0.4 port 5432" in piped.stdout
    payload = json.dumps({"session_id": "s1", "hook_event_name": "UserPromptSubmit",
                          "prompt": "restore the primary database dump"})
    hooked = run("session-start.sh", env=env, input=payload)
    assert hooked.returncode == 0 and "10.8.0.4 port 5432" in hooked.stdout


def test_session_start_without_a_task_prints_nothing(env):
    payload = json.dumps({"session_id": "s1", "hook_event_name": "SessionStart", "source": "startup"})
    result = run("session-start.sh", env=env, input=payload)
    assert result.returncode == 0 and result.stdout == ""
    with_default = run("session-start.sh", env={**env, "MEMVAULT_TASK": "primary database"}, input=payload)
    assert "10.8.0.4 port 5432" in with_default.stdout


def test_session_end_appends_a_summary_episode_from_the_agent(env, vault):
    summary = "Restored the primary from the 03:15 dump; replication caught up in 4 minutes."
    result = run("session-end.sh", env={**env, "AGENT_NAME": "deployer"}, input=summary + "\n")
    assert result.returncode == 0, result.stderr
    episodes = list(Vault.open(vault.root).episodes.iter())
    assert [(e.kind, e.source, e.text.strip()) for e in episodes] == [("summary", "agent:deployer", summary)]
    # The next session's recall finds it.
    recalled = run("session-start.sh", "replication after restoring the primary", env=env)
    assert "replication caught up" in recalled.stdout


def test_session_end_needs_an_agent_name_and_stores_nothing_empty(env, vault):
    missing = run("session-end.sh", env=env, input="something\n")
    assert missing.returncode != 0 and "AGENT_NAME" in missing.stderr
    empty = run("session-end.sh", env={**env, "AGENT_NAME": "deployer"}, input="  \n")
    assert empty.returncode == 0
    assert list(Vault.open(vault.root).episodes.iter()) == []
