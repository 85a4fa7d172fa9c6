"""One writer (or reader) of the concurrency storm (tests/test_concurrency_storm.py), run as its own process:
``python storm_worker.py ROLE NAME VAULT REPORT DEADLINE``.

Each role loops until DEADLINE (epoch seconds) doing what one real client of a shared vault does, and appends to
REPORT one JSON line per finished step, flushed at once, so a writer killed with SIGKILL has said exactly what it
had finished: ``{"op": "episode", "id": ...}``, ``{"op": "fact", "key": ..., "text": ...}``, ``{"op": "run",
"argv": ..., "rc": ..., "secs": ..., "err": ...}`` for every command it ran. The CLI roles run the real ``memvault``
command in a fresh process each time, as a person, a timer or an agent hook does.
"""
from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

#: Longest any one command may take before the storm calls it hung.
STEP_LIMIT = 120


class Report:
    def __init__(self, path: str) -> None:
        self.f = open(path, "a", encoding="utf-8")

    def __call__(self, **entry) -> None:
        self.f.write(json.dumps(entry) + "\n")
        self.f.flush()


def cli(report: Report, vault: str, *args: str, stdin: str | None = None, module: str = "memvault") -> subprocess.CompletedProcess:
    argv = [sys.executable, "-m", module, *(["--vault", vault] if module == "memvault" else []), *args]
    start = time.monotonic()
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=STEP_LIMIT, input=stdin)
    except subprocess.TimeoutExpired as e:
        report(op="run", argv=list(args), rc="hung", secs=time.monotonic() - start, err=str(e.stderr or ""))
        raise
    report(op="run", argv=list(args), rc=done.returncode, secs=round(time.monotonic() - start, 3),
           err=done.stderr[-2000:])
    return done


def word(name: str, i: int) -> str:
    """A word found nowhere else in the vault: what recall must find a fact's current text by."""
    return f"qz{name.replace('-', '')}n{i}x"


def api_append(name: str, vault: str, report: Report, deadline: float) -> None:
    from memvault import Vault

    v = Vault.open(vault)
    i = 0
    while time.time() < deadline:
        report(op="intent", text=f"storm {name} line {i} {word(name, i)}")
        ep = v.episodes.append(f"storm {name} line {i} {word(name, i)}", source=f"agent:{name}")
        report(op="episode", id=ep.id, text=ep.text)
        i += 1


def cli_append(name: str, vault: str, report: Report, deadline: float) -> None:
    i = 0
    while time.time() < deadline:
        text = f"storm {name} line {i} {word(name, i)}"
        done = cli(report, vault, "episode", "add", text, "--source", f"agent:{name}", "--json")
        if done.returncode == 0:
            report(op="episode", id=json.loads(done.stdout)["id"], text=text)
        i += 1


def cli_fact(name: str, vault: str, report: Report, deadline: float) -> None:
    """``memvault fact set`` on three keys of its own and one every setter shares."""
    i = 0
    while time.time() < deadline:
        key = "storm/shared" if i % 4 == 3 else f"storm/{name}/k{i % 3}"
        text = f"{name} wrote round {i} {word(name, i)}"
        report(op="intent", key=key, text=text)
        done = cli(report, vault, "fact", "set", key, text, "--source", f"user:{name}")
        if done.returncode == 0:
            report(op="fact", key=key, text=text)
        i += 1


def api_fact(name: str, vault: str, report: Report, deadline: float) -> None:
    """Facts through the Python API; a name ``kv<n>`` (a writer the storm kills and starts again) writes the keys of
    ``kv`` and numbers its rounds from n * 10000, so each incarnation's words are its own."""
    from memvault import Vault

    v = Vault.open(vault)
    owner, i = (name, 0) if not name.startswith("kv") else ("kv", int(name[2:]) * 10000)
    while time.time() < deadline:
        key = f"storm/{owner}/k{i % 3}"
        text = f"{name} wrote round {i} {word(name, i)}"
        report(op="intent", key=key, text=text)
        v.facts.set(key, text, source=f"user:{name}")
        report(op="fact", key=key, text=text)
        i += 1


def hand(name: str, vault: str, report: Report, deadline: float) -> None:
    """A person in an editor: the text of facts/hand/<name>-k*.md replaced by a temp file renamed over it (vim,
    sed -i); memvault commits it at the next sync."""
    root = Path(vault)
    i = 0
    while time.time() < deadline:
        key = f"hand/{name}-k{i % 2}"
        path = root / "facts" / f"{key}.md"
        head, _, _ = path.read_text().rpartition("---\n")
        text = f"{name} edited by hand round {i} {word(name, i)}"
        tmp = root.parent / f".{name}.edit"
        tmp.write_text(f"{head}---\n{text}\n")
        os.replace(tmp, path)
        report(op="fact", key=key, text=text)
        i += 1
        time.sleep(0.3)


def host(name: str, vault: str, report: Report, deadline: float) -> None:
    """Another host's clone of the vault: ``fact set`` on keys of its own and ``sync`` after each, a last sync
    after the deadline so everything it wrote is pushed."""
    i = 0
    while time.time() < deadline:
        key, text = f"storm/{name}/k{i % 2}", f"{name} wrote round {i} {word(name, i)}"
        report(op="intent", key=key, text=text)
        if cli(report, vault, "fact", "set", key, text, "--source", f"user:{name}").returncode == 0:
            report(op="fact", key=key, text=text)
        cli(report, vault, "sync", "--json")
        i += 1
    cli(report, vault, "sync", "--json")


def timer(args: list[str], pause: float):
    def run(name: str, vault: str, report: Report, deadline: float) -> None:
        while time.time() < deadline:
            cli(report, vault, *args)
            time.sleep(pause)
    return run


def reindexer(name: str, vault: str, report: Report, deadline: float) -> None:
    i = 0
    while time.time() < deadline:
        cli(report, vault, "reindex", *(["--full"] if i % 2 else []))
        i += 1


def reader(name: str, vault: str, report: Report, deadline: float) -> None:
    """Agent hooks at session start and per prompt, and recall, each a fresh process as a runtime starts it."""
    hook = ["memvault.interfaces.agents.hook"]
    i = 0
    while time.time() < deadline:
        if i % 3 == 0:
            cli(report, vault, "recall", "storm shared wrote round", "--json")
        elif i % 3 == 1:
            cli(report, vault, "session-start", "--runtime", "claude-code", "--vault", vault, module=hook[0],
                stdin=json.dumps({"hook_event_name": "SessionStart", "cwd": vault, "session_id": f"s{i}",
                                  "source": "startup"}))
        else:
            cli(report, vault, "prompt", "--runtime", "claude-code", "--vault", vault, module=hook[0],
                stdin=json.dumps({"hook_event_name": "UserPromptSubmit", "cwd": vault, "session_id": f"s{i}",
                                  "prompt": "what did the storm write to the shared fact?"}))
        i += 1


def mcp(name: str, vault: str, report: Report, deadline: float) -> None:
    """An agent session on memvault's own MCP server (stdio) as agent:<name>: facts under storm/<name>/,
    episodes, recall; every tool error is reported."""
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters, stdio_client

    params = StdioServerParameters(command=sys.executable, env=dict(os.environ),
                                   args=["-m", "memvault.mcp_server", "--vault", vault, "--source", f"agent:{name}"])

    async def go() -> None:
        with open(Path(report.f.name).with_suffix(".stderr"), "w") as errlog:
            async with Client(stdio_client(params, errlog=errlog)) as client:
                i = 0
                while i < 2 or time.time() < deadline:  # two rounds at least: a short storm ends while it starts
                    key, text = f"storm/{name}/k{i % 2}", f"{name} wrote round {i} {word(name, i)}"
                    for tool, arguments in (("set_fact", {"key": key, "text": text}),
                                            ("log_episode", {"text": f"storm {name} line {i} {word(name, i)}"}),
                                            ("recall", {"query": f"{name} wrote round"})):
                        start = time.monotonic()
                        result = await client.call_tool(tool, arguments)
                        body = "".join(getattr(c, "text", "") for c in result.content)
                        report(op="run", argv=["mcp", tool], rc=1 if result.is_error else 0,
                               secs=round(time.monotonic() - start, 3), err=body[-2000:] if result.is_error else "")
                        if result.is_error:
                            continue
                        if tool == "set_fact":
                            report(op="fact", key=key, text=text)
                        elif tool == "log_episode":
                            report(op="episode", id=json.loads(body)["id"], text=arguments["text"])
                    # the other session's facts: never written from here; mcp-b may not even read them
                    other = "mcp-b" if name == "mcp-a" else "mcp-a"
                    result = await client.call_tool("set_fact", {"key": f"storm/{other}/k0", "text": f"{name} was here"})
                    report(op="refused" if result.is_error else "leak", what=f"set_fact storm/{other}/k0")
                    if name == "mcp-b":
                        result = await client.call_tool("recall", {"query": f"{other} wrote round", "k": 20})
                        body = json.loads("".join(getattr(c, "text", "") for c in result.content))
                        seen = [h["id"] for h in body.get("hits", []) if not h["id"].startswith(("storm/mcp-b/", "01"))]
                        if seen:
                            report(op="leak", what=f"recall returned {seen}")
                    i += 1

    asyncio.run(go())


ROLES = {
    "api-append": api_append, "cli-append": cli_append, "cli-fact": cli_fact, "api-fact": api_fact, "hand": hand,
    "sync": timer(["sync", "--json"], 0.5), "prune": timer(["prune", "--json"], 1.0), "reindex": reindexer,
    "reader": reader, "mcp": mcp, "host": host,
}


if __name__ == "__main__":
    role, name, vault, report_path, deadline = sys.argv[1:6]
    ROLES[role](name, vault, Report(report_path), float(deadline))
