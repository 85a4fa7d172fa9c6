"""Benchmark of the web view under a slow-client flood (2026-12-06 evening): how long its owner waits for a page
while someone who holds no token keeps many connections open, each with a request head never finished (slowloris).

``memvault ui`` runs as its own process on a small vault, with 1024 open files allowed (``--server-fds``: the usual
soft limit of a login). The owner asks ``/facts`` with the token, ``--runs``
times: first with no flood (the baseline of this run), then while ``--flood`` half-open connections are held (opened
as fast as the machine allows, before and while the owner asks). Printed: the owner's median and worst time in each
case and their ratio, how many owner requests failed, and how many flood connections the server still held after
its deadline for a request head (``memvault.interfaces.connections.HEAD_SECONDS``) had passed.

``PYTHONPATH=<a checkout from before the limits>`` measures uvicorn alone the same way (docs/benchmarks.md).

    .venv/bin/python bench/bench_web_flood.py [--flood 2000] [--runs 20] [--server-fds 1024]
"""
from __future__ import annotations

import argparse
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

TOKEN = "bench-flood-token-0123456789abcdef"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start(root: Path, port: int, fds: int) -> subprocess.Popen[bytes]:
    env = {**os.environ, "MEMVAULT_UI_TOKEN": TOKEN, "MEMVAULT_SOURCE": "user:bench"}

    def limit() -> None:  # the server's own limit of open files (1024: the usual soft limit of a login)
        resource.setrlimit(resource.RLIMIT_NOFILE, (fds, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))

    proc = subprocess.Popen([sys.executable, "-m", "memvault", "--vault", str(root), "ui", "--port", str(port)],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, preexec_fn=limit)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return proc
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise SystemExit("bench_web_flood: memvault ui did not start: " + (proc.stderr.read() or b"").decode()[-500:])


def owner(port: int) -> float | None:
    """Seconds for the owner's page, or None when it failed (a 10 s timeout, a refused connection)."""
    request = urllib.request.Request(f"http://127.0.0.1:{port}/facts",
                                     headers={"Authorization": f"Bearer {TOKEN}"})
    started = time.perf_counter()
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            answer.read()
            return time.perf_counter() - started if answer.status == 200 else None
    except (OSError, urllib.error.URLError):
        return None


def half_open(port: int) -> socket.socket | None:
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=2)
        s.sendall(b"GET /facts HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # never finished
        return s
    except OSError:
        return None


def still_open(sockets: list[socket.socket]) -> int:
    n = 0
    for s in sockets:
        s.setblocking(False)
        try:
            n += s.recv(1) != b""  # data would mean an answer; b"" a close
        except BlockingIOError:
            n += 1
        except OSError:
            pass
    return n


def summary(times: list[float | None]) -> tuple[float, float, int]:
    ok = [t for t in times if t is not None]
    return (statistics.median(ok) if ok else float("inf"), max(ok) if ok else float("inf"), len(times) - len(ok))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--flood", type=int, default=2000)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--server-fds", type=int, default=1024, help="the server's limit of open files")
    args = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, args.flood + 256)), hard))
    from memvault import Vault

    try:
        from memvault.interfaces.connections import HEAD_SECONDS
    except ImportError:  # a memvault from before the limits (PYTHONPATH=<an older checkout>), measured the same way
        HEAD_SECONDS = 10.0

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "vault"
        v = Vault.init(root, daemon=False)
        for i in range(50):
            v.facts.set(f"bench/f{i}", f"fact {i}: web{i % 7} serves the shop on port {8000 + i}", source="user:bench")
        port = free_port()
        proc = start(root, port, args.server_fds)
        try:
            owner(port)  # warm-up
            calm = [owner(port) for _ in range(args.runs)]
            flood: list[socket.socket] = []
            opened = time.perf_counter()
            stormy: list[float | None] = []
            for i in range(args.flood):
                s = half_open(port)
                if s is not None:
                    flood.append(s)
                if i % max(1, args.flood // args.runs) == 0:
                    stormy.append(owner(port))
            open_seconds = time.perf_counter() - opened
            while len(stormy) < args.runs:
                stormy.append(owner(port))
            time.sleep(HEAD_SECONDS + 2)
            held = still_open(flood)
            for s in flood:
                s.close()
            alive = proc.poll() is None
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:  # uvicorn alone, out of descriptors, may not even stop
                print("the server did not stop within 10 s of SIGTERM: killed")
                proc.kill()
                proc.wait()
    c_med, c_max, c_fail = summary(calm)
    s_med, s_max, s_fail = summary(stormy)
    print(f"flood: {len(flood)} half-open connections opened in {open_seconds:.1f} s ({args.flood} tried)")
    print("| case | owner median ms | owner worst ms | owner failed | ratio (median to no flood) |")
    print("|---|---|---|---|---|")
    print(f"| no flood (baseline) | {c_med * 1000:.1f} | {c_max * 1000:.1f} | {c_fail} of {len(calm)} | 1.00 |")
    print(f"| {len(flood)} half-open | {s_med * 1000:.1f} | {s_max * 1000:.1f} | {s_fail} of {len(stormy)} | "
          f"{s_med / c_med:.2f} |")
    print(f"flood connections the server still held {HEAD_SECONDS + 2:.0f} s later: {held}; server alive: {alive}")


if __name__ == "__main__":
    main()
