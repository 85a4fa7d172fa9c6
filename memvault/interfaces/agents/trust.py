"""What a runtime must be given before it uses what ``memvault agent install`` wrote: each one ignores new hooks,
servers or whole project folders until a person trusts them, silently (seen with Claude Code 2.1.197, Codex CLI
0.171 and Gemini CLI 0.61: their ``mcp list`` showed the server pending, absent or disabled)."""
from __future__ import annotations

from pathlib import Path

from .configfiles import toml_string


def trust_notes(name: str, scope: str, project: Path) -> list[str]:
    """The notes an install of ``name`` at ``scope`` reports, ``project`` being the project folder (scope project)."""
    notes = []
    if name == "codex":
        notes.append("Codex runs a new or changed hook only after you trust it: start codex and review them with "
                     "/hooks (older versions also need [features] codex_hooks = true)")
    if name == "codex" and scope == "project":
        notes.append(f"Codex reads {project / '.codex'} only in a project you trust: it asks the first time codex "
                     f"starts there (or: trust_level = \"trusted\" under [projects.{toml_string(str(project))}] in "
                     "~/.codex/config.toml); codex exec never asks")
    if name == "claude-code" and scope == "project":
        notes.append("Claude Code asks once before it uses a project's .mcp.json servers")
    if name == "gemini":
        notes.append("Gemini CLI connects no MCP server in a folder it does not trust ('gemini mcp list' shows "
                     "memvault Disabled): accept its trust dialog in each folder you work in")
    return notes
