"""The ``memvault`` command: a thin layer over :class:`memvault.Vault`.

Each command parses its flags, gets the vault from the context, calls one library method and prints. Errors
from the library become one line on stderr and exit code 1 in :func:`main`, the only place that does so.
"""
from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

import click

from .errors import FactParseError, InvalidValue, MemvaultError
from .timeutil import parse_time, parse_time_or_age
from .vault import Vault


class Context:
    """Resolves the vault once, on first use (``init`` needs none)."""

    def __init__(self, vault_path: str | None) -> None:
        self.vault_path = vault_path
        self._vault: Vault | None = None

    @property
    def vault(self) -> Vault:
        if self._vault is None:
            self._vault = Vault.open(self.vault_path)
        return self._vault


pass_ctx = click.make_pass_decorator(Context)


def emit_json(data) -> None:
    click.echo(json.dumps(data, ensure_ascii=False, indent=2))


def warn_problems(problems) -> None:
    for problem in problems:
        click.echo(f"memvault: warning: {problem}", err=True)


def read_text_arg(text: str | None, what: str) -> str:
    """TEXT, or stdin when TEXT is '-' or missing and stdin is not a terminal."""
    if text is None or text == "-":
        if text is None and sys.stdin.isatty():
            raise click.UsageError(f"give the {what} as an argument, or '-' to read it from stdin")
        return sys.stdin.read()
    return text


class Failure(click.ClickException):
    """A library error on its way out: one line on stderr, and its exit code."""

    def __init__(self, error: MemvaultError) -> None:
        super().__init__(str(error))
        self.exit_code = error.exit_code

    def show(self, file=None) -> None:
        click.echo(f"memvault: error: {self.message}", err=True)


class Group(click.Group):
    """Turns every :class:`MemvaultError` into a :class:`Failure`: the one place errors become exits."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except MemvaultError as exc:
            raise Failure(exc) from None
        except OSError as exc:
            if isinstance(exc, BrokenPipeError):
                raise
            where = f"{exc.filename}: " if exc.filename else ""
            raise Failure(MemvaultError(f"{where}{exc.strerror or exc}")) from None


json_option = click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")


@click.group(cls=Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--vault",
    "vault_path",
    metavar="PATH",
    envvar="MEMVAULT_DIR",
    show_envvar=True,
    help="The vault directory. Default: the nearest parent of the current directory holding memvault.toml.",
)
@click.version_option(package_name="memvault")
@click.pass_context
def cli(ctx: click.Context, vault_path: str | None) -> None:
    """memvault: a file-first memory vault for AI agents.

    Facts (keyed markdown files), procedures (whole runbooks) and episodes (append-only JSONL) in a git
    repository that people can read, correct and audit.
    """
    ctx.obj = Context(vault_path)


# -- init ----------------------------------------------------------------------------------------------------
@cli.command()
@click.argument("directory", default=".", type=click.Path(file_okay=False))
@click.option("--track-episodes", is_flag=True, help="Commit episodes to git too (default: git-ignored).")
def init(directory: str, track_episodes: bool) -> None:
    """Create a vault in DIRECTORY (default: here), with git init when it is not in a git work tree.

    Idempotent: existing files are never overwritten.
    """
    vault = Vault.init(Path(directory), track_episodes=track_episodes)
    click.echo(f"vault ready at {vault.root}")


# -- facts ---------------------------------------------------------------------------------------------------
@cli.group()
def fact() -> None:
    """Facts: small keyed memories, one markdown file each under facts/."""


def print_fact(f, root: Path) -> None:
    d = f.to_dict(root)
    head = [d["key"]]
    if d["category"]:
        head.append(f"[{d['category']}]")
    head.append(f"importance {d['importance']:g}")
    head.append(f"confidence {d['confidence']:g}")
    if d["source"]:
        head.append(f"source {d['source']}")
    click.echo("  ".join(head))
    meta = [f"updated {d['updated']}"]
    if d["tags"]:
        meta.append("tags " + ", ".join(d["tags"]))
    if d["valid_until"]:
        meta.append(f"valid until {d['valid_until']}")
    click.echo("  ".join(meta))
    click.echo()
    click.echo(d["text"])


@fact.command("set")
@click.argument("key")
@click.argument("text", required=False)
@click.option("--category", "-c", help="Category, e.g. database.")
@click.option("--importance", type=float, help="0..1 (default 0.5).")
@click.option("--confidence", type=float, help="0..1 (default from the source: user 1.0, agent 0.7, other 0.5).")
@click.option("--source", "-s", help="Who states it, <kind>:<name>. Default: $MEMVAULT_SOURCE, else user:$USER.")
@click.option("--tag", "-t", "tags", multiple=True, help="A tag (repeat for several). Replaces the fact's tags.")
@click.option("--valid-until", help="Date after which the fact no longer holds (YYYY-MM-DD).")
@click.option("--allow-secret", is_flag=True, help="Store text even if it looks like a secret.")
@json_option
@pass_ctx
def fact_set(ctx, key, text, category, importance, confidence, source, tags, valid_until, allow_secret, as_json):
    """Create or replace fact KEY with TEXT ('-' or no TEXT: read stdin). Commits the change.

    A source outside [trust] trusted writes a proposal to inbox/ instead (see 'memvault inbox'). Near-duplicates
    and conflicting facts (same words, different numbers) are reported on stderr.
    """
    from .lifecycle import similar_facts

    text = read_text_arg(text, "fact text")
    similar = similar_facts(ctx.vault, key, text)
    f = ctx.vault.facts.set(
        key,
        text,
        category=category,
        importance=importance,
        confidence=confidence,
        source=source,
        tags=list(tags) if tags else None,
        valid_until=valid_until,
        allow_secret=allow_secret,
    )
    for m in similar:
        if m["kind"] == "conflict":
            click.echo(f"memvault: warning: conflicts with {m['key']}: same subject, different values "
                       f"({', '.join(m['differing'])}); both kept, resolve by hand", err=True)
        else:
            click.echo(f"memvault: warning: near-duplicate of {m['key']} (keyword Jaccard {m['jaccard']:.2f}); "
                       "'memvault dedup --apply' merges duplicates", err=True)
    if as_json:
        data = f.to_dict(ctx.vault.root)
        data["quarantined"] = f.quarantined
        data["similar"] = similar
        emit_json(data)
    elif f.quarantined:
        click.echo(f"proposed {f.key} in {f.path.relative_to(ctx.vault.root)}: {f.source} is not a trusted source; "
                   f"a person runs 'memvault accept {f.key}' to promote it")
    else:
        click.echo(f"set {f.key} ({f.path.relative_to(ctx.vault.root)})")


@fact.command("get")
@click.argument("key")
@json_option
@pass_ctx
def fact_get(ctx, key, as_json):
    """Print fact KEY."""
    f = ctx.vault.facts.get(key)
    if as_json:
        emit_json(f.to_dict(ctx.vault.root))
    else:
        print_fact(f, ctx.vault.root)


@fact.command("list")
@click.option("--category", "-c", help="Only facts of this category.")
@click.option("--tag", "-t", help="Only facts with this tag.")
@json_option
@pass_ctx
def fact_list(ctx, category, tag, as_json):
    """List facts. Files that cannot be read are reported on stderr; the rest are listed."""
    problems: list = []
    facts = ctx.vault.facts.list(category=category, tag=tag, problems=problems)
    if as_json:
        emit_json([f.to_dict(ctx.vault.root) for f in facts])
    else:
        width = max((len(f.key) for f in facts), default=0)
        for f in facts:
            first = f.text.splitlines()[0] if f.text else ""
            if len(first) > 80:
                first = first[:77] + "..."
            click.echo(f"{f.key:<{width}}  {f.importance:.2f}  {first}")
    warn_problems(problems)


@fact.command("rm")
@click.argument("key")
@click.option("--source", "-s", help="Who removes it (recorded in the commit).")
@pass_ctx
def fact_rm(ctx, key, source):
    """Remove fact KEY and commit the removal (git keeps its history)."""
    ctx.vault.facts.delete(key, source=source)
    click.echo(f"removed {key}")


@fact.command("history")
@click.argument("key")
@json_option
@pass_ctx
def fact_history(ctx, key, as_json):
    """The fact's git log with diffs, newest first."""
    entries = ctx.vault.facts.history(key)
    if as_json:
        emit_json([e.__dict__ for e in entries])
        return
    if not entries:
        click.echo(f"{key}: no history in git", err=True)
    for e in entries:
        click.echo(f"commit {e.commit}\nAuthor: {e.author}\nDate:   {e.date}\n")
        for line in e.message.splitlines():
            click.echo(f"    {line}")
        if e.diff:
            click.echo()
            click.echo(e.diff)
        click.echo()


NEW_FACT_TEMPLATE = """---
category:
importance: 0.5
tags: []
---
"""


@fact.command("edit")
@click.argument("key")
@click.option("--source", "-s", help="Who edits it (recorded in the commit).")
@pass_ctx
def fact_edit(ctx, key, source):
    """Open $EDITOR on fact KEY; validate, then commit. The file is untouched until the edit is valid."""
    vault = ctx.vault
    path = vault.facts.path_for(key)
    original = path.read_text(encoding="utf-8") if path.is_file() else NEW_FACT_TEMPLATE
    editor = os.environ.get("VISUAL") or os.environ.get("EDITOR") or "vi"
    fd, tmp = tempfile.mkstemp(prefix=key.replace("/", "_") + ".", suffix=".md")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(original)
        while True:
            result = subprocess.run([*shlex.split(editor), tmp])
            if result.returncode != 0:
                raise InvalidValue("EDITOR", f"{editor} exited with {result.returncode}; nothing changed")
            edited = Path(tmp).read_text(encoding="utf-8")
            if edited == original:
                click.echo("no change")
                return
            try:
                f = vault.facts.write_text(key, edited, source=source)
                break
            except FactParseError as exc:
                where = f"line {exc.line}: " if exc.line else ""
                click.echo(f"memvault: {where}{exc.reason}", err=True)
                if not sys.stdin.isatty() or not click.confirm("Edit again?", default=True):
                    raise FactParseError(path, exc.reason + f" (your edit is kept in {tmp})", exc.line) from None
        click.echo(f"saved {f.key}")
    except FactParseError:
        raise
    except BaseException:
        os.unlink(tmp)
        raise
    else:
        os.unlink(tmp)


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
    click.echo(f"added {p.name} ({p.path.relative_to(ctx.vault.root)}) at {p.commit}")


@proc.command("list")
@json_option
@pass_ctx
def proc_list(ctx, as_json):
    """List procedures."""
    procs = ctx.vault.procedures.list()
    if as_json:
        emit_json([p.to_dict(ctx.vault.root) for p in procs])
        return
    width = max((len(p.name) for p in procs), default=0)
    for p in procs:
        flag = " (dirty)" if p.dirty else ""
        click.echo(f"{p.name:<{width}}  {p.description or ''}{flag}")


@proc.command("show")
@click.argument("name")
@json_option
@pass_ctx
def proc_show(ctx, name, as_json):
    """Print procedure NAME whole, with the commit that last changed it and the blob id of these bytes."""
    p = ctx.vault.procedures.get(name)
    if as_json:
        emit_json(p.to_dict(ctx.vault.root))
        return
    click.echo(f"# procedure {p.name}  ({p.path.relative_to(ctx.vault.root)})", err=True)
    click.echo(f"# commit {p.commit or '(never committed)'}  blob {p.blob}", err=True)
    if p.dirty:
        click.echo("# the working copy differs from the last commit: this text is not what git recorded", err=True)
    click.echo(p.text, nl=not p.text.endswith("\n"))


@proc.command("run", context_settings={"ignore_unknown_options": True})
@click.argument("name")
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
@click.option("--allow-dirty", is_flag=True, help="Run a file with uncommitted changes (recorded as dirty).")
@click.option("--source", "-s", help="Who runs it (recorded in the episode).")
@pass_ctx
def proc_run(ctx, name, args, allow_dirty, source):
    """Run procedure NAME with ARGS (after --), streaming its output, and record the run as an episode.

    Exits with the procedure's exit code.
    """
    result = ctx.vault.procedures.run(name, list(args), allow_dirty=allow_dirty, source=source)
    click.echo(
        f"memvault: recorded run {result.episode.id}: {name} @ {(result.procedure.commit or 'uncommitted')[:12]}"
        f" blob {result.procedure.blob[:12]} exit {result.exit_code} in {result.duration_ms} ms",
        err=True,
    )
    if result.exit_code != 0:
        sys.exit(result.exit_code if 0 < result.exit_code < 256 else 1)


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
@click.option("--allow-secret", is_flag=True, help="Store text even if it looks like a secret.")
@json_option
@pass_ctx
def episode_add(ctx, text, source, kind, at, tags, meta, allow_secret, as_json):
    """Append an episode with TEXT ('-' or no TEXT: read stdin)."""
    text = read_text_arg(text, "episode text")
    meta_obj = None
    if meta is not None:
        try:
            meta_obj = json.loads(meta)
        except json.JSONDecodeError as exc:
            raise click.BadParameter(f"not valid JSON: {exc.msg}", param_hint="--meta") from None
        if not isinstance(meta_obj, dict):
            raise click.BadParameter("must be a JSON object", param_hint="--meta")
    e = ctx.vault.episodes.append(
        text, source=source, kind=kind, at=parse_time(at, "--at") if at else None, tags=list(tags), meta=meta_obj,
        allow_secret=allow_secret,
    )
    if as_json:
        click.echo(json.dumps(e.to_dict(), ensure_ascii=False))
    else:
        click.echo(f"added {e.id} to {e.path.relative_to(ctx.vault.root)}")


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
    items = ctx.vault.episodes.list(
        since=parse_time_or_age(since, "--since") if since else None,
        until=parse_time_or_age(until, "--until") if until else None,
        source=source,
        kind=kind,
        limit=limit,
        problems=problems,
    )
    for e in items:
        if as_json:
            click.echo(json.dumps(e.to_dict(), ensure_ascii=False))
        else:
            text = " ".join(e.text.split())
            click.echo(f"{e.created_at}  {e.kind:<13} {e.source:<20} {text}")
    warn_problems(problems)


# -- index and recall ----------------------------------------------------------------------------------------
@cli.command()
@click.argument("query")
@click.option("-k", "k", type=click.IntRange(min=1), default=10, show_default=True, help="How many memories.")
@click.option("--kind", "kinds", multiple=True, type=click.Choice(["fact", "episode", "procedure"]),
              help="Only these kinds (repeat for several).")
@click.option("--budget", type=click.IntRange(min=1), help="Keep the best hits that fit this many tokens (≈ chars/4).")
@click.option("--format", "fmt", type=click.Choice(["text", "json", "prompt"]), help="Output format (default text).")
@click.option("--json", "as_json", is_flag=True, help="Same as --format json.")
@click.option("--explain", is_flag=True, help="Show the five factors and their weights per hit.")
@click.option("--mode", type=click.Choice(["hybrid", "keyword", "vector"]), default="hybrid", show_default=True,
              help="Candidates from both searches, or one.")
@click.option("--no-record", is_flag=True, help="Do not count this recall in the access statistics.")
@pass_ctx
def recall(ctx, query, k, kinds, budget, fmt, as_json, explain, mode, no_record):
    """Find the memories that best answer QUERY: hybrid keyword + semantic search over facts, episodes and
    procedures, ranked by relevance, importance, confidence, recency and frequency.

    The index is brought in step with the files first, so an edited or deleted memory never comes back stale.
    Warnings (a model change, a model that cannot load) go to stderr; results still come.
    """
    from .config import recall_settings
    from .recall import render

    fmt = "json" if as_json else (fmt or "text")
    vault = ctx.vault
    vault.use_daemon = True  # a short-lived process: ask the warm embedder rather than import torch
    result = vault.recall(query, k=k, kinds=list(kinds) or None, budget=budget, mode=mode, fmt=fmt,
                          record_access=not no_record)
    for warning in result.warnings:
        click.echo(f"memvault: warning: {warning}", err=True)
    weights = recall_settings(vault.config).weights if explain else None
    click.echo(render(result, fmt, explain=explain, weights=weights))


@cli.command()
@click.option("--model", help="Set [embedding] model in memvault.toml (committed) and rebuild for it.")
@click.option("--full", is_flag=True, help="Rebuild the whole index even if the model did not change.")
@click.option("--dry-run", is_flag=True, help="Print what a full rebuild would cost (items, tokens, time, disk).")
@json_option
@pass_ctx
def reindex(ctx, model, full, dry_run, as_json):
    """Bring the index in step with the vault's files.

    Incremental: new and changed text is embedded, unchanged items are only checked (by stat, then hash), and
    rows whose file is gone are dropped; the model is loaded only when there is text to embed. When the
    configured model differs from the index's, the index is rebuilt beside the old one and swapped in
    atomically, so recall keeps working meanwhile.
    """
    vault = ctx.vault
    if dry_run:
        from .stats import estimate_rebuild

        estimate = estimate_rebuild(vault, model=model)
        if as_json:
            emit_json(estimate)
        else:
            for line in estimate["summary"]:
                click.echo(line)
        return
    bar = None

    def show_progress(done, total):
        nonlocal bar
        if bar is None:
            bar = click.progressbar(length=total, label="embedding", file=sys.stderr)
            bar.__enter__()
        bar.update(done - bar.pos)

    progress = show_progress if not as_json and sys.stderr.isatty() else None  # a bar only on a terminal
    try:
        report = vault.reindex(model=model, full=full, progress=progress)
    finally:
        if bar is not None:
            bar.__exit__(None, None, None)
    for warning in report.warnings:
        click.echo(f"memvault: warning: {warning}", err=True)
    for problem in report.problems:
        click.echo(f"memvault: warning: {problem}", err=True)
    if as_json:
        emit_json(report.to_dict())
        return
    if not report.changed:
        click.echo(f"index up to date ({report.files_seen} files checked in {report.seconds:.2f} s)")
        return
    click.echo(
        f"indexed {report.files_changed} changed and {report.files_removed} removed files in {report.seconds:.2f} s: "
        f"{report.docs_added} added, {report.docs_changed} changed, {report.docs_removed} removed, "
        f"{report.metadata_only} unchanged; {report.chunks_embedded} chunks embedded"
        + (f", {report.chunks_pending} pending" if report.chunks_pending else "")
    )


@cli.command()
@json_option
@pass_ctx
def stats(ctx, as_json):
    """Items per kind, index size, bytes per vector row against 4·dims, the model, the projected size at 100k
    rows, and episode lines and bytes per month file."""
    from .stats import vault_stats

    data = vault_stats(ctx.vault)
    if as_json:
        emit_json(data)
        return
    for line in data["summary"]:
        click.echo(line)


# -- lifecycle and trust ------------------------------------------------------------------------------------
def print_rewrite(report, root, verb: str) -> None:
    if not report.kinds:
        click.echo("no episodes")
    for kind, n in sorted(report.kinds.items()):
        click.echo(f"{kind:<14} kept {n['kept']:>6}  {verb} {n['removed']:>6}  bytes freed {n['bytes_freed']:>9}")
    for path in report.files_deleted:
        click.echo(f"deleted {path.relative_to(root)} (empty)")
    if report.unreadable:
        click.echo(f"{report.unreadable} unreadable lines kept (see 'memvault episode list')", err=True)


@cli.command()
@click.option("--dry-run", is_flag=True, help="Report what would be removed; change nothing.")
@json_option
@pass_ctx
def prune(ctx, dry_run, as_json):
    """Remove episodes older than [retention] allows for their kind (raw 30d, summary 365d, procedure_run 90d
    by default), and their index rows. Prints lines kept and removed and bytes freed per kind."""
    from .lifecycle import prune as run_prune

    report = run_prune(ctx.vault, dry_run=dry_run)
    if as_json:
        emit_json({"dry_run": dry_run, **report.to_dict(ctx.vault.root)})
    else:
        print_rewrite(report, ctx.vault.root, "would remove" if dry_run else "removed")


@cli.command()
@click.option("--source", "-s", required=True, help="The source to purge: exact, or a prefix ending in * (web:*).")
@click.option("--dry-run", is_flag=True, help="Report what would be removed; change nothing.")
@json_option
@pass_ctx
def purge(ctx, source, dry_run, as_json):
    """Remove every episode and fact whose source matches, and their index rows; the fact removals are one
    commit naming the source. For the day a source is found to have written poison into memory."""
    from .lifecycle import purge as run_purge

    report = run_purge(ctx.vault, source, dry_run=dry_run)
    if as_json:
        emit_json({"dry_run": dry_run, **report.to_dict(ctx.vault.root)})
        return
    verb = "would remove" if dry_run else "removed"
    for f in report.facts:
        click.echo(f"{verb} fact {f.key}{' (inbox)' if f.quarantined else ''}: {f.text[:70]}")
    for e in report.episodes.removed:
        click.echo(f"{verb} episode {e.id} {e.created_at}: {' '.join(e.text.split())[:70]}")
    click.echo(f"{verb} {len(report.facts)} facts and {len(report.episodes.removed)} episodes from {source}"
               + (f" in commit {report.commit[:12]}" if report.commit else ""))


@cli.command()
@json_option
@pass_ctx
def inbox(ctx, as_json):
    """Facts proposed by untrusted sources, waiting for 'memvault accept' or 'memvault reject'."""
    problems: list = []
    facts = ctx.vault.facts.inbox(problems)
    if as_json:
        emit_json([f.to_dict(ctx.vault.root) for f in facts])
    else:
        if not facts:
            click.echo("inbox empty")
        for f in facts:
            exists = ctx.vault.facts.exists(f.key)
            click.echo(f"{f.key}  from {f.source}  ({'changes an existing fact' if exists else 'new'})")
            click.echo(f"    {f.text}")
    warn_problems(problems)


@cli.command()
@click.argument("key")
@click.option("--source", "-s", help="Who accepts it (must be trusted).")
@pass_ctx
def accept(ctx, key, source):
    """Promote the proposal inbox/KEY.md to facts/KEY.md (one commit)."""
    f = ctx.vault.facts.accept(key, source=source)
    click.echo(f"accepted {f.key} (from {f.source})")


@cli.command()
@click.argument("key")
@click.option("--source", "-s", help="Who rejects it (must be trusted).")
@pass_ctx
def reject(ctx, key, source):
    """Drop the proposal inbox/KEY.md (committed, so history keeps what was proposed)."""
    f = ctx.vault.facts.reject(key, source=source)
    click.echo(f"rejected {key} (from {f.source})")


@cli.command()
@json_option
@pass_ctx
def stale(ctx, as_json):
    """Facts past valid_until, or not updated for longer than review_after, with the reason and the date of
    their last commit. Recall marks them stale and ranks them down."""
    from .lifecycle import stale as find_stale

    items = find_stale(ctx.vault)
    if as_json:
        emit_json(items)
        return
    if not items:
        click.echo("no stale facts")
    for item in items:
        last = item["last_commit"]
        when = f"last commit {last['date'][:10]} {last['commit'][:12]}" if last else "never committed"
        click.echo(f"{item['key']}: {item['reason']}; {when}")


@cli.command()
@click.argument("key")
@click.option("--source", "-s", help="Who verifies it.")
@pass_ctx
def verify(ctx, key, source):
    """Confirm fact KEY still holds: bump its updated time and commit, clearing review staleness."""
    from .lifecycle import verify as run_verify

    f = run_verify(ctx.vault, key, source=source)
    click.echo(f"verified {f.key} (updated {f.to_dict()['updated']})")


@cli.command()
@click.option("--apply", is_flag=True, help="Merge each duplicate group into one fact, in one commit.")
@json_option
@pass_ctx
def dedup(ctx, apply, as_json):
    """Near-duplicate groups and conflicts over the whole vault (keyword Jaccard >= 0.60 with 3+ shared
    keywords; numbers, IPs, ports, dates and versions must agree, else it is a conflict, never merged)."""
    from .lifecycle import dedup as run_dedup

    report = run_dedup(ctx.vault, apply=apply)
    if as_json:
        emit_json(report.to_dict())
        return
    for group in report.groups:
        click.echo("duplicates: " + ", ".join(group))
    for c in report.conflicts:
        click.echo(f"conflict: {c['a']} vs {c['b']} (values {', '.join(c['differing'])})")
    for m in report.merged:
        click.echo(f"merged {', '.join(m['merged'])} into {m['into']}")
    if not report.groups and not report.conflicts:
        click.echo("no duplicates or conflicts")
    elif report.groups and not apply:
        click.echo("run 'memvault dedup --apply' to merge the duplicate groups (conflicts are never merged)")


@cli.command()
@click.option("--apply", is_flag=True, help="Remove the candidates in one commit.")
@json_option
@pass_ctx
def expire(ctx, apply, as_json):
    """Facts below [facts] expire_importance (0.1) that recall has not returned for expire_after (120d)."""
    from .lifecycle import expire as run_expire

    result = run_expire(ctx.vault, apply=apply)
    if as_json:
        emit_json(result)
        return
    if not result["candidates"]:
        click.echo("nothing to expire")
    for c in result["candidates"]:
        last = c["last_recalled"] or "never recalled"
        click.echo(f"{'removed' if result['commit'] else 'candidate'} {c['key']} (importance {c['importance']:g}, {last})")
    if result["candidates"] and not apply:
        click.echo("run 'memvault expire --apply' to remove them")


@cli.command()
@click.argument("file", type=click.File("r", encoding="utf-8"))
@click.option("--source", "-s", help="Source for candidates that do not name one.")
@click.option("--allow-secret", is_flag=True, help="Do not refuse candidates that look like secrets.")
@json_option
@pass_ctx
def ingest(ctx, file, source, allow_secret, as_json):
    """Read JSONL candidates ({"type": "fact"|"episode", "text": ..., ...}) from FILE ('-' for stdin), as an
    extractor or LLM step produces them, through trust, secrets and dedup."""
    from .lifecycle import ingest as run_ingest

    report = run_ingest(ctx.vault, file, source=source, name=getattr(file, "name", "-"), allow_secret=allow_secret)
    if as_json:
        emit_json(report.to_dict())
        return
    data = report.to_dict()
    click.echo("  ".join(f"{k} {len(v)}" for k, v in data.items()))
    for k, items in data.items():
        for item in items:
            detail = item.get("reason") or item.get("key") or item.get("into") or item.get("episode") or ""
            extra = f" (conflicts with {item['with']}: {', '.join(item['differing'])})" if "with" in item else ""
            click.echo(f"  {k}: {item['line']} {detail}{extra}")


# -- watch and git hooks -----------------------------------------------------------------------------------
@cli.command()
@click.option("--debounce", type=click.FloatRange(min=0), default=1.0, show_default=True, metavar="S",
              help="Seconds of quiet after a change before the index is synced.")
@pass_ctx
def watch(ctx, debounce):
    """Keep the index in step with edits made outside memvault (an editor, git checkout, rm) until stopped.

    Changes are batched: one sync after S seconds of quiet (at most 10 s into a continuous storm of changes),
    and a cheap rescan every minute catches anything missed. Logs one line per batch on stderr. One watcher
    per vault; stop it with Ctrl-C or SIGTERM.
    """
    from .watch import serve

    serve(ctx.vault, debounce=debounce)


@cli.group()
def hooks() -> None:
    """Git hooks for the vault's repository."""


@hooks.command("install")
@pass_ctx
def hooks_install(ctx):
    """Install memvault's git hooks (idempotent; core.hooksPath respected).

    pre-commit refuses a commit whose staged facts, inbox proposals or procedures have a bad key or name, front
    matter that does not parse, or a secret; post-commit, post-merge, post-checkout and post-rewrite start a
    reindex in the background. A hook already there is kept as <name>.memvault-chained and run first.
    """
    from .githooks import install

    for action in install(ctx.vault):
        click.echo(action)


@hooks.command("uninstall")
@pass_ctx
def hooks_uninstall(ctx):
    """Remove memvault's git hooks and restore the hooks they chained."""
    from .githooks import uninstall

    for action in uninstall(ctx.vault):
        click.echo(action)


# -- several hosts, agents ----------------------------------------------------------------------------------
@cli.command("sync")
@click.option("--remote", metavar="NAME", help="The git remote. Default: the current branch's upstream, else origin.")
@json_option
@pass_ctx
def sync_cmd(ctx, remote, as_json):
    """Share the vault with other hosts through its git remote: commit the vault's pending changes, pull the
    remote's with a rebase, reindex what changed, and push.

    Never force-pushes. When the same fact changed here and on the remote it stops, keeps your version in
    place (recall goes on serving it) and names the keys to resolve.
    """
    from .sync import sync

    result = sync(ctx.vault, remote=remote)
    if as_json:
        emit_json(result.to_dict())
        return
    where = f"{result.remote}/{result.branch}"
    if result.committed:
        click.echo(f"committed local changes in {result.committed[:12]}")
    click.echo(f"pulled {len(result.pulled)} changed file{'s' if len(result.pulled) != 1 else ''} from {where}")
    for path in result.pulled:
        click.echo(f"    {path}")
    click.echo(f"pushed to {where}" if result.pushed else f"{where} already up to date")


@cli.command("mcp")
@click.option("--source", "-s", metavar="KIND:NAME",
              help="Who writes, stamped on every write (e.g. agent:deployer). Default: $MEMVAULT_SOURCE, else agent:mcp.")
@click.option("--http", metavar="HOST:PORT",
              help="Serve streamable HTTP at http://HOST:PORT/mcp instead of stdio. A non-loopback HOST needs --token.")
@click.option("--token", envvar="MEMVAULT_MCP_TOKEN", show_envvar=True,
              help="Bearer token every HTTP request must carry (required on a non-loopback address).")
@click.option("--allow-run", is_flag=True, help="Offer the run_procedure tool (committed scripts only).")
@pass_ctx
def mcp_command(ctx, source, http, token, allow_run):
    """Serve the vault to agents over MCP: stdio by default, or streamable HTTP with --http.

    Tools: recall, get_fact, set_fact, list_facts, log_episode, list_episodes, get_procedure, list_procedures
    (+ run_procedure with --allow-run). Every write is recorded under --source, never a source the model names.
    """
    from .mcp_server import serve  # lazy: mcp is a heavy import

    serve(ctx.vault, source=source, allow_run=allow_run, http=http, token=token)


# -- entry point ---------------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> None:
    """Console entry point. Errors are mapped by :class:`Group`; here only the pipe and ^C are handled."""
    try:
        cli.main(args=argv, prog_name="memvault")
    except BrokenPipeError:
        # `memvault episode list | head` is not an error.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        sys.exit(0)
