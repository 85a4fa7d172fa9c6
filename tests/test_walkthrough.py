"""README's ten-minute walkthrough, run as written: every line of its ```sh walkthrough block, in order, in one
bash, as a new user would type them (a fresh HOME, the packaged model), and `memvault ui` opened in a real HTTP
client and stopped as a person would with Ctrl-C."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from conftest import REPO_ROOT


def walkthrough() -> list[str]:
    text = (REPO_ROOT / "README.md").read_text()
    block = text.split("```sh walkthrough\n", 1)[1].split("\n```", 1)[0]
    return block.splitlines()


def test_the_readme_front_page_is_short_and_links_its_reference():
    text = (REPO_ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 250
    for link in re.findall(r"\]\((docs/[^)#]+)", text):
        assert (REPO_ROOT / link).is_file(), link
    # the walkthrough covers what the issue asked of it, in this order
    lines = [ln for ln in walkthrough() if ln.startswith("memvault ")]
    steps = ["memvault init", "memvault fact set", "memvault recall", "memvault proc add", "memvault agent install",
             "memvault ui"]
    positions = [next(i for i, ln in enumerate(lines) if ln.startswith(step)) for step in steps]
    assert positions == sorted(positions)
    assert any(ln.startswith("sed -i") for ln in walkthrough())  # a fact edited by hand, as in an editor


@pytest.mark.model
def test_the_readme_walkthrough_runs_as_written(isolated_env):
    lines = walkthrough()
    ui_at = next(i for i, ln in enumerate(lines) if ln.startswith("memvault ui"))
    script = lines[:ui_at]
    venv = Path(sys.executable).parent.parent
    if not (REPO_ROOT / ".venv" / "bin" / "activate").is_file() or (REPO_ROOT / ".venv").resolve() != venv.resolve():
        # run from another checkout's venv (a worktree): activate the interpreter running this test instead
        script = [f"source {venv}/bin/activate" if ln == "source .venv/bin/activate" else ln for ln in script]
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMVAULT_")}
    env["MEMVAULT_NO_DAEMON"] = "1"  # no warm process outlives the test
    proc = subprocess.run(["bash", "-euo", "pipefail", "-c", "\n".join(script)], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    home = Path(env["HOME"])
    vault = home / "memory"
    # what each step promised
    assert "02:30 UTC" in (vault / "facts" / "db" / "primary.md").read_text()
    first_hit = re.search(r"^1\. (\w+) (\S+)", out, re.M)  # the first recall's best hit
    assert first_hit and first_hit.group(2) == "db/primary", out[:2000]
    assert '"procedure_run"' in subprocess.run(["bash", "-c", "cat episodes/*.jsonl"], cwd=vault,
                                               capture_output=True, text=True).stdout
    log = subprocess.run(["git", "log", "--format=%s", "--", "facts/db/primary.md"], cwd=vault, capture_output=True,
                         text=True).stdout.splitlines()
    assert len(log) == 2, log  # the fact set and the hand edit, committed by sync
    assert (home / ".claude.json").is_file() and "memvault" in (home / ".claude.json").read_text()
    assert "<memory" in out and "db/primary" in out

    # memvault ui: started as written, opened, stopped with Ctrl-C
    ui = subprocess.Popen(["bash", "-c", f"source {venv}/bin/activate && cd {vault} && exec {lines[ui_at].split('#')[0]}"],
                          env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        url = None
        deadline = time.monotonic() + 60
        while url is None and time.monotonic() < deadline:
            line = ui.stderr.readline()
            match = re.search(r"at (http\S+)", line)
            url = match.group(1) if match else None
            assert line or ui.poll() is None, "memvault ui exited"
        assert url, "memvault ui printed no address"
        browser = urllib.request.build_opener(urllib.request.HTTPCookieProcessor())  # keeps the session cookie
        page = browser.open(url, timeout=30).read().decode("utf-8")
        assert "db/primary" in page or "memvault" in page
    finally:
        ui.send_signal(signal.SIGINT)
        ui.wait(timeout=30)


def tour() -> list[str]:
    text = (REPO_ROOT / "README.md").read_text()
    return text.split("```sh tour\n", 1)[1].split("\n```", 1)[0].splitlines()


def test_the_tour_is_on_the_first_screen_and_five_commands_long():
    text = (REPO_ROOT / "README.md").read_text()
    assert text.index("```sh tour\n") < text.index("\n## ")  # before the first section: what a newcomer sees first
    assert len([ln for ln in tour() if ln.startswith("memvault ")]) == 5


@pytest.mark.model
def test_the_readme_tour_runs_as_written(isolated_env):
    script = tour()
    venv = Path(sys.executable).parent.parent
    if not (REPO_ROOT / ".venv" / "bin" / "activate").is_file() or (REPO_ROOT / ".venv").resolve() != venv.resolve():
        script = [f"source {venv}/bin/activate" if ln == "source .venv/bin/activate" else ln for ln in script]
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMVAULT_")}
    env["MEMVAULT_NO_DAEMON"] = "1"
    proc = subprocess.run(["bash", "-euo", "pipefail", "-c", "\n".join(script)], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    first_hit = re.search(r"^1\. (\w+) (\S+)", out, re.M)  # the first recall's best hit: the fact that answers
    assert first_hit and first_hit.groups() == ("fact", "db/primary"), out[:2000]
    prompt = out[out.index("<memory"):]  # the second recall, as an agent's prompt gets it
    assert "Disk at 91 % on db01" in prompt and 'trusted="false"' in prompt, prompt
