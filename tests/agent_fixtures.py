"""Shared helpers of the agent tests: the real-format fixtures (tests/fixtures/agents) copied where a test can
change them, and the hook run as the runtimes run it (a process reading JSON on stdin) or in this process."""
from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

FIXTURES = Path(__file__).parent / "fixtures" / "agents"
IMPORTS = Path(__file__).parent / "fixtures" / "import"
BIG_MARKER = "@@FIVE_MEGABYTES_OF_LOG@@"
TRANSCRIPTS = {
    "claude-code": "claude-code/session.jsonl",
    "codex": "codex/rollout-2026-11-20T09-00-00-019d036d-5a1c-7e02-b3c4-4f6a8e2d9b10.jsonl",
    "gemini": "gemini/session-2026-11-20T09-00-24431794.jsonl",
}
SECRET = "ghp_R4nd0mT0k3nV4lu3F0rT3st1ngXyZ12345678"
PRIVATE = "my manager thinks this release is doomed"


def transcript(tmp: Path, runtime: str, *, big: bool = True, name: str | None = None) -> Path:
    """A copy of the runtime's fixture transcript in ``tmp``; ``big`` expands the log marker to 5 MB of lines."""
    src = FIXTURES / (name or TRANSCRIPTS[runtime])
    text = src.read_text(encoding="utf-8")
    if big:
        line = "2026-11-20T09:05:01Z INFO GET /healthz 200 1ms\\n"
        text = text.replace(BIG_MARKER, line * (5 * 1024 * 1024 // len(line) + 1))
    dest = tmp / src.name
    dest.write_text(text, encoding="utf-8")
    return dest


def payload(runtime: str, event: str, *, transcript: Path | str = "", cwd: Path | str = "/tmp",
            prompt: str = "", **extra: object) -> dict:
    """The runtime's documented stdin JSON for ``event`` (tests/fixtures/agents/<runtime>/hooks.json)."""
    data = json.loads((FIXTURES / runtime / "hooks.json").read_text())[event]
    out = {}
    for key, value in data.items():
        if value == "@TRANSCRIPT@":
            value = str(transcript)
        elif value == "@CWD@":
            value = str(cwd)
        elif value == "@PROMPT@":
            value = prompt
        out[key] = value
    out.update(extra)
    return out


def run_hook(args: list[str], data: dict, *, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """The hook as a runtime runs it: ``python -m memvault.interfaces.agents.hook ...``, JSON on stdin."""
    return subprocess.run([sys.executable, "-m", "memvault.interfaces.agents.hook", *args], input=json.dumps(data),
                          capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})})


def call_hook(monkeypatch, args: list[str], data: dict) -> str:
    """The hook's main() in this process (stdin and stdout replaced); returns what it printed."""
    from memvault.interfaces.agents import hook

    out = io.StringIO()
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(json.dumps(data).encode())))
    monkeypatch.setattr(sys, "stdout", out)
    assert hook.main(args) == 0
    return out.getvalue()


def copy_tree(src: Path, dest: Path) -> Path:
    shutil.copytree(src, dest)
    return dest
