"""Commands that wire coding agents to the vault: agent install, status, uninstall, print, capture, context."""
from __future__ import annotations

from pathlib import Path

import click

from .base import Out, cli, echo, output, pass_ctx, say

RUNTIME_NAMES = ("claude-code", "codex", "gemini")


@cli.group()
def agent() -> None:
    """Coding agents (Claude Code, Codex CLI, Gemini CLI) using the vault without being told: context at session
    start, capture of each session's turns, the MCP server."""


def _scope_options(fn):
    fn = click.option("--project", "project", type=click.Path(file_okay=False), metavar="DIR",
                      help="The project whose settings --scope project edits. Default: the current directory.")(fn)
    return click.option("--scope", type=click.Choice(["user", "project"]), default="user", show_default=True,
                        help="Your settings for every project, or one project's (shared through its repository).")(fn)


def _report_lines(report) -> list[str]:
    lines = [f"{report.runtime} ({report.scope}): {change}" for change in report.changed]
    lines += [f"backup of the previous version: {b}" for b in report.backups]
    return lines


@agent.command("install")
@click.argument("runtime", type=click.Choice(RUNTIME_NAMES))
@_scope_options
@click.option("--vault", "vault_path", type=click.Path(file_okay=False), metavar="PATH",
              help="The vault the hooks and the MCP server use (default: this command's vault).")
@click.option("--per-prompt", is_flag=True, help="Also recall for each prompt (adds what clears the relevance floor).")
@output
@pass_ctx
def agent_install(ctx, runtime, scope, project, vault_path, per_prompt):
    """Wire RUNTIME to the vault: its MCP server entry (writes stamped agent:RUNTIME, never trusted) and its
    lifecycle hooks (context at session start, capture before compaction and at session end), merged into the
    runtime's own settings files.

    Your other hooks, servers, comments and settings are kept byte for byte; each file changed is backed up first;
    running it again changes nothing; 'memvault agent uninstall RUNTIME' removes exactly what it added.
    """
    from ...core.vault import Vault
    from ..agents import runtimes

    vault = Vault.open(vault_path) if vault_path else ctx.vault
    report = runtimes.install(runtime, vault.root, scope=scope, per_prompt=per_prompt,
                              project=Path(project) if project else None)
    source = f"agent:{runtime}"
    if vault.facts.is_trusted(source):
        report.notes.append(f"[trust] trusts {source}: its MCP writes would skip the inbox; remove it from "
                            f"[trust] trusted in {vault.root / 'memvault.toml'} to keep sessions' facts proposals")
    vault.prepare_model(say)  # the first session's context must not wait for the model's one-time preparation
    lines = _report_lines(report) or [f"{runtime} ({report.scope}): already installed"]
    lines.append(f"vault: {vault.root}; sessions start with its memory and their turns are captured as episodes "
                 f"of {source}")
    return Out(report.to_dict(), lines, notes=report.notes)


@agent.command("uninstall")
@click.argument("runtime", type=click.Choice(RUNTIME_NAMES))
@_scope_options
@output
def agent_uninstall(runtime, scope, project):
    """Remove exactly what 'memvault agent install RUNTIME' added (the rest of each file is left as it is)."""
    from ..agents import runtimes

    report = runtimes.uninstall(runtime, scope=scope, project=Path(project) if project else None)
    return Out(report.to_dict(), _report_lines(report) or [f"{runtime} ({scope}): nothing to remove"],
               notes=report.notes)


@agent.command("status")
@click.option("--project", "project", type=click.Path(file_okay=False), metavar="DIR",
              help="The project whose settings are checked. Default: the current directory.")
@output
@pass_ctx
def agent_status(ctx, project):
    """What is installed for each runtime (user and project settings), whether its Python and vault still exist,
    and, for this vault, the sessions captured and the last hook problems."""
    from ...rules.errors import VaultNotFound
    from ..agents import runtimes

    data: dict = {"runtimes": []}
    lines: list[str] = []
    notes: list[str] = []
    for name in RUNTIME_NAMES:
        for scope in ("user", "project"):
            report = runtimes.status(name, scope=scope, project=Path(project) if project else None)
            data["runtimes"].append(report.to_dict())
            notes += report.notes
            state = report.state
            if not state.get("mcp") and not state.get("hooks"):
                continue
            hooks = ", ".join(f"{event} {check}" for event, check in state["hooks"].items()) or "no hooks"
            lines.append(f"{name} ({scope}): MCP server {state.get('mcp') or 'missing'}; {hooks}")
    if not lines:
        lines.append("no runtime is wired to memvault here; 'memvault agent install claude-code|codex|gemini'")
    try:
        vault = ctx.vault  # --vault, MEMVAULT_DIR, the nearest parent holding memvault.toml
    except VaultNotFound:
        # A session's cwd is a project, rarely inside the vault: the vault then is the one the installs point at.
        from ...core.vault import Vault

        named = runtimes.installed_vaults(Path(project) if project else None)
        vault = Vault.open(named[0], daemon=False) if named else None
        if len(named) > 1:
            notes.append("the installed hooks point at several vaults (" + ", ".join(map(str, named))
                         + f"); shown: {named[0]} (--vault PATH for another)")
    if vault is not None:
        sessions = vault.captures.sessions()
        data["vault"] = str(vault.root)
        data["sessions"] = [{"runtime": s.runtime, "session_id": s.session_id, "transcript": s.transcript,
                             "stored_bytes": s.stored_bytes, "capped": s.capped} for s in sessions[:20]]
        lines.append(f"vault {vault.root}: {len(sessions)} sessions captured"
                     + (f", the last {sessions[0].runtime} {sessions[0].session_id}" if sessions else ""))
        for name in RUNTIME_NAMES:
            if vault.facts.is_trusted(f"agent:{name}"):
                notes.append(f"[trust] trusts agent:{name}: facts from its sessions would not wait for a person")
        from ...core.stats import add_watchers

        watchers: dict = {"summary": []}
        add_watchers(watchers, vault.state_dir)  # the state of the processes that follow the vault (warm, MCP, watch)
        data["watchers"] = watchers["watchers"]
        lines += [f"  {line}" for line in watchers["summary"]]
        log = vault.state_dir / "agents.log"
        if log.is_file():
            tail = log.read_text(encoding="utf-8", errors="replace").splitlines()[-3:]
            data["log"] = tail
            lines += [f"  {line}" for line in tail]
    return Out(data, lines, notes=notes)


@agent.command("print")
@click.argument("client")
@click.option("--vault", "vault_path", type=click.Path(file_okay=False), metavar="PATH",
              help="The vault the server uses (default: this command's vault).")
@pass_ctx
def agent_print(ctx, client, vault_path):
    """Print the MCP server entry for CLIENT: claude-code, codex, gemini, or any other MCP client (claude-desktop,
    cursor, windsurf, openclaw, vscode; another name gets the common mcpServers shape). Writes are stamped
    agent:CLIENT. Where it goes is printed on stderr."""
    from ...core.vault import Vault
    from ...rules.validation import validate_source
    from ..agents import runtimes

    validate_source(f"agent:{client}", "CLIENT")
    vault = Vault.open(vault_path) if vault_path else ctx.vault
    text, where = runtimes.print_entry(client, vault.root)
    echo(f"memvault: paste into {where}", err=True)
    echo(text)


@agent.command("capture")
@click.argument("runtime", type=click.Choice(RUNTIME_NAMES))
@click.argument("transcript", type=click.Path(dir_okay=False, exists=True))
@click.option("--session", "session_id", help="The session id (default: the transcript's own).")
@click.option("--final", is_flag=True, help="The session is over: store its last turn even if not marked done.")
@output
@pass_ctx
def agent_capture(ctx, runtime, transcript, session_id, final):
    """Append the new turns of a TRANSCRIPT (RUNTIME's session file) as episodes of agent:RUNTIME, as the hooks
    do: secrets redacted, <private> spans dropped, turns already captured skipped."""
    from ..agents.capture import capture

    report = capture(ctx.vault, runtime, transcript, session_id=session_id, final=final)
    return Out(report.to_dict(), [report.summary()], notes=report.problems)


@agent.command("context")
@click.option("--cwd", type=click.Path(file_okay=False), help="The project directory (default: here).")
@click.option("--prompt", help="Show what a prompt would get instead (per-prompt recall).")
@click.option("--mode", type=click.Choice(["hybrid", "keyword"]), default="keyword", show_default=True,
              help="keyword: as a hook with no warm process builds it; hybrid: as the warm process does.")
@output
@pass_ctx
def agent_context(ctx, cwd, prompt, mode):
    """Print the context block a session starting in CWD gets (what the session-start hook injects)."""
    from ..agents.context import build

    result = build(ctx.vault, kind="prompt" if prompt else "session", cwd=cwd, prompt=prompt, mode=mode,
                   start="preview")
    return Out(result.to_dict(), [result.text or "(nothing: no memory clears the relevance floor)"],
               notes=result.notices)  # memvault's own notices: on stderr, as the hook logs them, not in the block
