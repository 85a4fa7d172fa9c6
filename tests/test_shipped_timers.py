"""The daily retention job shipped in hooks/cron, run as cron would, on a vault whose work tree a teammate's commit
controls: it writes nothing through the work tree's ``.memvault`` (the systemd unit's output goes to the journal)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from conftest import git
from memvault import Vault

HOOKS = Path(__file__).resolve().parent.parent / "hooks"


def cron_command() -> str:
    """The command of the shipped crontab line (its five time fields taken off), as cron hands it to /bin/sh."""
    [line] = [line for line in (HOOKS / "cron" / "memvault-prune.cron").read_text().splitlines()
              if line.strip() and not line.startswith("#")]
    return line.split(None, 5)[5]


def test_the_cron_line_writes_nothing_through_a_link_a_teammate_committed_in_the_work_tree(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    v = Vault.init(home / "memory")
    v.episodes.append("deployed web3", source="user:ops")
    victim = home / ".bashrc"
    victim.write_text("export PATH=$HOME/bin:$PATH\n")
    (v.root / ".memvault").mkdir(exist_ok=True)
    os.symlink("../../.bashrc", v.root / ".memvault" / "prune.log")  # a teammate's `git add -f`, pulled here
    git(v.root, "add", "-f", ".memvault/prune.log")
    git(v.root, "commit", "-qm", "teammate")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "memvault"
    shim.write_text(f"#!/bin/sh\nexec {sys.executable} -m memvault \"$@\"\n")
    shim.chmod(0o755)
    env = {**os.environ, "HOME": str(home), "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    done = subprocess.run(["/bin/sh", "-c", cron_command()], env=env, capture_output=True, text=True, timeout=120)
    assert victim.read_text() == "export PATH=$HOME/bin:$PATH\n"
    assert done.returncode == 0, done.stderr
    assert '"kinds"' in done.stdout  # prune's report, for cron to mail

