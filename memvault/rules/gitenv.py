"""The environment for a git command (memvault's own, or a runbook's) that must act on the repository it names.

Git exports the variables that tie a command to one repository (``GIT_DIR``, ``GIT_WORK_TREE``,
``GIT_INDEX_FILE`` ...) to its hooks, so memvault run from another repository's hook (a ``pre-commit`` that records
an episode, a ``post-commit`` that runs a runbook) inherits them: without this, its own ``git add`` staged the
vault's file into that repository's index, and a runbook's ``git -C repo ...`` acted on the hook's repository.
"""
from __future__ import annotations

import os
from collections.abc import Mapping

#: ``git rev-parse --local-env-vars`` (git 2.39): what git itself clears before it runs a command in another
#: repository (a submodule). Like git, the ``-c`` options of the command that ran the hook (GIT_CONFIG_PARAMETERS,
#: GIT_CONFIG_COUNT and its GIT_CONFIG_KEY_n/VALUE_n) are kept: they are the person's, not the repository's.
REPO_LOCAL = frozenset({
    "GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_CONFIG", "GIT_OBJECT_DIRECTORY", "GIT_DIR", "GIT_WORK_TREE",
    "GIT_IMPLICIT_WORK_TREE", "GIT_GRAFT_FILE", "GIT_INDEX_FILE", "GIT_NO_REPLACE_OBJECTS", "GIT_REPLACE_REF_BASE",
    "GIT_PREFIX", "GIT_INTERNAL_SUPER_PREFIX", "GIT_SHALLOW_FILE", "GIT_COMMON_DIR",
})


def other_repo_env(env: Mapping[str, str] | None = None, **extra: str) -> dict[str, str]:
    """``env`` (the process's by default) without :data:`REPO_LOCAL`, plus ``extra``."""
    base = os.environ if env is None else env
    return {**{k: v for k, v in base.items() if k not in REPO_LOCAL}, **extra}
