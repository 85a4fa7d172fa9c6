"""The ``memvault`` command: a thin layer over :class:`memvault.Vault`.

Each command parses its flags, gets the vault from the context, calls one library method and returns what to
print (:class:`Out`: the JSON data and the lines for people); the ``--json`` switch is handled once, by
:func:`output`. Every exception becomes one line on stderr and an exit code in :class:`Group`, through
:func:`memvault.errors.describe`, the mapping the MCP server and the git hooks use too.
"""
from __future__ import annotations

import functools
import json
import os
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click

from .errors import InvalidValue, MemvaultError, describe
from .timeutil import parse_time, parse_time_or_age
from .vault import Vault


class Context:
    """Resolves the vault once, on first use (``init`` needs none). ``options`` go to :class:`Vault` (tests pass
    an ``embedder_factory``); commands that may load a model show its progress on a terminal."""

    def __init__(self, vault_path: str | None = None, **options: Any) -> None:
        self.vault_path = vault_path
        self.options = options
        self._vault: Vault | None = None

    @property
    def vault(self) -> Vault:
        if self._vault is None:
            from .engine import terminal_status

            self._vault = Vault.open(self.vault_path, **{"status": terminal_status, **self.options})
        return self._vault


pass_ctx = click.make_pass_decorator(Context)


@dataclass
class Out:
    """What a command prints: ``data`` for ``--json``, ``lines`` for people, ``notes`` on stderr either way."""

    data: Any
    lines: Iterable[str] = ()
    notes: list[str] = field(default_factory=list)


def output(fn: Callable[..., Out | None]) -> Callable[..., None]:
    """Adds ``--json`` to a command that returns :class:`Out`, and prints it one way or the other."""

    @click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
    @functools.wraps(fn)
    def command(*args: Any, as_json: bool, **kwargs: Any) -> None:
        result = fn(*args, **kwargs)
        if result is None:
            return
        for note in result.notes:
            click.echo(f"memvault: warning: {note}", err=True)
        if as_json:
            click.echo(json.dumps(result.data, ensure_ascii=False, indent=2))
        else:
            for line in result.lines:
                click.echo(line)

    return command


def read_text_arg(text: str | None, what: str) -> str:
    """TEXT, or stdin when TEXT is '-' or missing and stdin is not a terminal; stdin must be UTF-8."""
    if text is None or text == "-":
        if text is None and sys.stdin.isatty():
            raise click.UsageError(f"give the {what} as an argument, or '-' to read it from stdin")
        data = sys.stdin.buffer.read() if hasattr(sys.stdin, "buffer") else sys.stdin.read().encode()
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidValue("stdin", f"the {what} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    return text


class Failure(click.ClickException):
    """An error on its way out: one line on stderr, and its exit code."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code

    def show(self, file: Any = None) -> None:
        click.echo(f"memvault: error: {self.message}", err=True)


class Group(click.Group):
    """Turns every exception into a :class:`Failure` (via :func:`memvault.errors.describe`): the one place
    where errors become exits. ``MEMVAULT_DEBUG=1`` lets a bug's traceback through."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.exceptions.Exit, click.ClickException, click.exceptions.Abort, BrokenPipeError):
            raise
        except Exception as exc:  # noqa: BLE001 - the funnel
            if os.environ.get("MEMVAULT_DEBUG") and not isinstance(exc, MemvaultError):
                raise
            message, code = describe(exc)
            raise Failure(message, code) from None


@click.group(cls=Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--vault", "vault_path", metavar="PATH", envvar="MEMVAULT_DIR", show_envvar=True,
              help="The vault directory. Default: the nearest parent of the current directory holding memvault.toml.")
@click.version_option(package_name="memvault")
@click.pass_context
def cli(ctx: click.Context, vault_path: str | None) -> None:
    """memvault: a file-first memory vault for AI agents.

    Facts (keyed markdown files), procedures (whole runbooks) and episodes (append-only JSONL) in a git
    repository that people can read, correct and audit.
    """
    if not isinstance(ctx.obj, Context):
        ctx.obj = Context()
    ctx.obj.vault_path = vault_path


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
            notes.append(f"conflicts with {m['key']}: same subject, different values ({', '.join(m['differing'])}); "
                         "both kept, resolve by hand")
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
    text = read_text_arg(text, "fact text")
    f = ctx.vault.facts.set(key, text, category=category, importance=importance, confidence=confidence,
                            source=source, tags=list(tags) if tags else None, valid_until=valid_until,
                            allow_secret=allow_secret)
    data = {**f.to_dict(ctx.vault.root), "quarantined": f.quarantined, "similar": f.similar, "warnings": f.warnings}
    rel = f.path.relative_to(ctx.vault.root)
    line = (f"proposed {f.key} in {rel}: {f.source} is not a trusted source; a person runs 'memvault accept {f.key}' "
            "to promote it") if f.quarantined else f"set {f.key} ({rel})"
    return Out(data, [line], notes=similar_notes(f.similar) + f.warnings)


@fact.command("get")
@click.argument("key")
@output
@pass_ctx
def fact_get(ctx, key):
    """Print fact KEY (counted as a use of it: what recall's frequency factor counts)."""
    f = ctx.vault.fetch_fact(key)
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
    return Out([f.to_dict(ctx.vault.root) for f in facts], lines, notes=[str(p) for p in problems])


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
    fd, tmp = tempfile.mkstemp(prefix=key.replace("/", "_") + ".", suffix=".md")
    os.close(fd)
    keep = False

    def run_editor(text: str) -> str:
        Path(tmp).write_text(text, encoding="utf-8")
        if subprocess.run([*shlex.split(editor), tmp]).returncode != 0:
            raise InvalidValue("EDITOR", f"{editor} failed; nothing changed")
        return Path(tmp).read_text(encoding="utf-8")

    def again(error: Exception) -> bool:
        nonlocal keep
        click.echo(f"memvault: {describe(error)[0]}", err=True)
        if sys.stdin.isatty() and click.confirm("Edit again?", default=True):
            return True
        keep = True
        click.echo(f"memvault: your edit is kept in {tmp}", err=True)
        return False

    try:
        f = ctx.vault.facts.edit(key, run_editor, again=again, source=source)
        click.echo("no change" if f is None else f"saved {f.key}")
    finally:
        if not keep:
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
    click.echo(f"# procedure {p.name}  ({p.path.relative_to(ctx.vault.root)})", err=True)
    click.echo(f"# commit {p.commit or '(never committed)'}  blob {p.blob}", err=True)
    return Out(p.to_dict(ctx.vault.root), [p.text[:-1] if p.text.endswith("\n") else p.text], notes=notes)


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
        f" blob {result.procedure.blob[:12]} exit {result.exit_code} in {result.duration_ms} ms", err=True)
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
@click.option("--allow-secret", is_flag=True, help="Store text even if it looks like a secret (trusted sources).")
@click.option("--json", "as_json", is_flag=True, help="Print the episode as its JSON line.")
@pass_ctx
def episode_add(ctx, text, source, kind, at, tags, meta, allow_secret, as_json):
    """Append an episode with TEXT ('-' or no TEXT: read stdin)."""
    text = read_text_arg(text, "episode text")
    meta_obj = None
    if meta is not None:
        try:
            meta_obj = json.loads(meta, parse_constant=_no_constant)
        except json.JSONDecodeError as exc:
            raise click.BadParameter(f"not valid JSON: {exc.msg}", param_hint="--meta") from None
        if not isinstance(meta_obj, dict):
            raise click.BadParameter("must be a JSON object", param_hint="--meta")
    e = ctx.vault.episodes.append(text, source=source, kind=kind, at=parse_time(at, "--at") if at else None,
                                  tags=list(tags), meta=meta_obj, allow_secret=allow_secret)
    for warning in e.warnings:
        click.echo(f"memvault: warning: {warning}", err=True)
    if as_json:
        click.echo(json.dumps(e.to_dict(), ensure_ascii=False))
    else:
        click.echo(f"added {e.id} to {e.path.relative_to(ctx.vault.root)}")


def _no_constant(name: str) -> Any:
    raise click.BadParameter(f"{name} is not standard JSON (use null or a string)", param_hint="--meta")


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
        source=source, kind=kind, limit=limit, problems=problems)
    for e in items:  # streamed line by line: JSONL for agents, one line each for people
        if as_json:
            click.echo(json.dumps(e.to_dict(), ensure_ascii=False))
        else:
            click.echo(f"{e.created_at}  {e.kind:<13} {e.source:<20} {' '.join(e.text.split())}")
    for problem in problems:
        click.echo(f"memvault: warning: {problem}", err=True)


# -- index and recall ----------------------------------------------------------------------------------------
@cli.command()
@click.argument("query")
@click.option("-k", "k", type=click.IntRange(min=1, max=1000), default=10, show_default=True,
              help="How many memories (at most 1000).")
@click.option("--kind", "kinds", multiple=True, type=click.Choice(["fact", "episode", "procedure"]),
              help="Only these kinds (repeat for several).")
@click.option("--budget", type=click.IntRange(min=1), help="Keep the best hits that fit this many tokens (≈ chars/4).")
@click.option("--format", "fmt", type=click.Choice(["text", "json", "prompt"]), help="Output format (default text).")
@click.option("--json", "as_json", is_flag=True, help="Same as --format json.")
@click.option("--explain", is_flag=True, help="Show the five factors and their weights per hit.")
@click.option("--mode", type=click.Choice(["hybrid", "keyword", "vector"]), default="hybrid", show_default=True,
              help="Candidates from both searches, or one.")
@click.option("--no-record", is_flag=True, help="Do not count this recall in the usage statistics.")
@click.option("--since", help="Only episodes from this time, or this long ago (30d, 12h); facts and procedures stay.")
@click.option("--until", help="Only episodes up to this time, or this long ago.")
@click.option("--min-relevance", type=click.FloatRange(0, 1), metavar="R",
              help="Keep candidates whose relevance is at least R of the best one's ([recall] relative_floor); "
                   "0 also returns weak guesses when nothing is relevant.")
@pass_ctx
def recall(ctx, query, k, kinds, budget, fmt, as_json, explain, mode, no_record, since, until, min_relevance):
    """Find the memories that best answer QUERY: hybrid keyword + semantic search over facts, episodes and
    procedures, ranked by relevance, importance, confidence, recency and frequency.

    Only memories relevant enough are returned; when nothing is, the answer is empty and says why (--json:
    "hits": [] and "nothing_found"). A time in the question ("yesterday", "last week", "in November") keeps the
    episodes of that time. The index is brought in step with the files first, so an edited or deleted memory
    never comes back stale. Warnings go to stderr; results still come.
    """
    from .render import render

    fmt = "json" if as_json else (fmt or "text")
    vault = ctx.vault
    result = vault.recall(query, k=k, kinds=list(kinds) or None, budget=budget, mode=mode, fmt=fmt,
                          record_access=not no_record, min_relevance=min_relevance,
                          since=parse_time_or_age(since, "--since") if since else None,
                          until=parse_time_or_age(until, "--until") if until else None)
    for warning in result.warnings:
        click.echo(f"memvault: warning: {warning}", err=True)
    click.echo(render(result, fmt, explain=explain, weights=vault.config.recall.weights if explain else None))


@cli.command()
@click.argument("refs", nargs=-1, required=True)
@click.option("--source", "-s", help="Who used them. Default: $MEMVAULT_SOURCE, else user:$USER.")
@pass_ctx
def used(ctx, refs, source):
    """Report that memories were used to do something: fact:KEY (or just KEY), procedure:NAME, episode:ID.

    This is what recall's frequency factor counts (being shown by recall is not a use).
    """
    counted = ctx.vault.used(list(refs), source=source)
    click.echo(f"counted {len(counted)} of {len(refs)} uses" + ("" if len(counted) == len(refs) else
                                                                " (an untrusted source counts once a day)"))


def progress_bar() -> tuple[Callable[[int, int], None] | None, Callable[[], None]]:
    """A progress callback drawing a bar on stderr when it is a terminal, and the function that closes it."""
    if not sys.stderr.isatty():
        return None, lambda: None
    bar: Any = None

    def update(done: int, total: int) -> None:
        nonlocal bar
        if bar is None:
            bar = click.progressbar(length=total, label="embedding", file=sys.stderr)
            bar.__enter__()
        bar.update(done - bar.pos)

    def close() -> None:
        if bar is not None:
            bar.__exit__(None, None, None)

    return update, close


@cli.command()
@click.option("--model", help="Set [embedding] model in memvault.toml (committed) and rebuild for it.")
@click.option("--full", is_flag=True, help="Rebuild the whole index even if the model did not change.")
@click.option("--dry-run", is_flag=True, help="Print what a full rebuild would cost (items, tokens, time, disk).")
@output
@pass_ctx
def reindex(ctx, model, full, dry_run):
    """Bring the index in step with the vault's files.

    Incremental: new and changed text is embedded, unchanged items are only checked (by stat, then hash), and
    rows whose file is gone are dropped; the model is loaded only when there is text to embed. When the
    configured model differs from the index's, the index is rebuilt beside the old one and swapped in
    atomically, so recall keeps working meanwhile. A --model that cannot be loaded changes nothing.
    """
    vault = ctx.vault
    if dry_run:
        estimate = vault.estimate_reindex(model)
        return Out(estimate, estimate["summary"])
    progress, close = progress_bar()
    try:
        report = vault.reindex(model=model, full=full, progress=progress)
    finally:
        close()
    if not report.changed and not report.chunks_embedded:
        line = f"index up to date ({report.files_seen} files checked in {report.seconds:.2f} s)"
    else:
        line = (f"indexed {report.files_changed} changed and {report.files_removed} removed files in "
                f"{report.seconds:.2f} s: {report.docs_added} added, {report.docs_changed} changed, "
                f"{report.docs_removed} removed, {report.metadata_only} unchanged; {report.chunks_embedded} chunks "
                f"embedded" + (f", {report.chunks_pending} pending" if report.chunks_pending else ""))
    return Out(report.to_dict(), [line], notes=report.warnings + report.problems)


@cli.command()
@output
@pass_ctx
def stats(ctx):
    """Items per kind, index size, bytes per vector row against 4·dims, the model, the projected size at 100k
    rows, and episode lines and bytes per month file."""
    data = ctx.vault.stats()
    return Out(data, data["summary"])


# -- lifecycle and trust ------------------------------------------------------------------------------------
def rewrite_lines(report: Any, root: Path, verb: str) -> list[str]:
    lines = [] if report.kinds else ["no episodes"]
    for kind, n in sorted(report.kinds.items()):
        lines.append(f"{kind:<14} kept {n['kept']:>6}  {verb} {n['removed']:>6}  bytes freed {n['bytes_freed']:>9}")
    lines += [f"deleted {path.relative_to(root)} (empty)" for path in report.files_deleted]
    return lines


@cli.command()
@click.option("--dry-run", is_flag=True, help="Report what would be removed; change nothing.")
@output
@pass_ctx
def prune(ctx, dry_run):
    """Remove episodes older than [retention] allows for their kind (raw 30d, summary 365d, procedure_run 90d
    by default), and their index rows. Prints lines kept and removed and bytes freed per kind."""
    report = ctx.vault.prune(dry_run=dry_run)
    notes = [f"{report.unreadable} unreadable lines kept (see 'memvault episode list')"] if report.unreadable else []
    return Out({"dry_run": dry_run, **report.to_dict(ctx.vault.root)},
               rewrite_lines(report, ctx.vault.root, "would remove" if dry_run else "removed"), notes=notes)


@cli.command()
@click.option("--source", "-s", "pattern", required=True,
              help="The source to purge: exact, or a prefix ending in * (web:*).")
@click.option("--dry-run", is_flag=True, help="Report what would be removed; change nothing.")
@output
@pass_ctx
def purge(ctx, pattern, dry_run):
    """Remove every episode, fact and proposal whose source matches, and their index rows, all or nothing, in one
    commit naming the source. For the day a source is found to have written poison into memory."""
    report = ctx.vault.purge(pattern, dry_run=dry_run)
    verb = "would remove" if dry_run else "removed"
    lines = [f"{verb} fact {f.key}{' (inbox)' if f.quarantined else ''}: {f.text[:70]}" for f in report.facts]
    lines += [f"{verb} episode {e.id} {e.created_at}: {' '.join(e.text.split())[:70]}" for e in report.episodes.removed]
    lines.append(f"{verb} {len(report.facts)} facts and {len(report.episodes.removed)} episodes from {pattern}"
                 + (f" in commit {report.commit[:12]}" if report.commit else ""))
    return Out({"dry_run": dry_run, **report.to_dict(ctx.vault.root)}, lines)


@cli.command()
@output
@pass_ctx
def inbox(ctx):
    """Facts proposed by untrusted sources, waiting for 'memvault accept' or 'memvault reject'."""
    problems: list = []
    proposals = ctx.vault.facts.proposals(problems)
    lines = [] if proposals else ["inbox empty"]
    for f, exists in proposals:
        lines += [f"{f.key}  from {f.source}  ({'changes an existing fact' if exists else 'new'})", f"    {f.text}"]
    data = [{**f.to_dict(ctx.vault.root), "changes_existing": exists} for f, exists in proposals]
    return Out(data, lines, notes=[str(p) for p in problems])


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
    """Drop the proposal inbox/KEY.md."""
    f = ctx.vault.facts.reject(key, source=source)
    click.echo(f"rejected {key} (from {f.source})")


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
        when = f"last commit {last['date'][:10]} {last['commit'][:12]}" if last else "never committed"
        lines.append(f"{item['key']}: {item['reason']}; {when}")
    return Out(items, lines)


@cli.command()
@click.argument("key")
@click.option("--source", "-s", help="Who verifies it.")
@pass_ctx
def verify(ctx, key, source):
    """Confirm fact KEY still holds: bump its updated time and commit, clearing review staleness."""
    f = ctx.vault.verify(key, source=source)
    click.echo(f"verified {f.key} (updated {f.to_dict()['updated']})")


@cli.command()
@click.option("--apply", is_flag=True, help="Merge each duplicate group into one fact, in one commit.")
@output
@pass_ctx
def dedup(ctx, apply):
    """Near-duplicate groups and conflicts over the whole vault (keyword Jaccard >= 0.60 with 3+ shared
    keywords; numbers, IPs, ports, dates and versions must agree, else it is a conflict, never merged)."""
    report = ctx.vault.dedup(apply=apply)
    lines = ["duplicates: " + ", ".join(group) for group in report.groups]
    lines += [f"conflict: {c['a']} vs {c['b']} (values {', '.join(c['differing'])})" for c in report.conflicts]
    lines += [f"merged {', '.join(m['merged'])} into {m['into']}" for m in report.merged]
    if not report.groups and not report.conflicts:
        lines.append("no duplicates or conflicts")
    elif report.groups and not apply:
        lines.append("run 'memvault dedup --apply' to merge the duplicate groups (conflicts are never merged)")
    return Out(report.to_dict(), lines)


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
    return Out(result, lines)


@cli.command()
@click.argument("file", type=click.File("rb"))
@click.option("--source", "-s", help="Who is ingesting (the only authority; a candidate's own \"source\" is kept as "
                                     "claimed_source). Default: $MEMVAULT_SOURCE, else user:$USER.")
@click.option("--allow-secret", is_flag=True, help="Do not refuse candidates that look like secrets (trusted).")
@output
@pass_ctx
def ingest(ctx, file, source, allow_secret):
    """Read JSONL candidates ({"type": "fact"|"episode", "text": ..., ...}) from FILE ('-' for stdin), as an
    extractor or LLM step produces them, through trust, secrets and dedup."""
    report = ctx.vault.ingest(file, source=source, name=getattr(file, "name", "-"), allow_secret=allow_secret)
    data = report.to_dict()
    lines = ["  ".join(f"{k} {len(v)}" for k, v in data.items())]
    for k, items in data.items():
        for item in items:
            detail = item.get("reason") or item.get("key") or item.get("into") or item.get("episode") or ""
            extra = f" (conflicts with {item['with']}: {', '.join(item['differing'])})" if "with" in item else ""
            lines.append(f"  {k}: {item['line']} {detail}{extra}")
    return Out(data, lines)


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
    reindex in the background (one at a time: later ones coalesce). A hook already there is kept as
    <name>.memvault-chained and run first.
    """
    from .githooks import install

    for action in install(ctx.vault.root):
        click.echo(action)


@hooks.command("uninstall")
@pass_ctx
def hooks_uninstall(ctx):
    """Remove memvault's git hooks and restore the hooks they chained."""
    from .githooks import uninstall

    for action in uninstall(ctx.vault.root):
        click.echo(action)


# -- several hosts, agents ----------------------------------------------------------------------------------
@cli.command("sync")
@click.option("--remote", metavar="NAME", help="The git remote. Default: the current branch's upstream, else origin.")
@click.option("--source", "-s", help="Who syncs (must be trusted). Default: $MEMVAULT_SOURCE, else user:$USER.")
@output
@pass_ctx
def sync_cmd(ctx, remote, source):
    """Share the vault with other hosts through its git remote: commit the vault's pending changes, pull the
    remote's with a rebase, reindex what changed, and push.

    Never force-pushes. When the same fact changed here and on the remote it stops, keeps your version in
    place (recall goes on serving it) and names the keys to resolve.
    """
    result = ctx.vault.sync(remote=remote, source=source)
    where = f"{result.remote}/{result.branch}"
    lines = [f"committed local changes in {result.committed[:12]}"] if result.committed else []
    lines.append(f"pulled {len(result.pulled)} changed file{'s' if len(result.pulled) != 1 else ''} from {where}")
    lines += [f"    {path}" for path in result.pulled]
    lines.append(f"pushed to {where}" if result.pushed else f"{where} already up to date")
    return Out(result.to_dict(), lines, notes=result.warnings)


@cli.command("mcp")
@click.option("--source", "-s", metavar="KIND:NAME",
              help="Who writes, stamped on every write (e.g. agent:deployer). Default: agent:mcp (never the "
                   "environment: a model is not the person who started the server).")
@click.option("--http", metavar="HOST:PORT",
              help="Serve streamable HTTP at http://HOST:PORT/mcp instead of stdio. A non-loopback HOST needs a token.")
@click.option("--token-file", type=click.Path(dir_okay=False), metavar="FILE",
              help="Read the bearer token every HTTP request must carry from FILE (or set MEMVAULT_MCP_TOKEN).")
@click.option("--token", hidden=True, help="Deprecated: visible to every user in ps; use --token-file.")
@click.option("--allow-run", is_flag=True, help="Offer the run_procedure tool (committed scripts only).")
@pass_ctx
def mcp_command(ctx, source, http, token_file, token, allow_run):
    """Serve the vault to agents over MCP: stdio by default, or streamable HTTP with --http.

    Tools: recall, get_fact, set_fact, list_facts, log_episode, list_episodes, get_procedure, list_procedures,
    used (+ run_procedure with --allow-run). Every write is recorded under --source, never a source the model
    names, and goes through the same trust rules as the CLI.
    """
    from .mcp_server import read_token, serve  # lazy: mcp is a heavy import

    if token is not None:
        click.echo("memvault: warning: --token is visible to other users in the process list; use --token-file "
                   "or MEMVAULT_MCP_TOKEN", err=True)
    serve(ctx.vault, source=source, allow_run=allow_run, http=http,
          token=token if token is not None else read_token(token_file))


# -- entry point ---------------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> None:
    """Console entry point. Errors are mapped by :class:`Group`; here only the pipe and ^C are handled."""
    try:
        cli.main(args=argv, prog_name="memvault", obj=Context())
    except BrokenPipeError:
        # `memvault episode list | head` is not an error.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        sys.exit(0)
