"""Layer 5, interfaces: the CLI, the MCP server, git hooks, the watcher and the demo. Each parses its input,
calls the facade, renders, and maps errors to messages in one place; none has a write path of its own."""

from .. import models as _models

# The warm process runs this layer's server (vectors and whole vault calls): the models layer, which starts it,
# learns its name from here rather than naming a layer above its own. Only the package is imported (a hook's fast
# path pays nothing for it).
_models.warm_server = "memvault.interfaces.warm"
