"""Commands that keep the vault live and connected: watch, hooks, sync, mcp, ui."""
from __future__ import annotations

import os

import click

from .base import Out, cli, echo, output, pass_ctx


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
    from ..watch import serve

    serve(ctx.vault, debounce=debounce)


@cli.group()
def hooks() -> None:
    """Git hooks for the vault's repository."""


@hooks.command("install")
@click.option("--source", "-s", help="Who installs them (must be trusted). Default: $MEMVAULT_SOURCE, else user:$USER.")
@pass_ctx
def hooks_install(ctx, source):
    """Install memvault's git hooks (idempotent; core.hooksPath respected).

    pre-commit refuses a commit whose staged facts, inbox proposals or procedures have a bad key or name, front
    matter that does not parse, or a secret; post-commit, post-merge, post-checkout and post-rewrite start a
    reindex in the background (one at a time: later ones coalesce). A hook already there is kept as
    <name>.memvault-chained and run first.
    """
    from ...rules.trust import Op
    from ..githooks import install

    ctx.vault.authorize(Op.HOOKS, source)
    for action in install(ctx.vault.root):
        echo(str(action))


@hooks.command("uninstall")
@click.option("--source", "-s", help="Who removes them (must be trusted). Default: $MEMVAULT_SOURCE, else user:$USER.")
@pass_ctx
def hooks_uninstall(ctx, source):
    """Remove memvault's git hooks and restore the hooks they chained."""
    from ...rules.trust import Op
    from ..githooks import uninstall

    ctx.vault.authorize(Op.HOOKS, source)
    actions = uninstall(ctx.vault.root)
    for action in actions:
        echo(str(action))
    if not actions:  # a second uninstall, or none ever installed: say so rather than nothing
        echo("memvault: no memvault hooks installed here", err=True)


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
    if result.local_only:
        lines.append("no remote to pull from or push to: committed here only (git remote add origin URL, then "
                     "memvault sync shares the vault)")
        return Out(result.to_dict(), lines, notes=list(result.warnings))
    lines.append(f"pulled {len(result.pulled)} changed file{'s' if len(result.pulled) != 1 else ''} from {where}")
    lines += [f"    {path}" for path in result.pulled]
    lines.append(f"pushed to {where}" if result.pushed else f"{where} already up to date")
    if result.shared_index:  # a team's index, after the push: said in its place, not as a warning before it
        lines.append(result.shared_index)
    return Out(result.to_dict(), lines, notes=[w for w in result.warnings if w != result.shared_index])


@cli.command("mcp")
@click.option("--source", "-s", metavar="KIND:NAME",
              help="Who writes, stamped on every write (e.g. agent:deployer). Default: agent:mcp (never the "
                   "environment: a model is not the person who started the server).")
@click.option("--http", metavar="HOST:PORT",
              help="Serve streamable HTTP at http://HOST:PORT/mcp instead of stdio. Every request needs a bearer token: "
                   "on loopback one is made for the run and printed on stderr; any other HOST needs one given.")
@click.option("--token-file", type=click.Path(dir_okay=False), metavar="FILE",
              help="Read the bearer token every HTTP request must carry from FILE (or set MEMVAULT_MCP_TOKEN).")
@click.option("--allow-run", is_flag=True, help="Offer the run_procedure tool (committed scripts only).")
@click.option("--in-project", metavar="PATH",
              help="The vault at PATH inside the project the agent runs in ($CLAUDE_PROJECT_DIR, else the current "
                   "directory): what a project's shared .mcp.json names, so it names nothing of one machine.")
@pass_ctx
def mcp_command(ctx, source, http, token_file, allow_run, in_project):
    """Serve the vault to agents over MCP: stdio by default, or streamable HTTP with --http.

    Tools: recall, get_fact, set_fact, list_facts, log_episode, list_episodes, get_procedure, list_procedures,
    used (+ run_procedure with --allow-run). Every write is recorded under --source, never a source the model
    names, and goes through the same trust rules as the CLI.
    """
    from ..mcp import read_token, serve  # lazy: mcp is a heavy import

    if in_project:
        from ..agents.hook import project_dir

        ctx.vault_path = os.path.join(project_dir(), in_project)
    serve(ctx.vault, source=source, allow_run=allow_run, http=http, token=read_token(token_file))


@cli.command("ui")
@click.option("--port", type=click.IntRange(0, 65535), default=8787, show_default=True,
              help="The port to listen on (0: any free one).")
@click.option("--host", default="127.0.0.1", show_default=True, metavar="HOST",
              help="The address to listen on. Any but a loopback address needs a token (--token-file or "
                   "MEMVAULT_UI_TOKEN).")
@click.option("--token-file", type=click.Path(dir_okay=False), metavar="FILE",
              help="Read the token a browser or script must present from FILE (default: MEMVAULT_UI_TOKEN, else a "
                   "new one for this run).")
@click.option("--open", "open_browser", is_flag=True, help="Open the view in the default browser.")
@click.option("--source", "-s", metavar="KIND:NAME",
              help="Who the view acts as: its [scopes] limit every page, its reviews follow the review rules. "
                   "Default: $MEMVAULT_SOURCE, else user:$USER.")
@pass_ctx
def ui(ctx, port, host, token_file, open_browser, source):
    """Serve a local web view of the vault until stopped: overview and growth, facts with their git history and
    diffs, inbox review, timeline and agent sessions, procedures and their runs, the recall playground, and the
    log of what agents were told.

    Changes made in the view go through the same write gate as the CLI, as the source it acts as (--source). The
    address printed carries a token the browser swaps for a cookie; without it the view answers nobody.
    """
    from ..mcp import read_token
    from ..web import serve

    if source:
        ctx.vault.act_as(source)

    serve(ctx.vault, host=host, port=port, token=read_token(token_file), open_browser=open_browser)


@cli.command("hook", hidden=True, context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def hook_command(args):
    """What an agent runtime's hooks run from a project's shared settings (``memvault hook EVENT --runtime R
    [--in-project PATH]``): the same as ``python -m memvault.interfaces.agents.hook``, with memvault found on PATH."""
    from ..agents.hook import main as hook_main

    raise SystemExit(hook_main(list(args)))
