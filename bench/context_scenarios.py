"""Session-start context in a service's repository: does it carry what the session must see, and nothing of the
other services' deploys?

    python bench/context_scenarios.py [--budgets 600,1200,2000] [--hybrid] [--json OUT]

Builds one vault holding several services (bench/context_scenarios.json): each with its deploy facts, where its
data lives, a rollback runbook, a failed deploy yesterday (recorded a different way for each service: an incident
written by a person, a procedure run that exited 1, a captured agent turn, a CI line that names the service only
in its text), older episodes, 30 captured agent turns per service newer than the failure (the chatter that used
to crowd it out), and facts about the other services and the whole platform. Then, for each service, a session
starts in its repository (a git repository whose origin is named for the service) and the context block the
hook would inject is checked:

- **context recall at budget**: the share of must-see items (deploy fact, data location, rollback runbook,
  yesterday's failed deploy) present in the block built under ``[agents] budget`` = each budget given;
- **deploy leak**: whether any other service's deploy fact, deploy or rollback runbook, or deploy episode is in it;
- **size**: the block's characters (Claude Code's hook cap is 10,000) and **health notices** (memvault's own
  warnings: they belong in ``agent status`` and agents.log, not in the model's context).

Keyword mode is what a hook without a warm process builds; ``--hybrid`` uses the packaged model (as the warm
process does).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

DATA = Path(__file__).with_name("context_scenarios.json")
#: What memvault says about itself: never in a model's context (issue 26). Any line of memvault's own but the
#: inbox count and "nothing stored yet", and the phrases its notices use wherever they appear.
HEALTH = re.compile(r"^memvault: (?!\d+ proposals? waits? in the inbox|nothing stored yet)|keyword-only recall|"
                    r"warm process|index was not built|gave up loading|could not be loaded|not searchable|"
                    r"recall failed|no such file", re.I)


@dataclass
class Item:
    service: str
    kind: str      # fact, procedure, episode
    id: str
    must: str | None

    def marker(self) -> str:
        attr = {"fact": "key", "procedure": "name", "episode": "id"}[self.kind]
        return f'{attr}="{self.id}"'

    @property
    def deploy_related(self) -> bool:
        return self.must in ("deploy", "rollback", "failed-deploy") or "deploy" in self.id


@dataclass
class Scenario:
    slug: str
    repo: Path
    items: list[Item] = field(default_factory=list)


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                   env={**os.environ, "GIT_AUTHOR_NAME": "dev", "GIT_AUTHOR_EMAIL": "dev@example.com",
                        "GIT_COMMITTER_NAME": "dev", "GIT_COMMITTER_EMAIL": "dev@example.com"})


def build(base: Path, **vault_options: Any) -> tuple[Any, list[Scenario]]:
    """The shared vault under ``base``/vault and one repository per service under ``base``/src."""
    from memvault import Vault
    from memvault.rules.timeutil import now

    data = json.loads(DATA.read_text(encoding="utf-8"))
    vault = Vault.init(base / "vault", **vault_options)
    at = now()
    for fact in data["general"]:
        vault.facts.set(fact["key"], fact["text"], source="user:dev")
    scenarios: list[Scenario] = []
    chatter = data["chatter"]
    for n, service in enumerate(data["services"]):
        slug = service["slug"]
        repo = base / "src" / slug.replace("-", "_")  # the folder is not the name: the origin is
        repo.mkdir(parents=True)
        _git(repo, "init", "-q", "-b", "main")
        _git(repo, "remote", "add", "origin", service["origin"])
        (repo / "README.md").write_text(service["readme"] + "\n", encoding="utf-8")
        _git(repo, "add", "README.md")
        for subject in service["commits"]:
            _git(repo, "commit", "-q", "--allow-empty", "-m", subject)
        scenario = Scenario(slug, repo)
        for fact in service["facts"]:
            vault.facts.set(fact["key"], fact["text"], tags=fact.get("tags"), source="user:dev")
            scenario.items.append(Item(slug, "fact", fact["key"], fact.get("must")))
        for proc in service["procedures"]:
            script = base / f"{proc['name'].replace('/', '_')}.sh"
            script.write_text(proc["text"], encoding="utf-8")
            script.chmod(0o755)
            vault.procedures.add(proc["name"], script, source="user:dev")
            scenario.items.append(Item(slug, "procedure", proc["name"], proc.get("must")))
        for ep in service["episodes"]:
            meta = {k: (str(repo) if v == "@REPO@" else v) for k, v in (ep.get("meta") or {}).items()}
            e = vault.episodes.append(ep["text"], source=ep["source"], kind=ep["kind"], tags=ep["tags"],
                                      meta=meta or None, at=at - timedelta(hours=ep["hours"]))
            scenario.items.append(Item(slug, "episode", e.id, ep.get("must")))
        low, high = chatter["hours"]
        count = chatter["per_service"]
        for i in range(count):
            hours = high - (high - low) * i / max(1, count - 1)
            text = chatter["text"].format(ask=chatter["asks"][i % len(chatter["asks"])],
                                          done=chatter["dones"][i % len(chatter["dones"])], slug=slug)
            e = vault.episodes.append(text, source="agent:claude-code", kind="raw", tags=["claude-code", slug],
                                      meta={"cwd": str(repo), "session_id": f"s-{slug}-{i // 6}"},
                                      at=at - timedelta(hours=hours, minutes=n))
            scenario.items.append(Item(slug, "episode", e.id, None))
        scenarios.append(scenario)
    vault.reindex()
    return vault, scenarios


def measure(vault: Any, scenarios: list[Scenario], scenario: Scenario, *, mode: str = "keyword") -> dict[str, Any]:
    """What a session starting in ``scenario``'s repository gets, checked against what it must see."""
    from memvault.interfaces.agents.context import build as build_context

    started = time.perf_counter()
    context = build_context(vault, kind="session", cwd=str(scenario.repo), start="startup", mode=mode, log=False)
    ms = (time.perf_counter() - started) * 1000
    text = context.text
    must = [i for i in scenario.items if i.must]
    seen = [i for i in must if i.marker() in text]
    foreign = [i for s in scenarios if s is not scenario for i in s.items if i.marker() in text]
    return {"service": scenario.slug, "must": len(must), "seen": len(seen),
            "missing": [f"{i.must} {i.id}" for i in must if i not in seen],
            "deploy_leak": [f"{i.service} {i.id}" for i in foreign if i.deploy_related],
            "foreign": [f"{i.service} {i.id}" for i in foreign],
            "chars": len(text), "health_notices": [line for line in text.splitlines() if HEALTH.search(line)],
            "notices": context.notices, "ms": round(ms, 1), "text": text}


def run(budgets: list[int], *, hybrid: bool = False) -> list[dict[str, Any]]:
    from memvault import Vault

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        vault, scenarios = build(Path(tmp))
        toml = vault.root / "memvault.toml"
        template = toml.read_text(encoding="utf-8")
        for budget in budgets:
            toml.write_text(re.sub(r"(?m)^budget = \d+", f"budget = {budget}", template), encoding="utf-8")
            v = Vault.open(vault.root, daemon=False)
            results = [measure(v, scenarios, s, mode="hybrid" if hybrid else "keyword") for s in scenarios]
            must = sum(r["must"] for r in results)
            seen = sum(r["seen"] for r in results)
            rows.append({"budget": budget, "mode": "hybrid" if hybrid else "keyword",
                         "context_recall": round(seen / must, 3), "deploy_leaks": sum(bool(r["deploy_leak"])
                                                                                      for r in results),
                         "foreign_items": sum(len(r["foreign"]) for r in results),
                         "max_chars": max(r["chars"] for r in results),
                         "health_notices": sum(len(r["health_notices"]) for r in results),
                         "ms_max": max(r["ms"] for r in results),
                         "services": [{k: v for k, v in r.items() if k != "text"} for r in results]})
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budgets", default="600,1200,2000")
    parser.add_argument("--hybrid", action="store_true", help="meaning-based recall with the packaged model")
    parser.add_argument("--json", dest="json_out", help="write the rows (without the blocks) here")
    args = parser.parse_args(argv)
    rows = run([int(b) for b in args.budgets.split(",")], hybrid=args.hybrid)
    print(f"{'budget':>6}  {'mode':<8} {'recall':>6}  {'leaks':>5}  {'foreign':>7}  {'chars':>5}  {'notices':>7}  ms")
    for row in rows:
        print(f"{row['budget']:>6}  {row['mode']:<8} {row['context_recall']:>6.3f}  {row['deploy_leaks']:>5}  "
              f"{row['foreign_items']:>7}  {row['max_chars']:>5}  {row['health_notices']:>7}  {row['ms_max']:.0f}")
        for s in row["services"]:
            if s["missing"] or s["deploy_leak"]:
                print(f"        {s['service']}: missing {s['missing']}; leaked {s['deploy_leak']}")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(rows, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
