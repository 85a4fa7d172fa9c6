"""Standard output that went away: ``memvault recall q | head`` and ``memvault episode list | head`` are not
errors."""
from __future__ import annotations

import os
import sys


def silence_stdout() -> None:
    """After a broken pipe: stdout goes to /dev/null, so the exit does not fail flushing it."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
