"""End to end with the real packaged all-MiniLM-L6-v2 model: the example vault, the CLI, a cold process."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from memvault import Vault
from conftest import REPO_ROOT

pytestmark = pytest.mark.model


@pytest.fixture(scope="module")
def example(tmp_path_factory):
    root = tmp_path_factory.mktemp("example") / "vault"
    shutil.copytree(REPO_ROOT / "vault", root)
    env = {"GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1", "HOME": str(root.parent)}
    for args in (["init", "-q", "-b", "main"], ["add", "-A"],
                 ["-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-qm", "import"]):
        subprocess.run(["git", *args], cwd=root, check=True, env={**os.environ, **env})
    vault = Vault.open(root)
    vault.reindex()
    return vault


def test_semantic_question_finds_the_right_fact(example):
    hits = Vault.open(example.root).recall("where does the main postgres server live and on which port", k=3)
    assert hits.mode == "hybrid" and not hits.warnings
    assert hits[0].id == "db/primary"


def test_paraphrase_without_shared_keywords_finds_the_runbook(example):
    hits = Vault.open(example.root).recall("take a web server out of the load balancer before maintenance",
                                           k=5, kinds=["procedure"])
    assert hits[0].id == "web/drain-host"
    assert hits[0].text == (example.root / "procedures/web/drain-host.sh").read_text()


def test_no_change_reindex_does_not_load_the_model(example):
    code = ("import sys, time\nfrom memvault import Vault\nv = Vault.open(sys.argv[1])\nr = v.reindex()\n"
            "assert not r.changed and not r.model_loaded\n"
            "assert 'sentence_transformers' not in sys.modules and 'torch' not in sys.modules, 'model imported'\n")
    out = subprocess.run([sys.executable, "-c", code, str(example.root)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


def test_unreachable_model_is_one_clear_line_and_recall_still_answers(example, tmp_path):
    root = tmp_path / "v"
    shutil.copytree(example.root, root, ignore=shutil.ignore_patterns(".memvault"))
    toml = root / "memvault.toml"
    toml.write_text(toml.read_text().replace('model = "all-MiniLM-L6-v2"', 'model = "BAAI/bge-small-en-v1.5"'))
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    out = subprocess.run([sys.executable, "-m", "memvault", "--vault", str(root), "recall", "primary database port",
                          "--json"], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "Traceback" not in out.stderr and "bge-small" in out.stderr
    assert json.loads(out.stdout)["hits"][0]["id"] == "db/primary"
    out = subprocess.run([sys.executable, "-m", "memvault", "--vault", str(root), "reindex", "--dry-run"],
                         capture_output=True, text=True, env=env, timeout=300)
    assert "Traceback" not in out.stderr and "unavailable" in (out.stdout + out.stderr)
