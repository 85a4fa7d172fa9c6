"""Commands that move memory in and out: import (other tools' memory, or a memvault export) and export."""
from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path

import click

from ...rules.markup import one_line, printable_line
from .base import Out, cli, echo, output, pass_ctx

IMPORT_FORMATS = ("claude-code", "claude-mem", "basic-memory", "mem0", "openclaw", "markdown", "memvault")
#: Seconds between two lines of an import's progress on stderr.
PROGRESS_SECONDS = 5.0


def _progress() -> Callable[[int, int], None]:
    """A line on stderr, at most every PROGRESS_SECONDS, saying how many of the items an import has been through."""
    last = time.monotonic()

    def told(done: int, total: int) -> None:
        nonlocal last
        if time.monotonic() - last >= PROGRESS_SECONDS:
            last = time.monotonic()
            echo(f"memvault: import: {done} of {total} items", err=True)

    return told


@cli.command("import")
@click.argument("fmt", metavar="FORMAT", type=click.Choice(IMPORT_FORMATS))
@click.argument("path", type=click.Path(exists=True))
@click.option("--dry-run", is_flag=True, help="Report what would come in; write nothing.")
@click.option("--trust", is_flag=True, help="These are your own files: write their facts directly (not as "
                                            "proposals) under your own user: source. Secrets are still refused.")
@click.option("--source", "-s", help="Who imports, with --trust or the memvault format (must be trusted). "
                                     "Default: $MEMVAULT_SOURCE, else user:$USER.")
@output
@pass_ctx
def import_cmd(ctx, fmt, path, dry_run, trust, source):
    """Bring in the memory another tool keeps, through the same gate as any write: claude-code (CLAUDE.md files,
    auto memory folders), claude-mem (its SQLite database), basic-memory (a notes folder), mem0 (a JSON export),
    openclaw (a workspace: MEMORY.md and memory/*.md), markdown (a folder of files), or memvault (an export).

    Items are written as import:FORMAT, a source the vault does not trust unless you say so: facts wait in the
    inbox for a person. With --trust (your own files) they are written as facts under your own user: source.
    Either way a line that looks like a secret is refused by its file and line number and the rest comes in, and
    the times the other tool recorded are kept. The report says what came in, what duplicated a stored fact
    (nothing written), what conflicts with one, and what was refused and why (a secret, a bad key, too large).
    Importing the same files again adds nothing; a long import says on stderr every few seconds how many items it
    has been through. A memvault export is restored as it was (files byte for byte, episodes with their ids and
    sources), by a trusted source.

    Exits 1 when an item was refused and none is in the vault after the import: none added, proposed or merged,
    none skipped as already there (a conflict is not written). Importing the same files again exits 0.
    """
    from ...core.transfer import import_items, own_source, restore_items
    from ..transfer import read

    vault = ctx.vault
    if fmt == "memvault":
        report = restore_items(vault, read(fmt, Path(path)), source=source or vault.default_source(),
                               dry_run=dry_run)
    else:
        if source and not trust:
            raise click.UsageError("--source goes with --trust (or the memvault format): other imports are "
                                   "import:FORMAT")
        who = own_source(vault, source or vault.default_source()) if trust else f"import:{fmt}"
        report = import_items(vault, read(fmt, Path(path)), fmt=fmt, source=who, dry_run=dry_run,
                              progress=_progress())
    lines = [report.summary()]
    for bucket in ("conflicts", "refused"):
        for entry in getattr(report, bucket):
            # a refused item by its position (its key may be made of what was refused), the rest by key
            what = entry.get("key") or entry.get("origin")
            if bucket == "refused":
                what = f"item {entry.get('item')}" + (f" ({what})" if what != f"item {entry.get('item')}" else "")
            # one line each: an export folder's file name may hold a line feed (a second, forged report line)
            lines.append("  " + one_line(f"{bucket[:-1] if bucket == 'conflicts' else 'refused'}: {what}: "
                                         f"{entry.get('reason')}" + (f" ({entry['with']})" if entry.get("with") else "")))
    if report.proposed and not dry_run:
        lines.append(f"  {len(report.proposed)} facts wait in the inbox: 'memvault inbox', then accept or reject")
    failure = None
    if report.refused_all():
        failure = f"nothing {'would be' if dry_run else 'was'} stored: every item was refused (see the report)"
    return Out(report.to_dict(), lines, notes=report.problems, failure=failure)


@cli.command("export")
@click.option("--format", "fmt", type=click.Choice(["jsonl", "markdown"]), default="jsonl", show_default=True,
              help="One JSONL file, or a folder of markdown a person can read.")
@click.option("--output", "-o", metavar="PATH", help="The file (jsonl; default: stdout) or the new folder (markdown).")
@click.option("--allow-secret", is_flag=True, help="Include what looks like a secret (left out by default).")
@pass_ctx
def export_cmd(ctx, fmt, output, allow_secret):
    """Write out everything the vault holds (facts, proposals, procedures with their mode, episodes as stored) so
    that 'memvault import memvault PATH' into a new vault gives the same facts, procedures and episodes. What
    looks like a secret (an episode stored with --allow-secret) is left out and named, unless --allow-secret."""
    from functools import partial

    from ...core.transfer import snapshot as everything
    from ...rules.fsutil import open_output
    from ..transfer.memvault import write_jsonl, write_markdown

    vault = ctx.vault
    left_out: list = []
    snapshot = partial(everything, allow_secret=allow_secret, left_out=left_out)
    if fmt == "markdown":
        if not output:
            raise click.UsageError("--format markdown writes a folder: give it with --output")
        n = write_markdown(snapshot(vault), Path(output), vault.root.name)
    elif output and output != "-":
        with open_output(output) as f:  # 0600, never through a link at the name, whole or not at all
            n = write_jsonl(snapshot(vault), f, vault.root.name)
    else:
        n = write_jsonl(snapshot(vault), sys.stdout, vault.root.name)
    echo(f"memvault: exported {n} records" + (f" to {output}" if output and output != "-" else ""), err=True)
    secrets = [e for e in left_out if "path" not in e]
    unread = [e for e in left_out if "path" in e]
    for entries, why in ((secrets, "that look like secrets (--allow-secret includes them)"),
                         (unread, "that could not be read")):
        if entries:
            named = "; ".join(f"{e['type']} {e.get('key') or e.get('name') or e.get('id') or e.get('path')}: "
                              f"{e['reason']}" for e in entries[:10])
            # one line: a pulled file's name may hold a line feed (it would print a second line of its own)
            click.echo(printable_line(f"memvault: left out {len(entries)} {why}: {named}"
                                      + (f"; and {len(entries) - 10} more" if len(entries) > 10 else "")), err=True)
