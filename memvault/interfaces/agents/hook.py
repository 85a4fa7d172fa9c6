"""The command every installed agent hook runs: ``python -m memvault.interfaces.agents.hook EVENT --runtime R``.

Events: ``session-start`` (print the session's context block), ``prompt`` (print what recall finds for the
prompt, or nothing), ``capture`` (append the transcript's new turns as episodes; ``--detach`` returns at once and
captures in a background process, for the events a runtime does not wait for). The runtime's JSON payload arrives
on stdin; the output is exactly the JSON that runtime expects (docs/agents.md).

This module imports nothing of memvault until it has asked the warm process (stdlib only, so a warm session start
costs a Python start-up and one socket round trip); without one, it builds the context itself, keyword-only, never
loading a model. Whatever happens it exits 0 with a one-line notice: a hook never blocks or breaks a session.
"""
from __future__ import annotations

import json
import os
import sys
import threading
import time

from .. import CONFIG_NAME, find_vault

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

EVENTS = ("session-start", "prompt", "capture", "warm-up")
RUNTIMES = ("claude-code", "codex", "gemini")
#: hookSpecificOutput.hookEventName each runtime expects, per event.
EVENT_NAMES = {
    ("claude-code", "session-start"): "SessionStart", ("codex", "session-start"): "SessionStart",
    ("gemini", "session-start"): "SessionStart", ("claude-code", "prompt"): "UserPromptSubmit",
    ("codex", "prompt"): "UserPromptSubmit", ("gemini", "prompt"): "BeforeAgent",
}
#: Events after which the session is over: the last turn is stored even if not marked complete.
FINAL_EVENTS = {"SessionEnd", "Stop"}
DEFAULT_LIMITS = {"session-start": 3.0, "prompt": 2.0}
LOG_NAME = "agents.log"
WARMUP_EVERY = 60.0


def main(argv: list[str] | None = None) -> int:
    started = time.monotonic()
    # Nothing but the answer reaches the runtime: Gemini CLI shows a hook's stderr to the person when stdout is
    # empty. Notes meant for people go to the vault's agents.log instead.
    real_stderr, sys.stderr = sys.stderr, _Sink()
    args = _args(sys.argv[1:] if argv is None else argv)
    payload = _payload() if args.get("event") != "warm-up" else {}
    event, runtime = args.get("event"), args.get("runtime") or "claude-code"
    root = _root(args.get("vault"), payload.get("cwd"), args.get("in-project"))
    try:
        if event not in EVENTS or runtime not in RUNTIMES:
            raise ValueError(f"usage: hook {{{','.join(EVENTS)}}} --runtime {{{','.join(RUNTIMES)}}} [--vault PATH]")
        if event == "session-start":
            _emit(_session_start(root, runtime, payload, started))
        elif event == "prompt":
            _emit(_prompt(root, runtime, payload, started))
        elif event == "capture":
            _emit(_capture(root, runtime, payload, detach=bool(args.get("detach"))))
        else:
            _warm_up(root, payload)
    except BaseException as exc:  # noqa: BLE001 - a hook never breaks a session: one line, exit 0
        output = _failure(event, runtime, exc)
        if root is not None:
            _log(root, f"{event} ({runtime}): {_reason(exc)}")
        _emit(output)
    finally:
        sys.stderr = real_stderr
    return 0


# ------------------------------------------------------------------------------------------------ input
def _args(argv: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    it = iter(argv)
    for arg in it:
        if arg in ("--runtime", "--vault", "--in-project"):
            out[arg[2:]] = next(it, None)
        elif arg == "--detach":
            out["detach"] = True
        elif not arg.startswith("-") and "event" not in out:
            out["event"] = arg
    return out


def _payload() -> dict[str, Any]:
    try:
        if sys.stdin is None or sys.stdin.isatty():
            return {}
        data = json.loads(sys.stdin.buffer.read() or b"{}")
    except (ValueError, OSError, RecursionError):  # the warm path imports no vault code: not jsontext.parse
        return {}
    return data if isinstance(data, dict) else {}


def project_dir(cwd: Any = None) -> str:
    """The project a runtime runs in: ``$CLAUDE_PROJECT_DIR`` / ``$GEMINI_PROJECT_DIR`` (set by the runtime for its
    hooks and servers), else the session's directory, else this process's."""
    for name in ("CLAUDE_PROJECT_DIR", "GEMINI_PROJECT_DIR"):
        if os.environ.get(name):
            return os.environ[name]
    return cwd if isinstance(cwd, str) and cwd else os.getcwd()


def _root(vault: str | None, cwd: Any, in_project: str | None = None) -> str | None:
    """The vault: ``--vault`` (as installed), ``--in-project REL`` (a project's shared settings: REL inside the
    project), ``MEMVAULT_DIR``, else the nearest parent of the session's cwd that holds memvault.toml. None when
    there is none (the hook then says how to make one)."""
    if in_project:
        vault = os.path.join(project_dir(cwd), in_project)
    return find_vault(vault, os.path.abspath(cwd if isinstance(cwd, str) and cwd else os.getcwd()))


def _time_limit(root: str, event: str) -> float:
    """``[agents] time_limit`` / ``prompt_time_limit`` read from memvault.toml without importing memvault."""
    default = DEFAULT_LIMITS.get(event, 3.0)
    try:
        import tomllib

        agents = tomllib.loads(_settings_text(os.path.join(root, CONFIG_NAME))).get("agents", {})
        value = agents.get("time_limit" if event == "session-start" else "prompt_time_limit")
        if not isinstance(value, str):
            return default
        # The units and the bound of [agents] time_limit in memvault.rules.config: what it accepts is used here.
        units = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 7 * 86400.0, "y": 365 * 86400.0}
        number, unit = value.strip()[:-1], value.strip()[-1:].lower()
        seconds = float(number) * units[unit]
        return seconds if 0 < seconds <= 3600 else default
    except Exception:  # noqa: BLE001 - a setting read for speed: anything wrong with the file is the default
        return default


def _settings_text(path: str, limit: int = 1 << 20) -> str:
    """memvault.toml as settings are read (``rules.fsread.read_regular`` with ``rules.config.TOML_MAX``, whose imports
    this hook does without): a regular file, no link at the name, at most ``limit`` bytes. A committed link to
    /dev/zero or a FIFO must not take the host's memory, or hold the session up, before a time limit is in force."""
    import stat

    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > limit:
            raise ValueError(f"{path}: not a regular file of at most {limit} bytes")
        return os.read(fd, limit + 1)[:limit].decode("utf-8")
    finally:
        os.close(fd)


# ------------------------------------------------------------------------------------------------ events
def _session_start(root: str | None, runtime: str, payload: dict[str, Any], started: float) -> dict[str, Any]:
    name = EVENT_NAMES[(runtime, "session-start")]
    if root is None:
        return _context(name, _no_vault())
    limit = _time_limit(root, "session-start")
    cwd = payload.get("cwd") if isinstance(payload.get("cwd"), str) else os.getcwd()
    start = payload.get("source") if isinstance(payload.get("source"), str) else None
    args = {"kind": "session", "cwd": cwd, "start": start, "runtime": runtime}
    reply = _warm(root, args, limit - (time.monotonic() - started))
    if reply is not None and isinstance(reply.get("context"), str):
        return _context(name, reply["context"])
    if reply is not None and reply.get("error"):  # the warm process failed: the block is built here; why is logged
        _log(root, f"session-start ({runtime}): the warm process failed ({reply['error']}); keyword-only recall here")
    text = _cold(root, args, started + limit, limit, runtime=runtime)
    _spawn_warm_up(root, cwd)
    return _context(name, text)


def _prompt(root: str | None, runtime: str, payload: dict[str, Any], started: float) -> dict[str, Any] | None:
    prompt = payload.get("prompt")
    if root is None or not isinstance(prompt, str) or not prompt.strip():
        return None
    limit = _time_limit(root, "prompt")
    args = {"kind": "prompt", "prompt": prompt, "runtime": runtime}
    reply = _warm(root, args, limit - (time.monotonic() - started))
    text = reply.get("context") if reply is not None else _cold(root, args, started + limit, limit, quiet=True)
    return _context(EVENT_NAMES[(runtime, "prompt")], text) if isinstance(text, str) and text.strip() else None


def _capture(root: str | None, runtime: str, payload: dict[str, Any], *, detach: bool) -> dict[str, Any] | None:
    transcript = payload.get("transcript_path")
    if root is None:
        return {"systemMessage": _no_vault()}
    if not isinstance(transcript, str) or not transcript:
        return None  # nothing to read (Codex may pass null before the first turn)
    if not os.path.lexists(os.path.expanduser(transcript)):
        # A session that wrote no transcript still ends: `claude mcp list` sends SessionEnd with the path the file
        # would have had (anthropics/claude-code#30217). Nothing to keep, so nothing to say, and no process spawned.
        return None
    if detach:
        _detach(root, runtime, payload)
        return None
    from .capture import CAPTURE_SECONDS, capture  # the vault's code, now that there is work for it
    from ...core.vault import Vault

    event = payload.get("hook_event_name")
    vault = Vault(root)
    session = payload.get("session_id")
    # PreCompact waits for its hook (60 s): the capture stops starting pieces after CAPTURE_SECONDS and the next one
    # resumes. A session's end is captured detached, with nothing after it to resume: no limit then.
    # Codex's Stop ends one turn (its payload names it), not the session: a turn begun after it is not over.
    ends = payload.get("turn_id") if event == "Stop" and isinstance(payload.get("turn_id"), str) else None
    report = capture(vault, runtime, transcript, session_id=session if isinstance(session, str) and session else None,
                     cwd=payload.get("cwd") if isinstance(payload.get("cwd"), str) else None,
                     final=event in FINAL_EVENTS, budget=None if event in FINAL_EVENTS else CAPTURE_SECONDS,
                     ends=ends or None)
    _log(root, report.summary() + (f" ({'; '.join(report.problems)})" if report.problems else ""))
    return None


def _detach(root: str, runtime: str, payload: dict[str, Any]) -> None:
    """Capture in a process of its own (a new session, so the runtime's teardown does not kill it); this one
    returns at once. Claude Code gives SessionEnd hooks 1.5 s and Gemini CLI does not wait for them."""
    import subprocess

    proc = subprocess.Popen([sys.executable, "-P", "-m", "memvault.interfaces.agents.hook", "capture", "--runtime",
                             runtime, "--vault", root], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                            stderr=_log_fd(root), start_new_session=True, close_fds=True, cwd=root)
    assert proc.stdin is not None
    proc.stdin.write(json.dumps(payload).encode("utf-8"))
    proc.stdin.close()


# ------------------------------------------------------------------------------------------------ warm and cold
def _warm(root: str, args: dict[str, Any], timeout: float) -> dict[str, Any] | None:
    """The warm process's answer (None when there is none, or it is not this install's, or it is too slow)."""
    if timeout <= 0.05:
        return None
    try:
        from ..warm_client import call
    except ImportError:
        return None
    return call(root, "agent_context", {**args, "mode": "hybrid"}, timeout=timeout)


#: What a session is told when no memory could be given it (why is in agents.log, for 'memvault agent status').
NOT_LOADED = "memvault: no stored memory was loaded at the start of this session; memvault's recall tool can still look things up."


def _cold(root: str, args: dict[str, Any], deadline: float, limit: float, *, quiet: bool = False,
          runtime: str = "") -> str:
    """Build the context here, keyword-only, on a thread: past the deadline, log why and leave with one line."""
    done: dict[str, Any] = {}

    def work() -> None:
        try:
            from ...core.vault import Vault
            from .context import build

            done["context"] = build(Vault(root, daemon=False), mode="keyword", **args)
        except BaseException as exc:  # noqa: BLE001 - reported below
            done["error"] = exc

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    thread.join(max(0.0, deadline - time.monotonic()))
    if thread.is_alive():
        if quiet:
            return ""
        _log(root, f"session-start ({runtime}): gave up loading memory after {limit:g} s ([agents] time_limit); "
                   "'memvault reindex' builds the index ahead of time, and a warm process answers in tens of ms")
        return NOT_LOADED
    if "error" in done:
        if quiet:
            return ""
        _log(root, f"session-start ({runtime}): memory could not be loaded: {_reason(done['error'])}")
        return NOT_LOADED
    return str(done["context"].text)


def _spawn_warm_up(root: str, cwd: str) -> None:
    """Start the warm process for the next session, in the background, when this vault wants one
    (``[embedding] daemon``) and none answered: never waited for."""
    if os.environ.get("MEMVAULT_NO_DAEMON"):
        return
    try:
        from ..warm import CALLS
    except ImportError:
        return
    if "agent_context" not in CALLS:
        return
    try:
        stamp = _state_dir(root) / "agents-warm-up"
    except Exception:  # noqa: BLE001 - no state directory of its own (a link refused): no warm-up from here
        return
    try:
        if time.time() - os.stat(stamp, follow_symlinks=False).st_mtime < WARMUP_EVERY:
            return
    except OSError:
        pass
    from ...rules.errors import UnsafePath
    from ...rules.fsutil import open_private

    try:
        fd = open_private(stamp, os.O_WRONLY | os.O_CREAT, 0o600)  # never through a link
        try:
            os.utime(fd)
        finally:
            os.close(fd)
        import subprocess

        proc = subprocess.Popen([sys.executable, "-P", "-m", "memvault.interfaces.agents.hook", "warm-up", "--vault",
                                 root],
                                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True, close_fds=True, cwd=root)
        assert proc.stdin is not None
        proc.stdin.close()
    except (OSError, UnsafePath):  # a stamp that cannot be written (a link refused): no warm-up
        return


def _warm_up(root: str | None, payload: dict[str, Any]) -> None:
    if root is None:
        return
    from ...core.vault import Vault

    embedding = Vault(root).config.embedding
    if not embedding.daemon:
        return
    from ...models import daemon

    daemon.start(embedding.daemon_idle)  # the vault's [embedding] daemon_idle, as every other start passes it
    _warm(root, {"kind": "session", "cwd": root, "start": "warm-up"}, 120.0)


# ------------------------------------------------------------------------------------------------ output
def _context(event_name: str, text: str) -> dict[str, Any]:
    return {"hookSpecificOutput": {"hookEventName": event_name, "additionalContext": text}}


def _no_vault() -> str:
    where = os.environ.get("MEMVAULT_DIR") or "the path installed in this hook"
    return (f"memvault: no vault found ({where} has no {CONFIG_NAME}); memory is off for this session. Create one "
            "with 'memvault init ~/memory' and wire it with 'memvault agent install <runtime> --vault ~/memory'.")


def _reason(exc: BaseException) -> str:
    try:
        from ...rules.errors import describe

        return describe(exc)[0]
    except Exception:  # noqa: BLE001 - even the error module may be what is broken
        return f"{type(exc).__name__}: {exc}"


def _failure(event: Any, runtime: str, exc: BaseException) -> dict[str, Any] | None:
    reason = _reason(exc)
    line = f"memvault: the {event or 'agent'} hook failed ({reason}); 'memvault agent status' checks the install."
    if event == "session-start":  # why is in agents.log (main wrote it): the model hears only that memory is off
        return _context(EVENT_NAMES.get((runtime, "session-start"), "SessionStart"), NOT_LOADED)
    if event == "prompt":
        return None  # nothing added to the prompt; the line is in agents.log
    return {"systemMessage": line}


def _escaped(line: str) -> str:
    """A line for the agent's context, escaped as memory text is (an error may quote a file name or a value)."""
    try:
        from ...rules.markup import escape_text
    except Exception:  # noqa: BLE001 - even the vault's code may be what is broken: no markup character is kept
        return "".join(ch if ch.isalnum() or ch in " .,:;()'/-_" else "?" for ch in line)
    return escape_text(line)


class _Sink:
    """stderr while a hook runs: written to, never shown."""

    def write(self, text: str) -> int:
        return len(text)

    def flush(self) -> None:
        pass


def _emit(output: dict[str, Any] | None) -> None:
    if output is not None:
        sys.stdout.write(json.dumps(output, ensure_ascii=False))
    sys.stdout.flush()


def _state_dir(root: str) -> Any:
    """The vault's state directory (in the git directory, where no commit reaches; never the work tree's
    ``.memvault``)."""
    from pathlib import Path

    from ...rules.places import state_dir_for

    return state_dir_for(Path(root))


def _log_fd(root: str) -> Any:
    from ...rules.errors import UnsafePath
    from ...rules.fsutil import open_private

    try:  # never through a link: a committed agents.log -> FILE must not make every hook append to FILE
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT
        return os.fdopen(open_private(_state_dir(root) / LOG_NAME, flags, 0o600), "ab")
    except (OSError, UnsafePath):
        return None


def _log(root: str, line: str) -> None:
    f = _log_fd(root)
    if f is None:
        return
    with f:
        f.write(f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} {line}\n".encode("utf-8", "replace"))


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    os._exit(code)  # a cold build still running on its thread is abandoned (its writes are transactions)
