"""The ``memvault`` command: a thin layer over :class:`memvault.Vault`.

Each command parses its flags, gets the vault from the context, calls one library method and returns what to
print (:class:`Out`: the JSON data and the lines for people); the ``--json`` switch is handled once, by
:func:`output`. Every exception becomes one line on stderr and an exit code in :class:`Group`, through
:func:`memvault.rules.errors.describe`, the mapping the MCP server and the git hooks use too.
"""
from __future__ import annotations

import functools
import json
import os
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, NoReturn

import click

from ...core.vault import Vault
from ...rules.errors import InvalidValue, LimitExceeded, MemvaultError, describe
from ...rules.markup import printable, printable_line


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
            self._vault = Vault.open(self.vault_path, **{"status": say, **self.options})
            warn(self._vault.notices)
        return self._vault


pass_ctx = click.make_pass_decorator(Context)


@dataclass
class Out:
    """What a command prints: ``data`` for ``--json``, ``lines`` for people, ``notes`` on stderr either way;
    ``failure``: the one line that follows them on stderr, and the command exits 1 (the report is printed whole)."""

    data: Any
    lines: Iterable[str] = ()
    notes: list[str] = field(default_factory=list)
    failure: str | None = None


def echo(text: str = "", **kwargs: Any) -> None:
    """``click.echo`` of :func:`printable` text: every line the CLI prints goes through here."""
    click.echo(printable(text), **kwargs)


def say(message: str) -> None:
    """A line about a wait (a model loading), on stderr whether or not a person watches: an agent that shells out
    learns why the call takes seconds instead of seeing nothing."""
    echo(f"memvault: {message}", err=True)


def contradiction_text(values: dict[str, dict[str, list[str]]]) -> str:
    """``port 5433 where it says 5432``: what a contradiction differs in, for people. The rule is imported here, when
    one is shown: its word tables cost every command's start ~20 ms."""
    from ...rules.contradict import describe

    return describe(values)


def warn(warnings: Iterable[object]) -> None:
    """What an operation says the person should know, one line each on stderr (stdout stays the result)."""
    for warning in warnings:
        click.echo(printable_line(f"memvault: warning: {warning}"), err=True)


def output(fn: Callable[..., Out | None]) -> Callable[..., None]:
    """Adds ``--json`` to a command that returns :class:`Out`, and prints it one way or the other."""

    @click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
    @functools.wraps(fn)
    def command(*args: Any, as_json: bool, **kwargs: Any) -> None:
        result = fn(*args, **kwargs)
        if result is None:
            return
        warn(result.notes)
        if as_json:
            echo(json.dumps(result.data, ensure_ascii=False, indent=2))
        else:
            for line in result.lines:
                echo(line)
        if result.failure:
            click.echo(printable_line(f"memvault: error: {result.failure}"), err=True)
            raise click.exceptions.Exit(1)

    return command


def read_text_arg(text: str | None, what: str, limit: tuple[int, str] | None = None) -> str:
    """TEXT, or stdin when TEXT is '-' or missing and stdin is not a terminal; stdin must be UTF-8. ``limit``:
    (bytes, the [limits] setting) the item may not pass, so a larger stream is refused once it has read just past
    it (a 2 GB log piped in was read whole, ~10 GB in memory, before the item's size was checked)."""
    if text is None or text == "-":
        if text is None and sys.stdin.isatty():
            raise click.UsageError(f"give the {what} as an argument, or '-' to read it from stdin")
        stream = sys.stdin.buffer if hasattr(sys.stdin, "buffer") else None
        if stream is None:
            data = sys.stdin.read().encode()
        elif limit is None:
            data = stream.read()
        else:
            data = stream.read(limit[0] + 1)
            if len(data) > limit[0]:
                raise LimitExceeded("text", f"the {what} on stdin is more than the {limit[0]} bytes allowed ([limits] "
                                            f"{limit[1]}): store a summary, or the bulk as a file")
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidValue("stdin", f"the {what} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    return text


def interrupted() -> NoReturn:
    """^C: one line on stderr and exit 130 (128 + SIGINT), as a shell and CI expect of an interrupt (click said
    "Aborted!" and exited 1, the code of any error)."""
    message, code = describe(KeyboardInterrupt())
    click.echo(f"memvault: {message}", err=True)
    raise click.exceptions.Exit(code)


class Failure(click.ClickException):
    """An error on its way out: one line on stderr, and its exit code."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code

    def show(self, file: Any = None) -> None:
        echo(f"memvault: error: {self.message}", err=True)


def _owners(root: click.Command, option: str) -> list[str]:
    """The commands (``memvault fact set``) that have ``option`` (``--tag``)."""
    found: list[str] = []

    def walk(command: click.Command, path: list[str]) -> None:
        if any(option in (p.opts + p.secondary_opts) for p in command.params if isinstance(p, click.Option)):
            found.append(" ".join(path))
        if isinstance(command, click.Group):
            for name in sorted(command.commands):
                walk(command.commands[name], [*path, name])

    walk(root, ["memvault"])
    return found


class Command(click.Command):
    """A command whose unknown option says where that option belongs."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except click.NoSuchOption as exc:
            owners = [o for o in _owners(ctx.find_root().command, exc.option_name) if o != ctx.command_path]
            if owners:
                where = ", ".join(f"'{o}'" for o in owners[:4]) + (", ..." if len(owners) > 4 else "")
                exc.message = (f"{ctx.command_path} has no option {exc.option_name}; it belongs to {where} "
                               f"(see memvault COMMAND --help)")
                exc.possibilities = None
            raise


#: Options of the whole command line that may also be written after the subcommand (git-style habits:
#: ``memvault recall Q --vault V``), and ``--json``, which belongs to the subcommand but may come before it.
GLOBAL_WITH_VALUE = ("--vault",)


def _reorder(args: list[str]) -> list[str]:
    """``args`` with ``--vault V`` moved in front of the subcommand and ``--json`` moved after it. Nothing after
    ``--`` is touched (a runbook's own arguments)."""
    end = args.index("--") if "--" in args else len(args)
    head, tail = args[:end], args[end:]
    front: list[str] = []
    rest: list[str] = []
    moved_json = False
    i = 0
    while i < len(head):
        arg = head[i]
        if arg in GLOBAL_WITH_VALUE and i + 1 < len(head):
            front += [arg, head[i + 1]]
            i += 2
            continue
        if any(arg.startswith(f"{name}=") for name in GLOBAL_WITH_VALUE):
            front.append(arg)
        elif arg == "--json" and not rest:
            moved_json = True  # before the subcommand: it belongs after it
        else:
            rest.append(arg)
        i += 1
    return front + rest + (["--json"] if moved_json else []) + tail


class Group(click.Group):
    """Turns every exception into a :class:`Failure` (via :func:`memvault.rules.errors.describe`): the one place
    where errors become exits. ``MEMVAULT_DEBUG=1`` lets a bug's traceback through."""

    command_class = Command
    group_class = type  # `fact`, `agent`, ...: the same class, so their commands say where an option belongs

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if ctx.parent is None:  # the whole command line, once
            args = _reorder(list(args))
        return super().parse_args(ctx, args)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            interrupted()
        except click.exceptions.Abort as exc:
            if isinstance(exc.__context__, KeyboardInterrupt):  # ^C at a prompt: click made it an Abort
                interrupted()
            raise
        except (click.exceptions.Exit, click.ClickException, BrokenPipeError):
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

