"""Layer 5, interfaces: the CLI, the MCP server, git hooks, the watcher and the demo. Each parses its input,
calls the facade, renders, and maps errors to messages in one place; none has a write path of its own."""

import os

from .. import models as _models

#: The vault's settings file, named here too: the quick path and agent hooks find a vault without importing the
#: vault code (memvault.rules.config has the same name).
CONFIG_NAME = "memvault.toml"

# The warm process runs this layer's server (vectors and whole vault calls): the models layer, which starts it,
# learns its name from here rather than naming a layer above its own. Only the package is imported (a hook's fast
# path pays nothing for it).
_models.warm_server = "memvault.interfaces.warm"


def _holds_config(folder: str) -> bool:
    """Whether ``folder`` holds memvault.toml: a file, or a link (refused when read, with one line naming it,
    rather than "no vault here")."""
    path = os.path.join(folder, CONFIG_NAME)
    return os.path.isfile(path) or os.path.islink(path)


def find_vault(given: str | None, start: str) -> str | None:
    """A vault's folder found without importing memvault's vault code (the quick path, agent hooks): ``given``,
    else ``MEMVAULT_DIR``, else the nearest of ``start`` and its parents that holds memvault.toml; None when the
    one named holds none, or none is found."""
    given = given or os.environ.get("MEMVAULT_DIR")
    if given:
        root = os.path.abspath(os.path.expanduser(given))
        return root if _holds_config(root) else None
    current = start
    while True:
        if _holds_config(current):
            return current
        parent = os.path.dirname(current)
        if parent == current:
            return None
        current = parent
