"""The ``memvault`` command: a thin layer over :class:`memvault.Vault`.

Each command parses its flags, gets the vault from the context, calls one library method and returns what to
print (:class:`Out`: the JSON data and the lines for people); the ``--json`` switch is handled once, by
:func:`output`. Every exception becomes one line on stderr and an exit code in :class:`Group`, through
:func:`memvault.rules.errors.describe`, the mapping the MCP server and the git hooks use too.
"""
from __future__ import annotations

import sys

from . import agent, live, memory, search, transfer, upkeep  # noqa: F401 - importing a module registers its commands
from ...models.daemon import single_thread_blas
from ..pipes import silence_stdout
from .base import Context, Failure, Group, Out, cli, output, pass_ctx, read_text_arg

__all__ = ["cli", "main", "Context", "Out", "Failure", "Group", "output", "pass_ctx", "read_text_arg"]


# -- entry point ---------------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> None:
    """Console entry point. Errors are mapped by :class:`Group`; here only the pipe and ^C are handled."""
    single_thread_blas()
    try:
        cli.main(args=argv, prog_name="memvault", obj=Context())
    except BrokenPipeError:  # `memvault episode list | head` is not an error
        silence_stdout()
        sys.exit(0)
