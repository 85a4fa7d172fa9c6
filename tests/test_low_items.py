"""Issue 23's low items, each guarded by a test named after what it guards: an inverted time range, NUL bytes in a
fact, a stale web form, a delete without its confirmation, and the warm process's idle timeout when a hook starts
it."""
from __future__ import annotations

import html
import re

import pytest

from memvault.rules.errors import MemvaultError
from memvault.stores.checks import check_file, commit_refusal
from conftest import REPO_ROOT, git

PORT = 8787
BASE = f"http://127.0.0.1:{PORT}"


# ------------------------------------------------------------------------------------------------ episode list
def test_inverted_since_until_on_episode_list_is_a_usage_error(vault, invoke):
    vault.episodes.append("Rotated the TLS certificate on web1.", source="user:t")
    ok = invoke("episode", "list", "--since", "7d")
    assert ok.exit_code == 0 and "Rotated the TLS certificate" in ok.output
    bad = invoke("episode", "list", "--since", "1h", "--until", "7d")  # from one hour ago up to a week ago
    assert bad.exit_code == 2, bad.output
    errors = [line for line in bad.output.splitlines() if line.startswith("Error")]
    assert len(errors) == 1 and "--since" in errors[0] and "--until" in errors[0], bad.output
    assert "Rotated" not in bad.output


# ------------------------------------------------------------------------------------------------ NUL bytes
AWS = "AKIA" + "IOSFODNN7EXAMPLE"  # split so this file holds no key


def test_a_nul_byte_in_fact_text_is_refused_by_the_gate_with_one_line(vault):
    head = git(vault.root, "rev-parse", "HEAD")
    for text in (f"The deploy key is {AWS[:4]}\0{AWS[4:]} for the ci user.", "Harmless text\0 with a NUL."):
        with pytest.raises(MemvaultError) as caught:
            vault.facts.set("ci/deploy", text, source="user:t")
        line = str(caught.value)
        assert "NUL" in line and "\n" not in line, line
    assert not (vault.root / "facts" / "ci" / "deploy.md").exists()
    assert git(vault.root, "rev-parse", "HEAD") == head


def test_a_nul_byte_in_front_matter_or_a_key_is_refused(vault):
    vault.facts.set("ci/deploy", "The deploy user is ci.", source="user:t")
    with pytest.raises(MemvaultError, match="NUL|x0000"):  # YAML's own refusal comes first here
        vault.facts.write_text("ci/deploy", "---\ncategory: c\0i\n---\nThe deploy user is ci.\n", source="user:t")
    assert "\0" not in (vault.root / "facts" / "ci" / "deploy.md").read_text()
    with pytest.raises(MemvaultError, match="NUL"):
        vault.facts.set(f"ci/{AWS[:4]}\0{AWS[4:]}", "A key with a NUL in it.", source="user:t")


def test_a_hand_written_fact_with_a_nul_byte_is_never_committed():
    """The one check every commit runs (the gate, sync's commit of hand edits, the pre-commit hook): a NUL makes
    git store the fact as binary and hid a key from the secret check, which reads no binary file."""
    data = f"---\ncategory: ci\n---\nThe key is {AWS[:4]}\0{AWS[4:]}.\n".encode()
    findings = check_file("facts", "ci/deploy.md", data)
    assert len(findings) == 1 and "NUL" in findings[0].reason and findings[0].line == 4
    assert commit_refusal("facts/ci/deploy.md", data) and "NUL" in commit_refusal("facts/ci/deploy.md", data)
    assert not check_file("procedures", "ops/tool.bin", b"\x7fELF\0\0")  # a script may be anything


# ------------------------------------------------------------------------------------------------ web view
@pytest.fixture
def web(vault):
    from memvault.interfaces.web import build

    vault.facts.set("db/replica", "The replica database listens on 10.8.0.5.", source="user:t")
    from web_fixtures import Browser

    app, token = build(vault, port=PORT, refresh=False)
    with Browser(app.asgi, base_url=BASE) as client:
        r = client.get(f"/?token={token}", follow_redirects=False)
        client.cookies.set(app.guard.cookie_name, r.cookies[app.guard.cookie_name], path=app.guard.root)
        client.root = app.guard.root  # pages live under the run's random root
        client.csrf = app.guard.csrf_token()
        yield client


def loaded_of(page: str) -> str:
    return re.search(r'name="loaded" value="([0-9a-f]+)"', page).group(1)


def test_a_stale_web_form_never_replaces_a_newer_uncommitted_hand_edit(vault, web):
    path = vault.root / "facts" / "db" / "replica.md"
    stale = loaded_of(web.get("/fact/db/replica").text)  # the form as the browser holds it
    path.write_text("The replica database moved to 10.8.0.6 (edited by hand, not committed).\n")
    head = git(vault.root, "rev-parse", "HEAD")
    r = web.post("/fact/db/replica/edit", data={"csrf": web.csrf, "loaded": stale,
                                                "text": "The replica database listens on 10.8.0.7.\n"})
    assert r.status_code == 409 and "conflict" in html.unescape(r.text) and "changed since" in r.text
    assert "10.8.0.7" in html.unescape(r.text)  # the edit is kept in the box, not lost
    assert "by hand" in path.read_text() and git(vault.root, "rev-parse", "HEAD") == head
    # The conflict page carries the version it shows: saving from it is a deliberate choice, and it goes through.
    r = web.post("/fact/db/replica/edit", data={"csrf": web.csrf, "loaded": loaded_of(r.text),
                                                "text": "The replica database listens on 10.8.0.7.\n"},
                 follow_redirects=False)
    assert r.status_code == 303 and "10.8.0.7" in path.read_text()
    # A form that says nothing of its version is refused too.
    r = web.post("/fact/db/replica/edit", data={"csrf": web.csrf, "text": "x\n"})
    assert r.status_code == 409 and "10.8.0.7" in path.read_text()


def test_web_fact_delete_refuses_without_its_confirm_field(vault, web):
    path = vault.root / "facts" / "db" / "replica.md"
    for form in ({}, {"confirm": ""}, {"confirm": "0"}):
        r = web.post("/fact/db/replica/delete", data={"csrf": web.csrf, **form}, follow_redirects=False)
        assert r.status_code == 422 and "confirm" in r.text and path.exists()
    r = web.post("/fact/db/replica/delete", data={"csrf": web.csrf, "confirm": "1"}, follow_redirects=False)
    assert r.status_code == 303 and not path.exists()


# ------------------------------------------------------------------------------------------------ warm process
def test_hook_started_warm_process_takes_daemon_idle_from_the_vault(vault, monkeypatch):
    """The session-start hook's warm-up starts the warm process; it stops after the vault's [embedding]
    daemon_idle, not the built-in 900 s."""
    from memvault.interfaces.agents import hook
    from memvault.models import daemon

    toml = vault.root / "memvault.toml"
    text = toml.read_text()
    assert "daemon_idle" in text
    toml.write_text(re.sub(r"(?m)^daemon_idle = .*$", "daemon_idle = \"37s\"", text))
    git(vault.root, "commit", "-qm", "idle", "--", "memvault.toml")
    monkeypatch.delenv("MEMVAULT_NO_DAEMON")
    monkeypatch.setenv("PYTHONPATH", str(REPO_ROOT))  # the warm process runs this checkout's code
    monkeypatch.setattr(hook, "_warm", lambda *a, **k: None)  # the context request after the start: not this test's
    try:
        hook._warm_up(str(vault.root), {})
        status = daemon.status()
        assert status is not None and float(status["idle_after"]) == 37.0, status
    finally:
        daemon.stop()
