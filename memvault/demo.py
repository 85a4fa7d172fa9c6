"""Entry point kept at its old path: README's first set-up command runs `python -m memvault.demo`.
The code lives in :mod:`memvault.interfaces.demo`."""
import sys

from .interfaces.demo import main

if __name__ == "__main__":
    sys.exit(main())
