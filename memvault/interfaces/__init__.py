"""Layer 5, interfaces: the CLI, the MCP server, git hooks, the watcher and the demo. Each parses its input,
calls the facade, renders, and maps errors to messages in one place; none has a write path of its own."""
