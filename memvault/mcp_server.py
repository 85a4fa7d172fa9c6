"""Entry point kept at its old path: MCP client configurations run `python -m memvault.mcp_server`.
The code lives in :mod:`memvault.interfaces.mcp`."""
import sys

from .interfaces.mcp import main

if __name__ == "__main__":
    sys.exit(main())
