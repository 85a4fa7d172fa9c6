"""[scopes] against what a scoped source could still learn or do: a run it may not record is not started (the
script used to run, then the record of it was refused: a side effect without its audit line), and no problem
report names a file outside its read scope (list_facts' problems and recall's "files not searchable" gave
the paths of unreadable files anywhere in the vault, with the host's absolute path)."""
from __future__ import annotations

import pytest

from memvault.rules.errors import ScopeRefused
from test_scopes_more import add_scopes

RUNNER = """
[scopes."agent:runner"]
read = ["procedures/web/", "facts/web/**", "episodes/**"]
write = []
propose = ["facts/web/**"]
"""


@pytest.fixture
def scoped(strict_vault, tmp_path):
    v = add_scopes(strict_vault, RUNNER, trust_agents=True)
    marker = tmp_path / "ran.txt"
    script = tmp_path / "hello.sh"
    script.write_text(f"#!/bin/sh\necho ran >> {marker}\n")
    script.chmod(0o755)
    v.procedures.add("web/hello", script, source="user:admin")
    v.facts.set("web/nginx", "nginx on web01 serves the shop.", source="user:admin")
    return v, marker


def test_a_run_the_source_may_not_record_is_not_started(scoped):
    v, marker = scoped
    with pytest.raises(ScopeRefused, match="outside its write scope"):
        v.procedures.run("web/hello", source="agent:runner", stdout=-3, stderr=-3)
    assert not marker.exists()
    assert list(v.episodes.iter()) == []
    v.procedures.run("web/hello", source="user:admin", stdout=-3, stderr=-3)
    assert marker.read_text() == "ran\n"


def test_no_problem_report_names_a_file_outside_the_read_scope(scoped):
    v, _ = scoped
    bad = v.root / "facts" / "db" / "payroll" / "q3-layoffs.md"
    bad.parent.mkdir(parents=True)
    bad.write_text("---\nsource: [unclosed\n---\nsecret plans\n")
    mine = v.root / "facts" / "web" / "broken.md"
    mine.write_text("---\nsource: [unclosed\n---\nweb notes\n")
    v.reindex()
    problems: list = []
    v.facts.list(problems=problems, reader="agent:runner")
    v.facts.inbox(problems, reader="agent:runner")
    v.procedures.list(problems, reader="agent:runner")
    said = " ".join(str(p) for p in problems)
    result = v.recall("secret plans web notes", source="agent:runner", record_access=False)
    said += " ".join(result.warnings)
    assert "payroll" not in said and "q3-layoffs" not in said
    assert "broken.md" in said  # its own files' problems are still told



def test_a_problem_named_from_the_vault_root_in_the_read_scope_is_still_told(scoped, tmp_path):
    """The index keeps some problems by their vault path (a link, a runbook over its size): the filter took only
    absolute paths, so a scoped source heard nothing of its own files."""
    v, _ = scoped
    outside = tmp_path / "elsewhere.sh"
    outside.write_text("#!/bin/sh\necho hi\n")
    (v.root / "procedures" / "web" / "link.sh").symlink_to(outside)
    (v.root / "procedures" / "db").mkdir(parents=True, exist_ok=True)
    (v.root / "procedures" / "db" / "link.sh").symlink_to(outside)
    v.reindex()
    said = " ".join(v.recall("hello", source="agent:runner", record_access=False).warnings)
    assert "procedures/web/link.sh" in said and "procedures/db/link.sh" not in said
