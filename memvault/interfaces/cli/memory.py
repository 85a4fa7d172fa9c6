"""Commands on the three kinds of memory: init, fact, proc, episode."""
from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import click

from ...core.vault import Vault
from ...rules import jsontext
from ...rules.errors import InvalidValue, MemvaultError, describe
from ...rules.fsutil import atomic_write, remove, temp_file
from ...rules.markup import one_line
from ...rules.timeutil import format_time, parse_time, parse_time_or_age
from .base import Out, cli, contradiction_text, echo, output, pass_ctx, read_text_arg, warn


# -- init ----------------------------------------------------------------------------------------------------
@cli.command()
@click.argument("directory", default=".", type=click.Path(file_okay=False))
@click.option("--track-episodes", is_flag=True, help="Commit episodes to git too (default: git-ignored).")
@click.option("--model", metavar="NAME|DIR", help="The embedding model: a name written to memvault.toml, or a "
              "directory of this host (kept in this host's local.toml, in the state directory `memvault stats` "
              "names; never committed). Default: "
              "BAAI/bge-small-en-v1.5.")
def init(directory: str, track_episodes: bool, model: str | None) -> None:
    """Create a vault in DIRECTORY (default: here), with git init when it is not in a git work tree.

    Idempotent: existing files are never overwritten. Says so when the model is not on this machine; when it is,
    prepares it now (a one-time step of up to a minute, shown on stderr) so the first recall does not wait.
    """
    vault = Vault.init(Path(directory), track_episodes=track_episodes, model=model)
    echo(f"vault ready at {vault.root}")
    note = vault.model_note()
    if note:
        echo(f"memvault: note: {note}", err=True)
    else:
        vault.prepare_model(lambda line: echo(f"memvault: {line}", err=True))


# -- facts ---------------------------------------------------------------------------------------------------
@cli.group()
def fact() -> None:
    """Facts: small keyed memories, one markdown file each under facts/."""


def fact_lines(d: dict[str, Any]) -> list[str]:
    head = [d["key"]]
    if d["category"]:
        head.append(f"[{d['category']}]")
    head += [f"importance {d['importance']:g}", f"confidence {d['confidence']:g}"]
    if d["source"]:
        head.append(f"source {d['source']}")
    meta = [f"updated {d['updated']}"]
    if d["tags"]:
        meta.append("tags " + ", ".join(d["tags"]))
    if d["valid_until"]:
        meta.append(f"valid until {d['valid_until']}")
    return ["  ".join(head), "  ".join(meta), "", d["text"]]


def similar_notes(similar: list[dict[str, Any]]) -> list[str]:
    notes = []
    for m in similar:
        if m["kind"] == "conflict":
            differs = contradiction_text(m["values"]) if m.get("values") else ", ".join(m["differing"])
            notes.append(f"conflicts with {m['key']}: same subject, different values ({differs}); both kept, resolve "
                         "by hand (a proposal accepted records that it supersedes it)")
        else:
            notes.append(f"near-duplicate of {m['key']} (keyword Jaccard {m['jaccard']:.2f}); "
                         "'memvault dedup --apply' merges duplicates")
    return notes


@fact.command("set")
@click.argument("key")
@click.argument("text", required=False)
@click.option("--category", "-c", help="Category, e.g. database.")
@click.option("--importance", type=float, help="0..1 (default 0.5).")
@click.option("--confidence", type=float, help="0..1 (default from the source: user 1.0, agent 0.7, other 0.5).")
@click.option("--source", "-s", help="Who states it, <kind>:<name>. Default: $MEMVAULT_SOURCE, else user:$USER.")
@click.option("--tag", "-t", "tags", multiple=True, help="A tag (repeat for several). Replaces the fact's tags.")
@click.option("--valid-until", help="Date after which the fact no longer holds (YYYY-MM-DD).")
@click.option("--allow-secret", is_flag=True, help="Store text even if it looks like a secret (trusted sources).")
@output
@pass_ctx
def fact_set(ctx, key, text, category, importance, confidence, source, tags, valid_until, allow_secret):
    """Create or replace fact KEY with TEXT ('-' or no TEXT: read stdin). Commits the change.

    A source outside [trust] trusted writes a proposal to inbox/ instead (see 'memvault inbox'). Near-duplicates
    and conflicting facts (same words, different numbers) are reported on stderr.
    """
    text = read_text_arg(text, "fact text", (ctx.vault.config.limits.fact_bytes, "fact_bytes"))
    f = ctx.vault.facts.set(key, text, category=category, importance=importance, confidence=confidence,
                            source=source, tags=list(tags) if tags else None, valid_until=valid_until,
                            allow_secret=allow_secret)
    data = {**f.to_dict(ctx.vault.root), "quarantined": f.quarantined, "similar": f.similar, "warnings": f.warnings,
            "auto_accepted": f.auto_accepted}
    rel = f.path.relative_to(ctx.vault.root)
    why = f.proposed_because or f"{f.source} is not a trusted source"
    line = (f"proposed {f.key} in {rel}: {why}; a person runs 'memvault accept {f.key}' to promote it"
            if f.quarantined else f"set {f.key} ({rel})" + (f": accepted by the auto_accept rule {f.auto_accepted!r} "
                                                              "in memvault.toml" if f.auto_accepted else ""))
    return Out(data, [line], notes=similar_notes(f.similar) + f.warnings)


@fact.command("get")
@click.argument("key")
@click.option("--source", "-s", help="Who reads it (its [scopes] apply). Default: $MEMVAULT_SOURCE, else user:$USER.")
@output
@pass_ctx
def fact_get(ctx, key, source):
    """Print fact KEY (counted as a use of it: what recall's frequency factor counts)."""
    f = ctx.vault.fetch_fact(key, source=source)
    d = f.to_dict(ctx.vault.root)
    return Out(d, fact_lines(d), notes=f.warnings)


@fact.command("list")
@click.option("--category", "-c", help="Only facts of this category.")
@click.option("--tag", "-t", help="Only facts with this tag.")
@output
@pass_ctx
def fact_list(ctx, category, tag):
    """List facts. Files that cannot be read are reported on stderr; the rest are listed."""
    problems: list = []
    facts = ctx.vault.facts.list(category=category, tag=tag, problems=problems)
    width = max((len(f.key) for f in facts), default=0)
    lines = []
    for f in facts:
        first = f.text.splitlines()[0] if f.text else ""
        lines.append(f"{f.key:<{width}}  {f.importance:.2f}  {first[:77] + '...' if len(first) > 80 else first}")
    if not facts:  # said on stderr, as episode list does: stdout stays the (empty) listing
        where = (f" in category {category}" if category is not None else "") + (
            f" with tag {tag}" if tag is not None else "")
        echo(one_line(f"memvault: no facts{where or ' yet'}"), err=True)
    return Out([f.to_dict(ctx.vault.root) for f in facts], lines, notes=[str(p) for p in problems])


@fact.command("rm")
@click.argument("key")
@click.option("--source", "-s", help="Who removes it (recorded in the commit).")
@pass_ctx
def fact_rm(ctx, key, source):
    """Remove fact KEY and commit the removal (git keeps its history)."""
    old = ctx.vault.facts.delete(key, source=source)
    warn(old.warnings)
    echo(f"removed {key}")


@fact.command("history")
@click.argument("key")
@output
@pass_ctx
def fact_history(ctx, key):
    """The fact's git log with diffs, newest first."""
    entries = ctx.vault.facts.history(key)
    lines = []
    for e in entries:
        lines += [f"commit {e.commit}", f"Author: {e.author}", f"Date:   {e.date}", ""]
        lines += [f"    {line}" for line in e.message.splitlines()]
        if e.diff:
            lines += ["", e.diff]
        lines.append("")
    return Out([e.__dict__ for e in entries], lines, notes=[] if entries else [f"{key}: no history in git"])


@fact.command("edit")
@click.argument("key")
@click.option("--source", "-s", help="Who edits it (recorded in the commit).")
@pass_ctx
def fact_edit(ctx, key, source):
    """Open $VISUAL/$EDITOR on fact KEY; validate, then commit. The file is untouched until the edit is valid."""
    editor = os.environ.get("VISUAL") or os.environ.get("EDITOR") or "vi"
    tmp = temp_file(prefix=key.replace("/", "_") + ".", suffix=".md")
    keep = False
    edited = False

    def run_editor(text: str) -> str:
        nonlocal edited
        atomic_write(tmp, text.encode("utf-8"), mode=0o600)
        if subprocess.run([*shlex.split(editor), tmp]).returncode != 0:
            raise InvalidValue("EDITOR", f"{editor} failed; nothing changed")
        after = Path(tmp).read_text(encoding="utf-8")
        edited = after != text
        return after

    def again(error: Exception) -> bool:
        nonlocal keep
        echo(f"memvault: {describe(error)[0]}", err=True)
        if sys.stdin.isatty() and click.confirm("Edit again?", default=True):
            return True
        keep = True
        echo(f"memvault: your edit is kept in {tmp}", err=True)
        return False

    try:
        f = ctx.vault.facts.edit(key, run_editor, again=again, source=source)
        if f is not None:
            warn(f.warnings)
        echo("no change" if f is None else f"saved {f.key}")
    except MemvaultError:
        # Any refusal after the editor (a hand edit that cannot be committed first, git, a limit), not only an
        # invalid file: the person's typing is theirs to keep.
        if edited and not keep:
            keep = True
            echo(f"memvault: your edit is kept in {tmp}", err=True)
        raise
    finally:
        if not keep:
            remove(tmp)


# -- procedures ----------------------------------------------------------------------------------------------
@cli.group()
def proc() -> None:
    """Procedures: whole runbooks and scripts under procedures/, always with their git version."""


@proc.command("add")
@click.argument("name")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--force", is_flag=True, help="Replace an existing procedure of that name.")
@click.option("--source", "-s", help="Who adds it (recorded in the commit).")
@click.option("--allow-secret", is_flag=True, help="Store it even if it looks like it holds a secret.")
@pass_ctx
def proc_add(ctx, name, file, force, source, allow_secret):
    """Copy FILE in as procedure NAME and commit it."""
    p = ctx.vault.procedures.add(name, Path(file), force=force, source=source, allow_secret=allow_secret)
    warn(p.warnings)
    echo(f"added {p.name} ({one_line(p.path.relative_to(ctx.vault.root))}) at {p.commit}")


@proc.command("list")
@output
@pass_ctx
def proc_list(ctx):
    """List procedures."""
    problems: list = []
    procs = ctx.vault.procedures.list(problems)
    width = max((len(p.name) for p in procs), default=0)
    lines = [f"{p.name:<{width}}  {p.description or ''}{' (dirty)' if p.dirty else ''}" for p in procs]
    return Out([p.to_dict(ctx.vault.root) for p in procs], lines, notes=[str(p) for p in problems])


@proc.command("show")
@click.argument("name")
@output
@pass_ctx
def proc_show(ctx, name):
    """Print procedure NAME whole, with the commit that last changed it and the blob id of these bytes."""
    p = ctx.vault.procedures.get(name)
    notes = []
    if p.dirty:
        notes.append("the working copy differs from the last commit: this text is not what git recorded")
    # the file's extension is a pulled name's (a line break in it would start a line memvault never wrote)
    echo(f"# procedure {p.name}  ({one_line(p.path.relative_to(ctx.vault.root))})", err=True)
    echo(f"# commit {p.commit or '(never committed)'}  blob {p.blob}", err=True)
    return Out(p.to_dict(ctx.vault.root), [p.text[:-1] if p.text.endswith("\n") else p.text], notes=notes)


@proc.command("run", context_settings={"ignore_unknown_options": True})
@click.argument("name")
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
@click.option("--allow-dirty", is_flag=True, help="Run a file with uncommitted changes (recorded as dirty).")
@click.option("--source", "-s", help="Who runs it (recorded in the episode).")
@pass_ctx
def proc_run(ctx, name, args, allow_dirty, source):
    """Run procedure NAME with ARGS (after --), streaming its output, and record the run as an episode.

    Exits with the procedure's exit code (128 + N when signal N ended it, as a shell says it).
    """
    result = ctx.vault.procedures.run(name, list(args), allow_dirty=allow_dirty, source=source)
    warn(result.episode.warnings)
    code = result.exit_code
    ended = f"exit {code}" if code >= 0 else f"killed by signal {-code}"
    echo(
        f"memvault: recorded run {result.episode.id}: {name} @ {(result.procedure.commit or 'uncommitted')[:12]}"
        f" blob {result.procedure.blob[:12]} {ended} in {result.duration_ms} ms", err=True)
    if code != 0:  # a script a signal ended: 128 + its number, as a shell says it (137: killed, 143: terminated)
        sys.exit(code if 0 < code < 256 else 128 - code if -128 < code < 0 else 1)


# -- episodes ------------------------------------------------------------------------------------------------
@cli.group()
def episode() -> None:
    """Episodes: what happened, append-only JSONL under episodes/."""


@episode.command("add")
@click.argument("text", required=False)
@click.option("--source", "-s", help="Who reports it, <kind>:<name>. Default: $MEMVAULT_SOURCE, else user:$USER.")
@click.option("--kind", "-k", default="raw", show_default=True, help="raw, summary, procedure_run or another word.")
@click.option("--at", "at", help="When it happened (RFC 3339); default now.")
@click.option("--tag", "-t", "tags", multiple=True, help="A tag (repeat for several).")
@click.option("--meta", help="A JSON object of extra fields.")
@click.option("--allow-secret", is_flag=True, help="Store text even if it looks like a secret (trusted sources).")
@click.option("--json", "as_json", is_flag=True, help="Print the episode as its JSON line.")
@pass_ctx
def episode_add(ctx, text, source, kind, at, tags, meta, allow_secret, as_json):
    """Append an episode with TEXT ('-' or no TEXT: read stdin)."""
    text = read_text_arg(text, "episode text", (ctx.vault.config.limits.episode_bytes, "episode_bytes"))
    meta_obj = None
    if meta is not None:
        try:  # too deep, not JSON, NaN, a number of 5,000 digits (Python refuses to read it): one line each
            meta_obj = jsontext.loads(meta, "--meta")
        except InvalidValue as exc:
            raise click.BadParameter(exc.reason, param_hint="--meta") from None
        if not isinstance(meta_obj, dict):
            raise click.BadParameter("must be a JSON object", param_hint="--meta")
    e = ctx.vault.episodes.append(text, source=source, kind=kind, at=parse_time(at, "--at") if at else None,
                                  tags=list(tags), meta=meta_obj, allow_secret=allow_secret)
    warn(e.warnings)
    if as_json:
        echo(json.dumps(e.to_dict(), ensure_ascii=False))
    else:
        echo(f"added {e.id} to {e.path.relative_to(ctx.vault.root)}")


#: Width of a time as `episode list` shows it: UTC to the millisecond (a whole second is padded, not widened, so
#: the columns after it stay put whatever the precision each line was stored with).
TIME_WIDTH = len("2026-01-01T00:00:00.000Z")


def _when(e: Any) -> str:
    try:
        return format_time(e.time)
    except MemvaultError:
        return str(e.created_at)


@episode.command("list")
@click.option("--since", help="From this time, or this long ago (30d, 12h, 2w).")
@click.option("--until", help="Up to this time, or this long ago.")
@click.option("--source", "-s", help="Only this source (a trailing * matches a prefix: web:*).")
@click.option("--kind", "-k", help="Only this kind.")
@click.option("--limit", "-n", type=click.IntRange(min=0), help="Only the newest N.")
@click.option("--json", "as_json", is_flag=True, help="Print each episode as its JSON line, as stored (JSONL).")
@pass_ctx
def episode_list(ctx, since, until, source, kind, limit, as_json):
    """List episodes, oldest first. Unreadable lines are reported on stderr with file and line."""
    problems: list = []
    start = parse_time_or_age(since, "--since") if since else None
    end = parse_time_or_age(until, "--until") if until else None
    if start is not None and end is not None and start > end:  # nothing could match: say so instead of nothing
        raise click.UsageError(f"--since ({since}) is after --until ({until}): swap them")
    items = ctx.vault.episodes.list(since=start, until=end, source=source, kind=kind, limit=limit, problems=problems)
    shown = 0
    for shown, e in enumerate(items, 1):  # streamed line by line: JSONL for agents, one line each for people
        if as_json:
            echo(json.dumps(e.to_dict(), ensure_ascii=False))
        else:
            echo(f"{_when(e):<{TIME_WIDTH}}  {one_line(e.kind):<13} {one_line(e.source):<20} {' '.join(e.text.split())}")
    if not shown and limit != 0:  # said on stderr: stdout stays the (empty) listing
        echo("memvault: no episode matches", err=True)
    warn(problems)
