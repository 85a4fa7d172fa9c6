"""Wiring memvault into an agent runtime: its MCP server entry and its lifecycle hooks, merged into the runtime's own
settings files (docs/agents.md cites each runtime's documented format).

| runtime | MCP server | hooks | events |
|---|---|---|---|
| Claude Code | ``~/.claude.json`` / ``.mcp.json`` | ``~/.claude/settings.json`` / ``.claude/settings.json`` | SessionStart, UserPromptSubmit (opt-in), PreCompact, SessionEnd |
| Codex CLI | ``$CODEX_HOME/config.toml`` / ``.codex/config.toml`` | ``hooks.json`` beside it | SessionStart, UserPromptSubmit (opt-in), PreCompact, Stop |
| Gemini CLI | ``~/.gemini/settings.json`` / ``.gemini/settings.json`` | the same file | SessionStart, BeforeAgent (opt-in), PreCompress, SessionEnd |

Install merges: the user's other hooks, servers, comments and settings are kept byte for byte, a backup of each
file is written before its first change, running it twice changes nothing, and uninstall removes exactly what
install added (the containers it created, from a record kept in memvault's state directory). The MCP server it
registers stamps ``agent:<runtime>`` on every write, never a trusted source.

A project's files are shared (committed, pulled by teammates), so ``--scope project`` writes nothing in them that
names this host: the command is ``memvault`` found on PATH (``memvault hook ...`` for the hooks), and the vault is
named relative to the project (``--in-project memory``: resolved against ``$CLAUDE_PROJECT_DIR``, which Claude
Code sets for its hooks and MCP servers, else the session's directory). A vault outside the project cannot be named
that way: the shared files then name none (``memvault`` finds it from ``MEMVAULT_DIR`` or the working directory),
and this host's vault goes to the runtime's untracked local files (Claude Code: the local-scope server in
``~/.claude.json``, which wins over ``.mcp.json``, and ``MEMVAULT_DIR`` in ``.claude/settings.local.json``).
"""
from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...rules.errors import ConfigError, InvalidValue, UnsafePath
from ...rules.fsutil import (atomic_write, check_dir, ensure_dir, locked, read_regular, remove, remove_dir,
                             write_new_exclusive)
from .configfiles import JsonText, TomlBlock, toml_string
from .trust import trust_notes

HOOK_MODULE = "memvault.interfaces.agents.hook"
SERVER = "memvault"
#: The command a project's shared files run: memvault on each teammate's PATH.
COMMAND = "memvault"
TOML_MARKER = "# memvault: MCP server added by 'memvault agent install codex'"
#: Other MCP clients `memvault agent print` knows, and where their entry goes.
CLIENTS = {
    "claude-desktop": "claude_desktop_config.json (Settings > Developer > Edit Config), under mcpServers",
    "cursor": "~/.cursor/mcp.json or .cursor/mcp.json, under mcpServers",
    "windsurf": "~/.codeium/windsurf/mcp_config.json, under mcpServers",
    "openclaw": "~/.openclaw/openclaw.json, under mcp.servers (or: openclaw mcp set)",
    "vscode": ".vscode/mcp.json, under servers",
}


@dataclass(frozen=True)
class HookSpec:
    """One lifecycle hook: the runtime's event, memvault's hook event, and how the runtime should run it."""

    event: str
    action: str                 # session-start, prompt, capture
    timeout: float | None       # seconds (converted to the runtime's unit), None: the runtime's default
    detach: bool = False
    optional: bool = False      # per-prompt recall: only with --per-prompt
    status: str | None = None


@dataclass(frozen=True)
class Runtime:
    name: str
    title: str
    hooks: tuple[HookSpec, ...]
    timeout_unit: float = 1.0   # seconds per unit of the runtime's "timeout" field


RUNTIMES: dict[str, Runtime] = {
    "claude-code": Runtime("claude-code", "Claude Code", (
        HookSpec("SessionStart", "session-start", 30, status="memvault: loading memory"),
        HookSpec("UserPromptSubmit", "prompt", 10, optional=True),
        HookSpec("PreCompact", "capture", 60, status="memvault: saving the session"),
        HookSpec("SessionEnd", "capture", None, detach=True),
    )),
    "codex": Runtime("codex", "Codex CLI", (
        HookSpec("SessionStart", "session-start", 30, status="memvault: loading memory"),
        HookSpec("UserPromptSubmit", "prompt", 10, optional=True),
        HookSpec("PreCompact", "capture", 60, status="memvault: saving the session"),
        HookSpec("Stop", "capture", 10, detach=True),
    )),
    "gemini": Runtime("gemini", "Gemini CLI", (
        HookSpec("SessionStart", "session-start", 30),
        HookSpec("BeforeAgent", "prompt", 10, optional=True),
        HookSpec("PreCompress", "capture", 60, detach=True),
        HookSpec("SessionEnd", "capture", 10, detach=True),
    ), timeout_unit=0.001),
}


@dataclass
class Report:
    """What install, uninstall or status did or found, as lines for people and JSON for machines."""

    runtime: str
    scope: str
    files: dict[str, str] = field(default_factory=dict)       # role -> path
    changed: list[str] = field(default_factory=list)
    backups: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    state: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"runtime": self.runtime, "scope": self.scope, "files": self.files, "changed": self.changed,
                "backups": self.backups, "notes": self.notes, **({"state": self.state} if self.state else {})}


# ------------------------------------------------------------------------------------------------ where
def runtime(name: str) -> Runtime:
    if name not in RUNTIMES:
        raise InvalidValue("RUNTIME", f"{name!r} is not one of {', '.join(RUNTIMES)} (for another MCP client: "
                                      f"'memvault agent print {'|'.join(CLIENTS)}')")
    return RUNTIMES[name]


def home() -> Path:
    return Path(os.environ.get("HOME") or Path.home())


def paths(name: str, scope: str, project: Path | None = None) -> dict[str, Path]:
    """The files a runtime reads for ``scope``: ``mcp`` (its MCP servers) and ``hooks``."""
    if scope not in ("user", "project"):
        raise InvalidValue("--scope", f"{scope!r} is not user or project")
    base = (project or Path.cwd()).resolve()
    if name == "claude-code":
        if scope == "project":
            return {"mcp": base / ".mcp.json", "hooks": base / ".claude" / "settings.json"}
        config_dir = os.environ.get("CLAUDE_CONFIG_DIR")
        claude = Path(config_dir) if config_dir else home() / ".claude"
        mcp = claude / ".claude.json" if config_dir else home() / ".claude.json"
        return {"mcp": mcp, "hooks": claude / "settings.json"}
    if name == "codex":
        folder = base / ".codex" if scope == "project" else Path(os.environ.get("CODEX_HOME") or home() / ".codex")
        return {"mcp": folder / "config.toml", "hooks": folder / "hooks.json"}
    folder = base / ".gemini" if scope == "project" else home() / ".gemini"
    return {"mcp": folder / "settings.json", "hooks": folder / "settings.json"}


def state_dir() -> Path:
    """memvault's own per-user state (install records and backups): ``$XDG_STATE_HOME/memvault``."""
    return Path(os.environ.get("XDG_STATE_HOME") or home() / ".local" / "state").resolve() / "memvault"


# ------------------------------------------------------------------------------------------------ what
@dataclass(frozen=True)
class Shared:
    """How a project's shared files name memvault: ``memvault`` on PATH, and the vault relative to the project
    (``in_project``), or no vault at all (None: it lies outside the project)."""

    in_project: str | None


def shared_for(vault: Path, project: Path) -> Shared:
    """The vault as a project's shared files can name it: its path inside ``project``, or None."""
    try:
        rel = vault.resolve().relative_to(project.resolve()).as_posix()
    except ValueError:
        return Shared(None)
    return Shared(rel or ".")


def hook_command(name: str, spec: HookSpec, vault: Path | Shared, python: str | None = None) -> str:
    if isinstance(vault, Shared):
        argv = [COMMAND, "hook", spec.action, "--runtime", name]
        argv += ["--in-project", vault.in_project] if vault.in_project else []
    else:
        argv = [python or sys.executable, "-P", "-m", HOOK_MODULE, spec.action, "--runtime", name, "--vault", str(vault)]
    return shlex.join(argv + (["--detach"] if spec.detach else []))


def handler(rt: Runtime, spec: HookSpec, vault: Path | Shared, python: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "command", "command": hook_command(rt.name, spec, vault, python)}
    if rt.name == "gemini":
        out = {"name": f"memvault-{spec.action}", **out}
    if spec.timeout is not None:
        out["timeout"] = int(spec.timeout / rt.timeout_unit)
    if spec.status and rt.name != "gemini":
        out["statusMessage"] = spec.status
    return out


def server_args(client: str, vault: Path | None) -> list[str]:
    """``python -P -m memvault [--vault V] mcp --source agent:<client>``: writes stamped with the client's name."""
    return ["-P", "-m", "memvault", *(["--vault", str(vault)] if vault else []), "mcp", "--source", f"agent:{client}"]


def server_entry(client: str, vault: Path | Shared | None, python: str | None = None) -> dict[str, Any]:
    if isinstance(vault, Shared):
        args = ["mcp", "--source", f"agent:{client}"] + (["--in-project", vault.in_project] if vault.in_project else [])
        entry: dict[str, Any] = {"command": COMMAND, "args": args}
    else:
        entry = {"command": python or sys.executable, "args": server_args(client, vault)}
    if client == "claude-code":
        entry = {"type": "stdio", **entry, "env": {}}
    return entry


def is_ours_server(value: Any) -> bool:
    """A server entry memvault wrote: ``... mcp --source agent:<name>`` (whatever Python and vault it names)."""
    if not isinstance(value, dict) or not isinstance(value.get("args"), list):
        return False
    args = [str(a) for a in value["args"]]
    return "mcp" in args and "--source" in args and args.index("--source") + 1 < len(args) and \
        args[args.index("--source") + 1].startswith("agent:") and \
        ("memvault" in args or os.path.basename(str(value.get("command", ""))) == COMMAND)


def is_ours_handler(value: Any) -> bool:
    command = str(value.get("command", "")) if isinstance(value, dict) else ""
    return HOOK_MODULE in command or command.startswith(f"{COMMAND} hook ")


def print_entry(client: str, vault: Path | None, python: str | None = None) -> tuple[str, str]:
    """The MCP entry for ``client`` (a runtime or another MCP client) and where it goes."""
    if client == "codex":
        return toml_block(vault, python), "Codex's config.toml ($CODEX_HOME/config.toml or .codex/config.toml)"
    entry = server_entry(client, vault, python)  # agent:CLIENT, known or not: its writes told from any other's
    if client == "openclaw":
        return json.dumps({"mcp": {"servers": {SERVER: entry}}}, indent=2), CLIENTS[client]
    if client == "vscode":
        return json.dumps({"servers": {SERVER: {"type": "stdio", **entry}}}, indent=2), CLIENTS[client]
    where = CLIENTS.get(client) or (f"{client}'s settings, under mcpServers" if client not in RUNTIMES
                                    else str(paths(client, "user")["mcp"]))
    return json.dumps({"mcpServers": {SERVER: entry}}, indent=2), where


def toml_block(vault: Path | Shared | None, python: str | None = None) -> str:
    entry = server_entry("codex", vault, python)
    args = ", ".join(toml_string(a) for a in entry["args"])
    return (f"{TOML_MARKER} (removed by 'memvault agent uninstall codex')\n[mcp_servers.{SERVER}]\n"
            f"command = {toml_string(entry['command'])}\nargs = [{args}]\n")


# ------------------------------------------------------------------------------------------------ install
class _Files:
    """The settings files one command edits: each read once, edited in memory, and written once at the end (after a
    backup of what it was), with the install record."""

    def __init__(self, report: Report, *, follow: bool = True) -> None:
        self.report = report
        self.follow = follow  # a user's own links (dotfiles) are followed; a project's never (a commit can hold one)
        self.first: dict[Path, str | None] = {}
        self.texts: dict[Path, str | None] = {}
        self.made: list[str] = []  # folders this command created
        self.record = _Record()

    def target(self, path: Path) -> Path:
        return _target(path) if self.follow else path

    def read(self, path: Path) -> str | None:
        path = self.target(path)
        if path not in self.first:
            try:
                self.first[path] = _read_file(path, follow=self.follow)
            except FileNotFoundError:
                self.first[path] = None
            except UnicodeDecodeError:
                raise ConfigError(path, "not UTF-8 text; not changed") from None
            self.texts[path] = self.first[path]
        return self.texts[path]

    def write(self, path: Path, text: str | None, original: str | None = None) -> None:
        self.texts[self.target(path)] = text

    def flush(self) -> None:
        self._unchanged()
        emptied: list[str] = []
        for path, text in self.texts.items():
            original = self.first[path]
            if text == original:
                continue
            if original is not None:
                self.report.backups.append(str(_backup(path, original)))
            if text is None:
                remove(path)
                emptied += self.record.get(path).get("created_dirs", [])
                self.report.changed.append(f"removed {path}")
                continue
            created = []
            parent = path.parent
            while not parent.exists():
                created.append(str(parent))
                parent = parent.parent
            ensure_dir(path.parent)
            made = [d for d in self.made if path.parent == Path(d) or Path(d) in path.parents]
            if created or made:
                self.record.get(path)["created_dirs"] = created + made
            self.made += created
            mode = path.stat().st_mode & 0o777 if path.exists() else None
            atomic_write(path, text.encode("utf-8"), mode=mode)
            self.report.changed.append(f"{'updated' if original is not None else 'created'} {path}")
        for folder in sorted(set(emptied), key=len, reverse=True):  # the folders install made, once empty
            with contextlib.suppress(OSError):
                remove_dir(Path(folder))
        self.record.save()

    def _unchanged(self) -> None:
        """ConfigError, before anything is written, when a file to be written no longer holds what was read (a
        running agent rewrites its own settings, Claude Code its ~/.claude.json at every start, and writing the
        edited text over its change lost it; the window left is the time of one rename) or is read-only (the new
        file took its place, read-only too)."""
        for path, text in self.texts.items():
            if text == self.first[path]:
                continue
            try:
                now: str | None = _read_file(path, follow=self.follow)
            except FileNotFoundError:
                now = None
            except UnicodeDecodeError:
                now = "\x00"
            if now != self.first[path]:
                raise ConfigError(path, "changed by another program while memvault was editing it; not changed: "
                                        "run the command again")
            if now is not None and not os.stat(path).st_mode & 0o222:  # by its mode, not access(): root may write
                raise ConfigError(path, "read-only (its mode says it is not to be changed); not changed: make it "
                                        "writable, or paste what 'memvault agent print' shows")


def _backup(path: Path, original: str) -> Path:
    """A new backup of ``path``'s ``original`` text, never written over an earlier one: backups were named by the
    second, and a second change within it wrote over the first backup (the file as the person had it)."""
    stem = f"{str(path).strip('/').replace('/', '%')}.{time.strftime('%Y%m%dT%H%M%S')}"
    for n in range(1000):
        backup = state_dir() / "backups" / (stem if n == 0 else f"{stem}.{n}")
        try:
            write_new_exclusive(backup, original.encode("utf-8"), mode=0o600)
            return backup
        except FileExistsError:
            continue
    raise ConfigError(path, f"no free name for its backup in {state_dir() / 'backups'}; not changed")


@contextlib.contextmanager
def _one_at_a_time() -> Iterator[None]:
    """Installs and uninstalls of this user, one at a time: each reads the install record, edits files and saves
    the record, and two at once (two runtimes installed by a setup script) lost one's record, so its uninstall no
    longer knew what it had created."""
    with locked(ensure_dir(state_dir()) / "agents-install.lock"):
        yield


def install(name: str, vault: Path, *, scope: str = "user", per_prompt: bool = False, project: Path | None = None,
            python: str | None = None) -> Report:
    """Merge memvault's MCP server and hooks into ``name``'s settings for ``scope`` (see the module doc)."""
    with _one_at_a_time():
        return _install(name, vault, scope=scope, per_prompt=per_prompt, project=project, python=python)


def _install(name: str, vault: Path, *, scope: str, per_prompt: bool, project: Path | None,
             python: str | None) -> Report:
    rt = runtime(name)
    where = paths(name, scope, project)
    report = Report(name, scope, {k: str(v) for k, v in where.items()})
    files = _Files(report, follow=scope == "user")
    specs = [s for s in rt.hooks if per_prompt or not s.optional]
    named: Path | Shared = vault
    if scope == "project":  # shared files: nothing of this host (see the module doc)
        base = (project or Path.cwd()).resolve()
        named = shared_for(vault, base)
        if named.in_project is None:
            _install_local(files, name, base, vault, python, report)
    if name == "codex":
        _install_toml(files, where["mcp"], named, python)
    else:
        _edit_json(files, where["mcp"], lambda doc, rec: _put_server(doc, rec, server_entry(name, named, python),
                                                                      report))
    _edit_json(files, where["hooks"], lambda doc, rec: _put_hooks(doc, rec, rt, specs, named, python))
    files.flush()
    if not report.changed:
        report.notes.append(f"{rt.title}: already installed, nothing changed")
    report.notes += trust_notes(name, scope, (project or Path.cwd()).resolve())
    return report


def uninstall(name: str, *, scope: str = "user", project: Path | None = None) -> Report:
    """Remove exactly what :func:`install` added to ``name``'s settings for ``scope``."""
    with _one_at_a_time():
        return _uninstall(name, scope=scope, project=project)


def _uninstall(name: str, *, scope: str, project: Path | None) -> Report:
    rt = runtime(name)
    where = paths(name, scope, project)
    report = Report(name, scope, {k: str(v) for k, v in where.items()})
    files = _Files(report, follow=scope == "user")
    if name == "codex":
        _uninstall_toml(files, where["mcp"])
    else:
        _edit_json(files, where["mcp"], lambda doc, rec: _drop_server(doc, report), removing=True)
    if name == "claude-code" and scope == "project":  # what install put in this host's local files, if anything
        base = (project or Path.cwd()).resolve()
        _edit_json(files, paths(name, "user")["mcp"],
                   lambda doc, rec: _drop_server(doc, None, ("projects", str(base))), removing=True)
        _edit_json(files, base / ".claude" / "settings.local.json", lambda doc, rec: _drop_env(doc, "MEMVAULT_DIR"),
                   removing=True)
    _edit_json(files, where["hooks"], lambda doc, rec: _drop_hooks(doc), removing=True)
    files.flush()
    for path in {*where.values()}:
        files.record.forget(files.target(path))
    files.record.save()
    if not report.changed:
        report.notes.append(f"{rt.title}: nothing of memvault's was installed there")
    return report


def _edit_json(files: _Files, path: Path, edit: Any, *, removing: bool = False) -> None:
    """Apply ``edit(doc, record)`` to one JSON settings file and write it back (only when it changed). Removing,
    the containers the edit emptied are tidied (:func:`_tidy`) and a file left empty goes when memvault made it."""
    original = files.read(path)
    if removing and original is None:
        return
    doc = JsonText(original or "", path)
    rec = files.record.get(files.target(path))
    known = bool(rec)
    if files.first[files.target(path)] is None:
        rec["created_file"] = True
    touched = edit(doc, rec) or set()
    if touched:
        _tidy(doc, rec if known else None, touched)
    text: str | None = doc.text if original is not None or doc.text.endswith("\n") else doc.text + "\n"
    if not doc.root.members and (original is None or (removing and touched and (rec.get("created_file")
                                                                                or not known))):
        text = None
    files.texts[files.target(path)] = text
    files.write(path, text, original)


def _ensure(doc: JsonText, rec: dict[str, Any], path: tuple[str, ...], kind: str) -> None:
    """Create the containers along ``path`` that are missing (recorded as created), and note an empty one that was
    there (its text is put back when memvault's entries leave it empty again)."""
    for depth in range(1, len(path) + 1):
        node = doc.get(path[:depth])
        want = "object" if depth < len(path) else kind
        containers = rec.setdefault("containers", {})
        key = "/".join(path[:depth])
        if node is None:
            doc.set_member(path[:depth - 1], path[depth - 1], {} if want == "object" else [])
            containers.setdefault(key, "created")
        elif node.kind != want:
            raise ConfigError(doc.path, f"'{key}' is not a JSON {want}; not changed")
        elif not (node.members or node.items) and key not in containers:
            containers[key] = doc.text[node.start:node.end]


def _install_local(files: _Files, name: str, project: Path, vault: Path, python: str | None, report: Report) -> None:
    """A vault outside the project, for this host only, in the runtime's untracked local files."""
    if name != "claude-code":
        report.notes.append(f"the vault {vault} is outside the project {project}: the project's files name no "
                            "vault, so memvault finds it from MEMVAULT_DIR (set it on each machine) or the working "
                            "directory")
        return
    where = paths(name, "user")["mcp"]
    base = ("projects", str(project))
    _edit_json(files, where, lambda doc, rec: _put_server(doc, rec, server_entry(name, vault, python), report,
                                                          base=base))
    local = project / ".claude" / "settings.local.json"
    _edit_json(files, local, lambda doc, rec: _put_env(doc, rec, {"MEMVAULT_DIR": str(vault)}))
    report.notes.append(f"the vault {vault} is outside the project: the shared files name none; this host's vault "
                        f"is in {where} (local scope) and {local} (untracked); a teammate sets MEMVAULT_DIR or runs "
                        "this install too")


def _put_env(doc: JsonText, rec: dict[str, Any], env: dict[str, str]) -> None:
    _ensure(doc, rec, ("env",), "object")
    for key, value in env.items():
        current = doc.get(("env", key))
        if current is None:
            doc.set_member(("env",), key, value)
        elif doc.value(current) != value:
            doc.replace(current, value)


def _drop_env(doc: JsonText, key: str) -> set[str]:
    env = doc.get(("env",))
    if env is None or env.kind != "object":
        return set()
    for i, (k, _, _) in enumerate(env.members):
        if k == key:
            doc.remove(env, i)
            return {"env"}
    return set()


def _put_server(doc: JsonText, rec: dict[str, Any], entry: dict[str, Any], report: Report,
                base: tuple[str, ...] = ()) -> None:
    current = doc.get((*base, "mcpServers", SERVER))
    if current is not None:
        value = doc.value(current)
        if value == entry:
            return
        if not is_ours_server(value):
            report.notes.append(f"an MCP server named {SERVER!r} is already configured in {doc.path} (not by this "
                                "install): left as it is")
            return
        doc.replace(current, entry)
        return
    _ensure(doc, rec, (*base, "mcpServers"), "object")
    doc.set_member((*base, "mcpServers"), SERVER, entry)


def _drop_server(doc: JsonText, report: Report | None, base: tuple[str, ...] = ()) -> set[str]:
    servers = doc.get((*base, "mcpServers"))
    if servers is None or servers.kind != "object":
        return set()
    for i, (key, _, node) in enumerate(servers.members):
        if key == SERVER and is_ours_server(doc.value(node)):
            doc.remove(servers, i)
            return {"/".join((*base, "mcpServers"))} | {"/".join(base[:n]) for n in range(1, len(base) + 1)}
    if report is not None and servers.member(SERVER) is not None:
        report.notes.append(f"the MCP server named {SERVER!r} in {doc.path} was not installed by memvault: kept")
    return set()


def _put_hooks(doc: JsonText, rec: dict[str, Any], rt: Runtime, specs: list[HookSpec], vault: Path | Shared,
               python: str | None) -> set[str]:
    wanted = {s.event: s for s in specs}
    touched: set[str] = set()
    for spec in rt.hooks:
        if spec.event not in wanted:
            touched |= _drop_event(doc, spec.event)  # per-prompt recall turned off: installed without --per-prompt
            continue
        desired = handler(rt, spec, vault, python)
        found = _our_handlers(doc, spec.event)
        if found:
            (group_i, hook_i), rest = found[0], found[1:]
            node = doc.get(("hooks", spec.event)).items[group_i].member("hooks").items[hook_i]  # type: ignore[union-attr]
            if doc.value(node) != desired:
                doc.replace(node, desired)
            for _ in rest:  # duplicates (two installs by hand): one is enough
                _drop_one(doc, spec.event, skip_first=True)
            continue
        _ensure(doc, rec, ("hooks", spec.event), "array")
        doc.append_item(("hooks", spec.event), {"hooks": [desired]})
    return touched


def _our_handlers(doc: JsonText, event: str) -> list[tuple[int, int]]:
    arr = doc.get(("hooks", event))
    found = []
    if arr is None or arr.kind != "array":
        return found
    for gi, group in enumerate(arr.items):
        hooks = group.member("hooks") if group.kind == "object" else None
        if hooks is None or hooks.kind != "array":
            continue
        for hi, item in enumerate(hooks.items):
            if item.kind == "object" and is_ours_handler(doc.value(item)):
                found.append((gi, hi))
    return found


def _drop_one(doc: JsonText, event: str, *, skip_first: bool = False) -> bool:
    found = _our_handlers(doc, event)[1 if skip_first else 0:]
    if not found:
        return False
    gi, hi = found[-1]
    arr = doc.get(("hooks", event))
    assert arr is not None
    group = arr.items[gi]
    hooks = group.member("hooks")
    assert hooks is not None
    if len(hooks.items) == 1 and len(group.members) <= 2 and all(k in ("hooks", "matcher") for k, _, _ in
                                                                  group.members):
        doc.remove(arr, gi)  # the group was memvault's alone
    else:
        doc.remove(hooks, hi)  # the person added their own handler beside memvault's: keep theirs
    return True


def _drop_event(doc: JsonText, event: str) -> set[str]:
    touched = set()
    while _drop_one(doc, event):
        touched |= {f"hooks/{event}", "hooks"}
    return touched


def _drop_hooks(doc: JsonText) -> set[str]:
    hooks = doc.get(("hooks",))
    if hooks is None or hooks.kind != "object":
        return set()
    touched: set[str] = set()
    for event, _, _ in list(hooks.members):
        touched |= _drop_event(doc, event)
    return touched


def _tidy(doc: JsonText, rec: dict[str, Any] | None, touched: set[str]) -> None:
    """The containers memvault's removals left empty: one install created goes, one it found empty gets its
    original text back, one that held the person's own entries then stays. Without a record (installed on
    another machine: a project's shared file), a container memvault's removal emptied goes."""
    containers: dict[str, str] = (rec or {}).get("containers", {})
    for key in sorted(touched, key=lambda k: -len(_split(k))):
        path = _split(key)
        node = doc.get(path)
        if node is None or node.kind == "scalar" or node.members or node.items:
            continue
        origin = containers.get(key)
        if origin is None and rec is not None:
            continue  # it held the person's own entries when memvault came
        if origin is None or origin == "created":
            parent = doc.get(path[:-1])
            assert parent is not None
            index = next(i for i, (k, _, _) in enumerate(parent.members) if k == path[-1])
            doc.remove(parent, index)
        else:
            doc.restore(node, origin)


def _split(key: str) -> tuple[str, ...]:
    """A container's recorded key as its path: ``projects/<abs path>/mcpServers`` (~/.claude.json's local scope)
    keeps the project's path whole."""
    if key.startswith("projects/"):
        rest = key[len("projects/"):]
        if rest.endswith("/mcpServers"):
            return ("projects", rest[: -len("/mcpServers")], "mcpServers")
        return ("projects", rest)
    return tuple(key.split("/"))


def _install_toml(files: _Files, path: Path, vault: Path | Shared, python: str | None) -> None:
    original = files.read(path)
    block = TomlBlock(original or "", TOML_MARKER, path)
    servers = block.data.get("mcp_servers", {})
    if isinstance(servers, dict) and SERVER in servers and block.find() is None:
        files.report.notes.append(f"[mcp_servers.{SERVER}] is already in {path} (not by this install): left as it is")
        return
    prefix = block.put(toml_block(vault, python))
    rec = files.record.get(files.target(path))
    rec.setdefault("toml_prefix", prefix)
    if original is None:
        rec["created_file"] = True
    files.write(path, block.text, original)


def _uninstall_toml(files: _Files, path: Path) -> None:
    original = files.read(path)
    if original is None:
        return
    block = TomlBlock(original, TOML_MARKER, path)
    rec = files.record.get(files.target(path))
    if not block.drop(rec.get("toml_prefix")):
        return
    text: str | None = block.text
    if rec.get("created_file") and not block.text.strip():
        text = None
    files.write(path, text, original)


def _target(path: Path) -> Path:
    """Where a settings file really is: a symlink (a dotfiles repository) is followed, never replaced."""
    return Path(os.path.realpath(path))


class _Record:
    """What install created in each settings file (containers, files, folders, separators), so uninstall removes
    exactly that: ``<state>/agents-installs.json``."""

    def __init__(self) -> None:
        self.path = state_dir() / "agents-installs.json"
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            data = {}
        self.data: dict[str, dict[str, Any]] = data if isinstance(data, dict) else {}
        self.dirty = False

    def get(self, path: Path) -> dict[str, Any]:
        self.dirty = True
        return self.data.setdefault(str(path), {})

    def forget(self, path: Path) -> None:
        if self.data.pop(str(path), None) is not None:
            self.dirty = True

    def save(self) -> None:
        if not self.dirty:
            return
        self.data = {k: v for k, v in self.data.items() if v}
        atomic_write(self.path, (json.dumps(self.data, indent=2, sort_keys=True) + "\n").encode("utf-8"), mode=0o600)


# ------------------------------------------------------------------------------------------------ status
def status(name: str, *, scope: str = "user", project: Path | None = None) -> Report:
    """What is installed for ``name`` in ``scope``: the MCP server entry and each hook, and whether their Python
    and vault still exist."""
    rt = runtime(name)
    where = paths(name, scope, project)
    report = Report(name, scope, {k: str(v) for k, v in where.items()})
    state: dict[str, Any] = {"mcp": None, "hooks": {}}
    try:
        if name == "codex":
            text = _read(where["mcp"], follow=scope == "user")
            block = TomlBlock(text or "", TOML_MARKER, where["mcp"])
            server = block.data.get("mcp_servers", {}).get(SERVER)
            state["mcp"] = ("installed" if block.find() is not None else "other") if server else None
        else:
            doc = JsonText(_read(where["mcp"], follow=scope == "user") or "", where["mcp"])
            node = doc.get(("mcpServers", SERVER))
            server = doc.value(node) if node is not None else None
            state["mcp"] = ("installed" if is_ours_server(server) else "other") if server is not None else None
            missing = _not_on_path(str(server.get("command", ""))) if isinstance(server, dict) else None
            if missing:
                report.notes.append(f"the MCP server in {where['mcp']} runs {missing}, which is not on PATH here: "
                                    "install memvault on this machine (pip install memvault) or put it on PATH")
        doc = JsonText(_read(where["hooks"], follow=scope == "user") or "", where["hooks"])
        for spec in rt.hooks:
            found = _our_handlers(doc, spec.event)
            if not found:
                continue
            gi, hi = found[0]
            node = doc.get(("hooks", spec.event)).items[gi].member("hooks").items[hi]  # type: ignore[union-attr]
            command = str(doc.value(node).get("command", ""))
            state["hooks"][spec.event] = _check_command(command)
            vault = _vault_of(command)
            if vault is not None:
                state.setdefault("vault", str(vault))
        if name == "claude-code" and doc.get(("disableAllHooks",)) is not None and \
                doc.value(doc.get(("disableAllHooks",))) is True:  # type: ignore[arg-type]
            report.notes.append(f"{where['hooks']} sets disableAllHooks: true, so no hook runs")
    except (ConfigError, UnsafePath) as exc:
        report.notes.append(str(exc))
    report.state = state
    return report


def _read_file(path: Path, *, follow: bool) -> str:
    """A settings file's text. In a project (``follow`` off) nothing is followed: a folder on the way or the file
    that is a symlink is UnsafePath (a repository can commit ``.mcp.json -> ~/.bashrc``; install would write there)."""
    if follow:
        return path.read_text(encoding="utf-8")
    check_dir(path.parent)
    return read_regular(path).decode("utf-8")


def _read(path: Path, *, follow: bool = True) -> str | None:
    try:
        return _read_file(_target(path) if follow else path, follow=follow)
    except FileNotFoundError:
        return None
    except UnicodeDecodeError:
        raise ConfigError(path, "not UTF-8 text") from None


def _vault_of(command: str) -> Path | None:
    """The vault an installed hook command names (``--vault PATH``), or None."""
    try:
        argv = shlex.split(command)
    except ValueError:
        return None
    if "--vault" in argv and argv.index("--vault") + 1 < len(argv):
        return Path(argv[argv.index("--vault") + 1])
    return None


def installed_vaults(project: Path | None = None) -> list[Path]:
    """The vaults the installed hooks point at (user settings first, then the project's), each once, those that
    still exist: where ``memvault agent status`` looks when no vault is named and none is above the cwd."""
    found: list[Path] = []
    for scope in ("user", "project"):
        for name in RUNTIMES:
            vault = status(name, scope=scope, project=project).state.get("vault")
            if vault and Path(vault) not in found and (Path(vault) / "memvault.toml").is_file():
                found.append(Path(vault))
    return found


def _check_command(command: str) -> str:
    """``ok``, or what is wrong with an installed hook command (its Python or its vault is gone)."""
    try:
        argv = shlex.split(command)
    except ValueError:
        return "unreadable command"
    if argv and _not_on_path(argv[0]):
        return f"{argv[0]} is not on PATH here: install memvault on this machine (or put it on PATH)"
    if argv and not os.access(argv[0], os.X_OK) and os.sep in argv[0]:
        return f"its Python is gone ({argv[0]}): install again"
    if "--vault" in argv and argv.index("--vault") + 1 < len(argv):
        vault = Path(argv[argv.index("--vault") + 1])
        if not (vault / "memvault.toml").is_file():
            return f"its vault is gone ({vault})"
    return "ok"


def _not_on_path(command: str) -> str | None:
    """``command`` when it is a bare name (a project's shared ``memvault``) that this machine's PATH lacks."""
    return command if command and os.sep not in command and shutil.which(command) is None else None
