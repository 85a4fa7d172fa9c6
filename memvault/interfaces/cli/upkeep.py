"""Commands that keep memory healthy: prune, purge, inbox, accept, reject, stale, verify, dedup, expire, ingest."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from ...rules.markup import one_line
from ...rules.errors import InvalidValue
from ...rules.timeutil import age_seconds, age_text, format_time, parse_time
from .base import Out, cli, contradiction_text, echo, output, pass_ctx, warn


# -- lifecycle and trust ------------------------------------------------------------------------------------
def rewrite_lines(report: Any, root: Path, verb: str) -> list[str]:
    lines = [] if report.kinds else ["no episodes"]
    for kind, n in sorted(report.kinds.items()):
        lines.append(f"{kind:<14} kept {n['kept']:>6}  {verb} {n['removed']:>6}  bytes freed {n['bytes_freed']:>9}")
    done = "would delete" if verb.startswith("would") else "deleted"  # a dry run deletes nothing
    lines += [f"{done} {path.relative_to(root)} (empty)" for path in report.files_deleted]
    return lines


ALLOW_SECRET = click.option("--allow-secret", is_flag=True,
                            help="Commit files that hold text that looks like a secret (trusted sources only).")


@cli.command()
@click.option("--dry-run", is_flag=True, help="Report what would be removed; change nothing.")
@click.option("--accept-retention", is_flag=True,
              help="Prune by [retention] as memvault.toml now says where it is shorter than this host has pruned "
                   "by, or than the defaults before its first prune (trusted sources only); without it such a kind "
                   "is kept to the longer age, with a warning.")
@ALLOW_SECRET
@output
@pass_ctx
def prune(ctx, dry_run, accept_retention, allow_secret):
    """Remove episodes older than [retention] allows for their kind (raw 30d, summary 365d, procedure_run 90d
    by default), and their index rows. Prints lines kept and removed and bytes freed per kind. A retention the shared
    memvault.toml shortened is applied only with --accept-retention."""
    report = ctx.vault.prune(dry_run=dry_run, allow_secret=allow_secret, accept_retention=accept_retention,
                             name_removed=False)  # counted per kind: a month of millions of lines
    notes = [f"{report.unreadable} unreadable lines kept (see 'memvault episode list')"] if report.unreadable else []
    return Out({"dry_run": dry_run, **report.to_dict(ctx.vault.root)},
               rewrite_lines(report, ctx.vault.root, "would remove" if dry_run else "removed"),
               notes=notes + report.warnings)


@cli.command()
@click.option("--source", "-s", "pattern", required=True,
              help="The source to purge: exact, or a prefix ending in * (web:*).")
@click.option("--dry-run", is_flag=True, help="Report what would be removed; change nothing.")
@ALLOW_SECRET
@output
@pass_ctx
def purge(ctx, pattern, dry_run, allow_secret):
    """Remove every episode, fact and proposal whose source matches, and their index rows, all or nothing, in one
    commit naming the source, with a record (purges/) that every other host's sync applies to its own lines
    written before it. For the day a source is found to have written poison into memory."""
    report = ctx.vault.purge(pattern, dry_run=dry_run, allow_secret=allow_secret)
    verb = "would remove" if dry_run else "removed"
    lines = [f"{verb} fact {f.key}{' (inbox)' if f.quarantined else ''}: {f.text[:70]}" for f in report.facts]
    lines += [f"{verb} episode {one_line(e.id)} {one_line(e.created_at)}: {' '.join(e.text.split())[:70]}"
              for e in report.episodes.removed]
    proposals = sum(1 for f in report.facts if f.quarantined)
    lines.append(f"{verb} {len(report.facts) - proposals} facts, {proposals} proposals and "
                 f"{len(report.episodes.removed)} episodes from {pattern}"
                 + (f" in commit {report.commit[:12]}" if report.commit else ""))
    return Out({"dry_run": dry_run, **report.to_dict(ctx.vault.root)}, lines, notes=report.warnings)


@cli.command()
@output
@pass_ctx
def inbox(ctx):
    """Facts proposed by untrusted sources, waiting for 'memvault accept' or 'memvault reject'."""
    problems: list = []
    # Grouped by source (a noisy agent's proposals together), oldest first within each: what waits longest shows.
    proposals = sorted(ctx.vault.facts.proposals(problems), key=lambda p: (p[0].source or "", -age_of(p[0])))
    lines = [] if proposals else ["inbox empty"]
    data = []
    for f, exists in proposals:
        if not data or data[-1]["source"] != f.source:
            n = sum(1 for g, _ in proposals if g.source == f.source)
            lines.append(f"from {f.source} ({n} proposal{'s' if n != 1 else ''}):")
        target = f.extra.get("proposes")
        also = f", another proposal for {target}" if target else ""
        contradicts = ctx.vault.facts.contradicts(f)
        age = age_of(f)
        lines += [f"  {f.key}  {age_text(age)} old  ({'changes an existing fact' if exists else 'new'}{also})",
                  f"      {f.text}"]
        lines += [f"      contradicts {c['key']}" + (f": {contradiction_text(c['values'])}" if c["values"] else "")
                  for c in contradicts]
        data.append({**f.to_dict(ctx.vault.root), "changes_existing": exists, "contradicts": contradicts,
                     "age_seconds": round(age), "age": age_text(age)})
    return Out(data, lines, notes=[str(p) for p in problems])


def age_of(fact: Any) -> float:
    """Seconds since the proposal was written (its ``updated``, else ``created``)."""
    return age_seconds(fact.updated or fact.created)


@cli.command()
@output
@pass_ctx
def scopes(ctx):
    """Who may do what: each [scopes] entry of memvault.toml (the paths its sources may read, write, propose and
    review, and where a rule accepts its proposals: auto_accept) and the [trust] patterns. Sources no scope names
    read the whole vault and write as [trust] says."""
    data = ctx.vault.scopes()
    return Out(data, data.pop("summary") + [f"trusted sources: {', '.join(data['trusted'])}"])


def _utc_day(when: str) -> str:
    """The UTC day of a git author date (given in its author's zone), as every other time memvault shows."""
    try:
        return format_time(parse_time(when))[:10]
    except InvalidValue:
        return when[:10]


@cli.command()
@click.argument("key")
@click.option("--source", "-s", help="Who accepts it (must be trusted).")
@pass_ctx
def accept(ctx, key, source):
    """Promote the proposal inbox/KEY.md to facts/KEY.md (one commit)."""
    f = ctx.vault.facts.accept(key, source=source)
    warn(f.warnings)
    echo(f"accepted {f.key} (from {f.source})")


@cli.command()
@click.argument("key")
@click.option("--source", "-s", help="Who rejects it (must be trusted).")
@pass_ctx
def reject(ctx, key, source):
    """Drop the proposal inbox/KEY.md."""
    f = ctx.vault.facts.reject(key, source=source)
    warn(f.warnings)
    echo(f"rejected {key} (from {f.source})")


@cli.command()
@output
@pass_ctx
def stale(ctx):
    """Facts past valid_until, or not updated for longer than review_after, with the reason and the date of
    their last commit. Recall marks them stale; among equally relevant memories a fresh one wins."""
    items = ctx.vault.stale()
    lines = [] if items else ["no stale facts"]
    for item in items:
        last = item["last_commit"]
        when = f"last commit {_utc_day(last['date'])} {last['commit'][:12]}" if last else "never committed"
        lines.append(f"{item['key']}: {item['reason']}; {when}")
    return Out(items, lines)


@cli.command()
@click.argument("key")
@click.option("--source", "-s", help="Who verifies it.")
@ALLOW_SECRET
@pass_ctx
def verify(ctx, key, source, allow_secret):
    """Confirm fact KEY still holds: bump its updated time and commit, clearing review staleness."""
    f = ctx.vault.verify(key, source=source, allow_secret=allow_secret)
    warn(f.warnings)
    echo(f"verified {f.key} (updated {f.to_dict()['updated']})")


@cli.command()
@click.option("--apply", is_flag=True, help="Merge each duplicate group into one fact, in one commit.")
@ALLOW_SECRET
@output
@pass_ctx
def dedup(ctx, apply, allow_secret):
    """Near-duplicate groups and conflicts over the whole vault (keyword Jaccard >= 0.60 with 3+ shared
    keywords; numbers, IPs, ports, dates and versions must agree, else it is a conflict, never merged)."""
    report = ctx.vault.dedup(apply=apply, allow_secret=allow_secret)
    lines = ["duplicates: " + ", ".join(group) for group in report.groups]
    lines += [f"conflict: {c['a']} vs {c['b']} (values {', '.join(c['differing'])})" for c in report.conflicts]
    lines += [f"merged {', '.join(m['merged'])} into {m['into']}" for m in report.merged]
    if not report.groups and not report.conflicts:
        lines.append("no duplicates or conflicts")
    elif report.groups and not apply:
        lines.append("run 'memvault dedup --apply' to merge the duplicate groups (conflicts are never merged)")
    return Out(report.to_dict(), lines, notes=report.warnings)


@cli.command()
@click.option("--apply", is_flag=True, help="Remove the candidates in one commit.")
@output
@pass_ctx
def expire(ctx, apply):
    """Facts below [facts] expire_importance (0.1) that nobody used or recalled for expire_after (120d)."""
    result = ctx.vault.expire(apply=apply)
    lines = [] if result["candidates"] else ["nothing to expire"]
    for c in result["candidates"]:
        lines.append(f"{'removed' if result['commit'] else 'candidate'} {c['key']} (importance {c['importance']:g}, "
                     f"{c['last_used'] or 'never used'})")
    if result["candidates"] and not apply:
        lines.append("run 'memvault expire --apply' to remove them")
    return Out(result, lines, notes=result["warnings"])


@cli.command()
@click.argument("file", type=click.File("rb"))
@click.option("--source", "-s", help="Who is ingesting (the only authority; a candidate's own \"source\" is kept as "
                                     "claimed_source). Default: $MEMVAULT_SOURCE, else user:$USER.")
@click.option("--allow-secret", is_flag=True, help="Do not refuse candidates that look like secrets (trusted).")
@output
@pass_ctx
def ingest(ctx, file, source, allow_secret):
    """Read JSONL candidates ({"type": "fact"|"episode", "text": ..., ...}) from FILE ('-' for stdin), as an
    extractor or LLM step produces them, through trust, secrets and dedup.

    The report names every line and what became of it. The command exits 1 when a line was refused (bad JSON or
    fields, a secret, ...) and nothing else came of the file: no line added, replaced, merged, quarantined or
    proposed as a conflict, none a recall returned. A file whose lines are all already stored (merged) exits 0,
    as does an empty one."""
    report = ctx.vault.ingest(file, source=source, name=getattr(file, "name", "-"), allow_secret=allow_secret)
    data = report.to_dict()
    buckets = {k: v for k, v in data.items() if k != "warnings"}
    lines = ["  ".join(f"{k} {len(v)}" for k, v in buckets.items())]
    for k, items in buckets.items():
        for item in items:
            detail = item.get("reason") or item.get("key") or item.get("into") or item.get("episode") or ""
            extra = f" (conflicts with {item['with']}: {', '.join(item['differing'])})" if "with" in item else ""
            if item.get("proposed"):
                extra += f", waits in {item['proposed']}"
            if item.get("previous"):
                extra += f", the previous text is in commit {item['previous'][:12]}"
            lines.append(f"  {k}: {item['line']} {detail}{extra}")
    notes = report.warnings + [f"{item['line']}: {w}" for items in buckets.values() for item in items
                               for w in item.get("warnings", [])]
    failure = "nothing was stored: every line was refused (see the report)" if report.refused_all() else None
    return Out(data, lines, notes=notes, failure=failure)
