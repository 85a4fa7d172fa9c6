"""Entry point kept at its old path: git hooks installed by earlier releases run `python -m memvault.githooks`.
The code lives in :mod:`memvault.interfaces.githooks`."""
import sys

from .interfaces.githooks import main

if __name__ == "__main__":
    sys.exit(main())
