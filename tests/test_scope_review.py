"""An attack review of [scopes] and the faces agents read (2026-12-06): each test is an attack a narrow scope, or a
hostile argument, made before the fix, and the answer it gets now."""
from __future__ import annotations

import time

import pytest

from memvault.rules.errors import InvalidKey, InvalidValue, ScopeRefused
from conftest import git
from test_mcp import call, error_text, tool
from test_scopes import run, team  # noqa: F401 - fixture
from test_scopes_more import DB, add_scopes


def _script(tmp_path, name, body):
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return path


# ------------------------------------------------------------------------------- a name that looks like a folder
def test_a_runbook_named_like_a_readable_folder_is_not_read_through_its_name(team, tmp_path):
    """read = ["procedures/web/"] covers the runbooks *in* procedures/web/; the runbook named "web" is the file
    procedures/web.sh, beside that folder. Its name, procedures/web, matched the folder pattern, and proc show, the
    MCP tool and the web view returned its text."""
    v = team
    v.procedures.add("web", _script(tmp_path, "w.sh", "# the web tier's root password is in the db vault\n"),
                     source="user:admin")
    assert "web" not in [p.name for p in v.procedures.list(reader="agent:deployer")]
    with pytest.raises(ScopeRefused):
        v.procedures.get("web", reader="agent:deployer")
    out = run(v, "proc", "show", "web", source="agent:deployer")
    assert out.exit_code == 1 and "outside its read scope" in out.output and "root password" not in out.output
    # the same line as for a name with no file at all (no existence leak), and runbooks inside still read
    nothing = run(v, "proc", "show", "nothing-here", source="agent:deployer")
    assert nothing.exit_code == 1 and nothing.output == out.output.replace("procedure web (procedures/web)",
                                                                           "procedure nothing-here "
                                                                           "(procedures/nothing-here)")
    assert v.procedures.get("web/reload", reader="agent:deployer").name == "web/reload"
    v.act_as("agent:deployer")
    from memvault.interfaces.mcp import build_server

    (answer,) = call(build_server(v, source="agent:deployer", warm=False), tool("get_procedure", name="web"))
    assert "outside its read scope" in error_text(answer)
