"""The first capture of a large Claude Code transcript, as PreCompact runs it (a whole hook process, JSON on stdin),
into a fresh vault: wall time, peak memory (the process's max RSS) and how many turns were stored per run.

    python bench/bench_capture_big.py [--mb 200] [--output-kb 20] [--paste-kb 4] [--runs 6] [--keep DIR]

The transcript has the shape of tests/fixtures/agents/claude-code/session.jsonl: per turn a prompt, a Bash
``tool_use``, its ``tool_result`` (``--output-kb`` of log lines: what makes a transcript large), and a final answer;
each prompt pastes ``--paste-kb`` of log and one in 50 holds a token to redact. Runs repeat the hook on the same vault until the transcript is captured
whole (a capture that stops at its time budget resumes from its cursor on the next run), so the report says how
long the first run took, how far its cursor got and how many runs the whole file needed (turns past
``[capture] session_bytes`` are read and counted, not stored).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def transcript(path: Path, megabytes: int, output_kb: int, paste_kb: int) -> int:
    """Write the transcript; the number of turns."""
    sid = "bench-big-session"
    line = "2026-11-20T09:00:00Z INFO GET /api/orders/{j} served in {j} ms by worker 7\n"
    output = "".join(line.format(j=j) for j in range(output_kb * 1024 // len(line) + 1))
    pasted = "".join(line.format(j=j) for j in range(paste_kb * 1024 // len(line)))
    base = {"isSidechain": False, "userType": "external", "cwd": "/home/dev/src/shopfront", "sessionId": sid,
            "version": "2.1.63", "gitBranch": "main"}
    target, i = megabytes * 1024 * 1024, 0
    with open(path, "w") as f:
        while f.tell() < target:
            secret = f" The token is ghp_{i:06d}R4nd0mT0k3nV4lu3F0rT3st1ngXy" if i % 50 == 0 else ""
            stamp = f"2026-11-20T{10 + i // 3600 % 10:02d}:{i // 60 % 60:02d}:{i % 60:02d}Z"
            for obj in (
                {**base, "type": "user", "uuid": f"u{i}", "timestamp": stamp,
                 "message": {"role": "user", "content": f"Step {i}: run the checks for module {i} and fix what "
                                                        f"fails.{secret} The log:\n{pasted}"}},
                {**base, "type": "assistant", "uuid": f"a{i}", "timestamp": stamp, "message": {
                    "id": f"m{i}a", "role": "assistant", "content": [
                        {"type": "tool_use", "id": f"t{i}", "name": "Bash",
                         "input": {"command": f"pytest tests/test_m{i}.py -q"}}]}},
                {**base, "type": "user", "uuid": f"r{i}", "timestamp": stamp, "message": {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": f"t{i}", "content": output, "is_error": False}]}},
                {**base, "type": "assistant", "uuid": f"f{i}", "timestamp": stamp, "message": {
                    "id": f"m{i}b", "role": "assistant", "content": [
                        {"type": "text", "text": f"Module {i}: all checks pass; nothing to fix. " * 4}]}},
            ):
                f.write(json.dumps(obj) + "\n")
            i += 1
    return i


def run(vault: Path, path: Path) -> tuple[float, int]:
    """One PreCompact capture hook process: (seconds, max RSS in MB of that process)."""
    data = {"session_id": "bench-big-session", "transcript_path": str(path), "cwd": "/home/dev/src/shopfront",
            "hook_event_name": "PreCompact", "trigger": "auto"}
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "memvault.interfaces.agents.hook", "capture", "--runtime",
                             "claude-code", "--vault", str(vault)], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env={**os.environ, "MEMVAULT_NO_DAEMON": "1",
                                                            "PYTHONPATH": str(REPO)})
    proc.stdin.write(json.dumps(data).encode())  # type: ignore[union-attr]
    proc.stdin.close()  # type: ignore[union-attr]
    _, _, usage = os.wait4(proc.pid, 0)
    return time.perf_counter() - started, usage.ru_maxrss // 1024


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=200)
    ap.add_argument("--output-kb", type=int, default=20, help="tool output per turn")
    ap.add_argument("--paste-kb", type=int, default=4, help="log pasted into each prompt")
    ap.add_argument("--runs", type=int, default=6, help="at most this many hook runs")
    ap.add_argument("--keep", type=Path, default=None)
    args = ap.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="bench-capture-big-"))
    work.mkdir(parents=True, exist_ok=True)
    path = work / "session.jsonl"
    turns = transcript(path, args.mb, args.output_kb, args.paste_kb)
    print(f"transcript: {path.stat().st_size / 2**20:.0f} MB, {turns} turns")
    vault = work / "vault"
    subprocess.run([sys.executable, "-m", "memvault", "init", str(vault)], check=True, capture_output=True,
                   env={**os.environ, "PYTHONPATH": str(REPO)})
    sys.path.insert(0, str(REPO))
    from memvault import Vault

    size = path.stat().st_size
    for r in range(args.runs):
        wall, rss = run(vault, path)
        stored = sum(1 for _ in Vault.open(vault).episodes.iter(source="agent:claude-code"))
        [cursor] = Vault.open(vault).captures.sessions()
        print(f"run {r + 1}: {wall:.1f} s, max RSS {rss} MB; {stored} episodes stored, the cursor at "
              f"{cursor.offset / 2**20:.0f} of {size / 2**20:.0f} MB" + (" (session cap reached)" if cursor.capped else ""))
        if size - cursor.offset < 64 * 1024:  # the last turn waits for the session's end
            break


if __name__ == "__main__":
    main()
