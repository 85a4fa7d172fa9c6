"""Commands of the index and recall: recall, used, reindex, stats."""
from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import click

from ...rules.timeutil import parse_time_or_age
from .base import Out, cli, echo, output, pass_ctx, warn


# -- index and recall ----------------------------------------------------------------------------------------
@cli.command()
@click.argument("query")
@click.option("-k", "k", type=click.IntRange(min=1, max=1000), default=10, show_default=True,
              help="How many memories (at most 1000).")
@click.option("--kind", "kinds", multiple=True, type=click.Choice(["fact", "episode", "procedure"]),
              help="Only these kinds (repeat for several).")
@click.option("--budget", type=click.IntRange(min=1), help="Keep the best hits whose answer, as printed, fits this many tokens (≈ ASCII characters / 4, one a character beyond ASCII).")
@click.option("--format", "fmt", type=click.Choice(["text", "json", "prompt"]), help="Output format (default text).")
@click.option("--json", "as_json", is_flag=True, help="Same as --format json.")
@click.option("--explain", is_flag=True,
              help="Show the five factors and their weights per hit, and what relevance was made of.")
@click.option("--mode", type=click.Choice(["hybrid", "keyword", "vector"]), default="hybrid", show_default=True,
              help="Candidates from both searches, or one.")
@click.option("--no-record", is_flag=True, help="Do not count this recall in the usage statistics.")
@click.option("--since", help="Only episodes from this time, or this long ago (30d, 12h); facts and procedures stay.")
@click.option("--until", help="Only episodes up to this time, or this long ago.")
@click.option("--min-relevance", type=click.FloatRange(0, 1), metavar="R",
              help="Keep candidates whose relevance is at least R of the best one's ([recall] relative_floor); "
                   "0 also returns weak guesses when nothing is relevant.")
@click.option("--source", "-s", metavar="KIND:NAME",
              help="Who asks, as the recall log records it. Default: $MEMVAULT_SOURCE, else user:$USER.")
@click.option("--include-superseded", is_flag=True,
              help="Also facts another fact superseded (an accepted proposal that contradicted them).")
@pass_ctx
def recall(ctx, query, k, kinds, budget, fmt, as_json, explain, mode, no_record, since, until, min_relevance, source,
           include_superseded):
    """Find the memories that best answer QUERY: hybrid keyword + semantic search over facts, episodes and
    procedures, ranked by relevance, importance, confidence, recency and frequency.

    Only memories relevant enough are returned; when nothing is, the answer is empty and says why (--json:
    "hits": [] and "nothing_found"). A time in the question ("yesterday", "last week", "on 1 May 2023") ranks the
    memories of that time first; --since/--until keep only the episodes of their window. The index is brought in
    step with the files first, so an edited or deleted memory never comes back stale. Warnings go to stderr;
    results still come.
    """
    from ...core.render import printed

    fmt = "json" if as_json else (fmt or "text")
    vault = ctx.vault
    result = vault.recall(query, k=k, kinds=list(kinds) or None, budget=budget, mode=mode, fmt=fmt,
                          record_access=not no_record, min_relevance=min_relevance, source=source,
                          include_superseded=include_superseded, explain=explain,
                          since=parse_time_or_age(since, "--since") if since else None,
                          until=parse_time_or_age(until, "--until") if until else None)
    warn(result.warnings)
    echo(printed(result, fmt, explain=explain, weights=vault.config.recall.weights if explain else None))


@cli.command()
@click.argument("refs", nargs=-1, required=True)
@click.option("--source", "-s", help="Who used them. Default: $MEMVAULT_SOURCE, else user:$USER.")
@pass_ctx
def used(ctx, refs, source):
    """Report that memories were used to do something: fact:KEY (or just KEY), procedure:NAME, episode:ID.

    This is what recall's frequency factor counts (being shown by recall is not a use).
    """
    counted = ctx.vault.used(list(refs), source=source)
    warn(counted.warnings)
    echo(f"counted {len(counted)} of {len(refs)} uses")  # each one not counted is named in the warnings


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
        bar.length = total  # a rebuild learns its total as it reads the files
        bar.update(done - bar.pos)

    def close() -> None:
        if bar is not None:
            bar.__exit__(None, None, None)

    return update, close


@cli.command()
@click.option("--model", metavar="NAME|DIR", help="Set the embedding model and rebuild for it: a name goes to "
              "memvault.toml (committed), a directory of this host to its local.toml (in the state directory; this "
              "host only).")
@click.option("--full", is_flag=True, help="Rebuild the whole index even if the model did not change.")
@click.option("--dry-run", is_flag=True, help="Print what a full rebuild would cost (items, tokens, time, disk).")
@click.option("--accept-index-url", is_flag=True, help="Connect this host to the team index the shared memvault.toml's "
              "[index] url names (recorded in the state directory; asked again when the url changes).")
@output
@pass_ctx
def reindex(ctx, model, full, dry_run, accept_index_url):
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
        report = vault.reindex(model=model, full=full, progress=progress, accept_index_url=accept_index_url)
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
