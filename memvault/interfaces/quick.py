"""The command line's quick path: ``memvault recall ...`` answered by the warm process, when one is up, before click
and the vault code are imported.

A one-shot ``recall`` spent most of its ~0.25 s importing (click, the vault, its rules: ~0.13 s) and checking every
directory of the vault for changes (no file watcher in a process that lives 0.2 s). The warm process
(:mod:`memvault.interfaces.warm`) holds the vault open with a watcher, and serves a whole recall to a hook in tens
of milliseconds (:mod:`memvault.interfaces.warm_client`); the CLI asks it the same way. Only a command line this
module reads completely goes there; anything else (another command, ``--help``, ``--explain``, an option it does
not know, a value out of range, no warm process, an error reply) runs the full CLI, which gives the one answer and
the one error message. Stdlib only, like the client.
"""
from __future__ import annotations

import os
import sys

from . import find_vault

TYPE_CHECKING = False  # typing is not imported at run time: this path pays for every module
if TYPE_CHECKING:
    from typing import Any

#: Options of ``recall`` this path reads, with a value: option -> argument name of the warm call.
_VALUED = {"-k": "k", "--kind": "kinds", "--budget": "budget", "--format": "fmt", "--mode": "mode",
           "--since": "since", "--until": "until", "--min-relevance": "min_relevance", "--source": "source",
           "-s": "source", "--vault": "vault"}
_FORMATS = ("text", "json", "prompt")
_MODES = ("hybrid", "keyword", "vector")
_KINDS = ("fact", "episode", "procedure")
#: How long the warm process may take (a hook waits 2 s at most; a person or an agent at a prompt can wait for a
#: first call that opens the vault, or syncs what a large ``git pull`` changed, rather than have this process
#: repeat that work beside it). Past it the full CLI answers, and the recall is logged by both.
TIMEOUT = 10.0


def main() -> None:
    """The ``memvault`` console entry point: the quick path when it answers, else the full CLI. ^C before a
    command runs (the quick path, the imports) exits 130 with one line, as during one (the CLI's Group)."""
    try:
        code = recall(sys.argv[1:])
        if code is not None:
            sys.exit(code)
        from .cli import main as full

        full()
    except KeyboardInterrupt:
        sys.stderr.write("memvault: interrupted\n")
        sys.exit(130)


def recall(argv: list[str]) -> int | None:
    """Answer ``argv`` (a ``recall`` command line) through the warm process: the exit code, or None when the full
    CLI must run instead (nothing has been printed then)."""
    if os.environ.get("MEMVAULT_NO_DAEMON"):
        return None
    parsed = parse(argv)
    if parsed is None:
        return None
    root = _root(parsed.pop("vault", None))
    if root is None:
        return None
    fmt = parsed.pop("fmt", "text")
    from .warm_client import call

    reply = call(root, "recall", {**parsed, "fmt": fmt}, timeout=TIMEOUT)
    if reply is None or "error" in reply or not isinstance(reply.get("printed"), str):
        return None
    # The answer comes printed by the function the full CLI prints with (memvault.core.render.printed): a memory's
    # control characters arrive escaped, as the full CLI shows them. The warnings are escaped here as its warn() does.
    from ..rules.markup import printable_line

    try:
        for warning in reply.get("warnings") or ():
            print(printable_line(f"memvault: warning: {warning}"), file=sys.stderr)
        print(reply["printed"])
        sys.stdout.flush()
    except BrokenPipeError:
        from .pipes import silence_stdout

        silence_stdout()
    return 0


def parse(argv: list[str]) -> dict[str, Any] | None:
    """The warm call's arguments for a ``recall`` command line (and ``vault``), or None when this module does not
    read all of it (the full CLI then does)."""
    args: dict[str, Any] = {}
    words: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        name, eq, inline = arg.partition("=") if arg.startswith("--") else (arg, "", "")
        if name in _VALUED:
            if eq:
                value = inline
            elif i + 1 < len(argv):
                i += 1
                value = argv[i]
            else:
                return None
            if not _put(args, _VALUED[name], value):
                return None
        elif arg == "--json" and not eq:
            args["fmt"] = "json"
        elif arg == "--no-record":
            args["record"] = False
        elif arg.startswith("-") and arg != "-":
            return None  # --help, --explain, --include-superseded, --version, "--", an unknown or short form
        else:
            words.append(arg)
        i += 1
    if len(words) != 2 or words[0] != "recall" or not words[1].strip():
        return None
    args["query"] = words[1]
    return args


def _put(args: dict[str, Any], name: str, value: str) -> bool:
    """Store one option's value as the warm call takes it; False when the CLI would refuse it (or might read it
    otherwise): the full CLI then says so."""
    if name == "k":
        if not value.isdigit() or not 1 <= int(value) <= 1000:
            return False
        args["k"] = int(value)
    elif name == "budget":
        if not value.isdigit() or int(value) < 1:
            return False
        args["budget"] = int(value)
    elif name == "min_relevance":
        try:
            number = float(value)
        except ValueError:
            return False
        if not 0 <= number <= 1:
            return False
        args["min_relevance"] = number
    elif name == "kinds":
        if value not in _KINDS:
            return False
        args.setdefault("kinds", []).append(value)
    elif name == "fmt":
        if value not in _FORMATS or args.get("fmt", value) != value:
            return False
        args["fmt"] = value
    elif name == "mode":
        if value not in _MODES:
            return False
        args["mode"] = value
    else:  # since, until, source, vault: checked by the warm process or below
        if name in args or not value:
            return False
        args[name] = value
    return True


def _root(path: str | None) -> str | None:
    """The vault's folder as the CLI finds it, or None when there is none (the full CLI says so)."""
    return find_vault(path, os.path.realpath(os.getcwd()))
