"""Capture: a runtime's transcript turned into episodes, one per turn, of source agent:<runtime>; idempotent,
secrets redacted, private spans never stored, caps stated, retention and purge as for any episode."""
from __future__ import annotations

import json
import sys
import time

import pytest

from agent_fixtures import PRIVATE, SECRET, call_hook, payload, run_hook, transcript
from memvault import Vault
from memvault.interfaces.agents.capture import capture
from memvault.rules.timeutil import parse_time

CAPTURE_EVENT = {"claude-code": "PreCompact", "codex": "PreCompact", "gemini": "PreCompress"}
END_EVENT = {"claude-code": "SessionEnd", "codex": "Stop", "gemini": "SessionEnd"}


def captured(vault: Vault, runtime: str) -> list:
    return [e for e in Vault.open(vault.root).episodes.iter(source=f"agent:{runtime}")]


def on_disk(vault: Vault) -> str:
    return "".join(p.read_text() for p in (vault.root / "episodes").rglob("*.jsonl"))


@pytest.mark.parametrize("runtime", ["claude-code", "codex", "gemini"])
def test_a_transcript_becomes_one_episode_per_turn_without_secrets_or_private_text(runtime, strict_vault, tmp_path,
                                                                                   monkeypatch):
    path = transcript(tmp_path, runtime)
    assert path.stat().st_size > 5_000_000
    args = ["capture", "--runtime", runtime, "--vault", str(strict_vault.root)]
    out = call_hook(monkeypatch, args, payload(runtime, CAPTURE_EVENT[runtime], transcript=path,
                                               cwd="/home/dev/src/shopfront"))
    assert out == ""  # nothing for the runtime to read: capture events take no output
    episodes = captured(strict_vault, runtime)
    first = episodes[0]
    assert first.source == f"agent:{runtime}" and first.kind == "raw"
    assert {"session_id", "runtime", "cwd", "turn_id"} <= set(first.meta)
    assert first.meta["runtime"] == runtime and first.meta["cwd"] == "/home/dev/src/shopfront"
    assert "User: The checkout test fails" in first.text
    assert "idempotency key" in first.text  # the final answer
    assert "`pytest tests/test_checkout.py -q" in first.text and "(exit 1)" in first.text and "(exit 0)" in first.text
    assert "/home/dev/src/shopfront/shop/payments.py" in first.text
    assert "shopfront" in first.tags and runtime in first.tags
    second = episodes[1]
    assert "<redacted:GitHub-token>" in second.text and second.meta["redacted"] >= 2
    assert "[private: not stored]" in second.text and second.meta["private"] == 1
    stored = on_disk(strict_vault)
    assert SECRET not in stored and PRIVATE not in stored
    # The session ends: its last turn is stored too, and the 5 MB of tool output is not.
    call_hook(monkeypatch, args, payload(runtime, END_EVENT[runtime], transcript=path, cwd="/home/dev/src/shopfront"))
    episodes = captured(strict_vault, runtime)
    assert len(episodes) == 3
    assert "kubectl logs" in episodes[-1].text and len(on_disk(strict_vault)) < 20_000
    # Capturing again appends nothing.
    call_hook(monkeypatch, args, payload(runtime, END_EVENT[runtime], transcript=path, cwd="/home/dev/src/shopfront"))
    assert len(captured(strict_vault, runtime)) == 3
    assert [parse_time(e.created_at) for e in episodes] == sorted(parse_time(e.created_at) for e in episodes)


def test_a_turn_in_progress_waits_and_a_compaction_summary_is_not_a_prompt(strict_vault, tmp_path):
    path = transcript(tmp_path, "claude-code", big=False)
    report = capture(strict_vault, "claude-code", path, session_id="s1")
    assert len(report.captured) == 2 and report.open_turns == 1  # the third turn is not over yet
    texts = " ".join(e.text for e in captured(strict_vault, "claude-code"))
    assert "This session is being continued" not in texts and "/model" not in texts
    assert "Search the repo for redis" not in texts  # a subagent's sidechain is not the person's turn
    with open(path, "a") as f:  # the person goes on: the third turn is over now
        f.write(json.dumps({"type": "user", "uuid": "c0000000-0000-4000-8000-000000000001", "sessionId": "s1",
                            "timestamp": "2026-11-20T09:20:00.000Z", "message": {"role": "user",
                                                                                  "content": "thanks"}}) + "\n")
    report = capture(strict_vault, "claude-code", path, session_id="s1")
    assert len(report.captured) == 1 and report.skipped == 0
    assert "No errors in the last hour" in captured(strict_vault, "claude-code")[-1].text


def test_a_resumed_session_adds_only_its_new_turns(strict_vault, tmp_path):
    capture(strict_vault, "claude-code", transcript(tmp_path, "claude-code", big=False), final=True)
    report = capture(strict_vault, "claude-code", transcript(tmp_path, "claude-code", name="claude-code/resumed.jsonl"),
                     final=True)
    assert len(report.captured) == 1 and report.skipped == 1
    assert "Did the fix hold overnight?" in captured(strict_vault, "claude-code")[-1].text


def test_caps_per_turn_and_per_session_are_stated(strict_vault, tmp_path):
    toml = strict_vault.root / "memvault.toml"
    toml.write_text(toml.read_text().replace('episode_bytes = "8KiB"', 'episode_bytes = "2KiB"')
                    .replace('session_bytes = "512KiB"', 'session_bytes = "5KiB"'))
    lines = []
    for i in range(8):
        lines.append({"type": "user", "uuid": f"u{i}", "sessionId": "big", "timestamp": f"2026-11-20T10:0{i}:00Z",
                      "message": {"role": "user", "content": f"question {i} " + "why " * 300}})
        lines.append({"type": "assistant", "uuid": f"a{i}", "sessionId": "big", "timestamp": f"2026-11-20T10:0{i}:30Z",
                      "message": {"id": f"m{i}", "role": "assistant", "content": [{"type": "text",
                                                                                   "text": "because " * 600}]}})
    path = tmp_path / "big.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    report = capture(Vault.open(strict_vault.root), "claude-code", path, final=True)
    episodes = captured(strict_vault, "claude-code")
    assert all(len(e.text.encode()) <= 2048 for e in episodes)
    assert "cut to the [capture] episode_bytes cap" in episodes[0].text and episodes[0].meta["cut_bytes"]["answer"]
    assert report.not_stored >= 4 and "later turns were not stored" in episodes[-1].text
    assert len(capture(Vault.open(strict_vault.root), "claude-code", path, final=True).captured) == 0


def test_purge_removes_a_runtimes_captures_and_retention_prunes_them(strict_vault, tmp_path):
    capture(strict_vault, "codex", transcript(tmp_path, "codex", big=False), final=True)
    capture(strict_vault, "gemini", transcript(tmp_path, "gemini", big=False), final=True)
    report = strict_vault.purge("agent:codex")
    assert len(report.episodes.removed) == 3
    assert captured(strict_vault, "codex") == [] and len(captured(strict_vault, "gemini")) == 3
    assert not capture(strict_vault, "codex", transcript(tmp_path, "codex", big=False), final=True).captured
    pruned = strict_vault.prune(at=parse_time("2026-12-31T00:00:00Z"))  # raw episodes are kept 30 days
    assert len(pruned.removed) == 3 and captured(strict_vault, "gemini") == []


def test_the_extractor_proposes_facts_and_never_trusts_them(strict_vault, tmp_path):
    script = tmp_path / "extract.py"
    script.write_text("import json, sys\nfor line in sys.stdin:\n    turn = json.loads(line)\n"
                      "    if 'idempotency' in turn['text']:\n"
                      "        print(json.dumps({'type': 'fact', 'key': 'shopfront/psp-idempotency', "
                      "'text': 'The Acme PSP deduplicates charges by idempotency key.', 'source': 'user:boss'}))\n")
    # A command to run: only this host's own settings may name one (memvault.toml is anyone's who can push).
    (strict_vault.state_dir / "local.toml").write_text(f'[capture]\nextractor = "{sys.executable} {script}"\n')
    toml = strict_vault.root / "memvault.toml"
    report = capture(Vault.open(strict_vault.root), "claude-code", transcript(tmp_path, "claude-code", big=False))
    assert report.extractor["quarantined"][0]["key"] == "shopfront/psp-idempotency"
    proposal = Vault.open(strict_vault.root).facts.inbox()[0]
    assert proposal.source == "agent:claude-code" and proposal.extra.get("claimed_source") == "user:boss"
    assert not Vault.open(strict_vault.root).facts.exists("shopfront/psp-idempotency")
    # A vault that trusts the agent would skip the inbox: the extractor refuses to run, the turns are still kept.
    toml.write_text(toml.read_text().replace('trusted = ["user:*"]', 'trusted = ["user:*", "agent:*"]'))
    report = capture(Vault.open(strict_vault.root), "codex", transcript(tmp_path, "codex", big=False))
    assert report.captured and "extracted facts would skip the inbox" in report.extractor["error"]


def test_capture_at_session_end_runs_detached_and_returns_at_once(strict_vault, tmp_path):
    path = transcript(tmp_path, "gemini", big=False)
    started = time.monotonic()
    done = run_hook(["capture", "--runtime", "gemini", "--vault", str(strict_vault.root), "--detach"],
                    payload("gemini", "SessionEnd", transcript=path, cwd="/home/dev/src/shopfront"),
                    env={"MEMVAULT_NO_DAEMON": "1"})
    assert done.returncode == 0 and done.stdout == "" and done.stderr == ""
    assert time.monotonic() - started < 10
    log = strict_vault.state_dir / "agents.log"

    def finished() -> bool:  # the detached run logs its line after the episodes are written: wait for both
        return (len(captured(strict_vault, "gemini")) >= 3 and log.exists()
                and "captured 3 turns of gemini session" in log.read_text())

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not finished():
        time.sleep(0.2)
    assert len(captured(strict_vault, "gemini")) == 3
    assert "captured 3 turns of gemini session" in log.read_text()


def test_gemini_setup_message_and_hook_context_are_not_captured_as_the_persons_prompt(strict_vault, tmp_path):
    """Gemini CLI 0.61 records its own ``<session_context>`` (directory listing, GEMINI.md, MCP server instructions)
    as a user message, and memvault's SessionStart block as ``<hook_context>...</hook_context>`` in front of the
    prompt (``gemini -p``) or as a user message of its own (interactive). Both were stored as "User: ..." episodes:
    the setup text every session, and the recalled memory echoed back into the vault under agent:gemini."""
    path = transcript(tmp_path, "gemini", big=False, name="gemini/session-2026-11-20T09-00-7d3e1f20.jsonl")
    capture(strict_vault, "gemini", path, final=True)
    episodes = captured(strict_vault, "gemini")
    assert [e.text.split("\n")[0] for e in episodes] == ["User: Why did the nightly backup job fail?",
                                                         "User: How do I rerun it?"]
    assert "disk on db01 was full" in episodes[0].text and "backup runbook again" in episodes[1].text
    stored = on_disk(strict_vault)
    assert "session_context" not in stored and "hook_context" not in stored and "GEMINI.md" not in stored
    assert "memvault memory for project" not in stored and "02:30 UTC" not in stored


@pytest.mark.parametrize("cut", ['"task_complete"', '"task_started"'])
def test_a_codex_turn_resumed_mid_way_keeps_codex_s_turn_id_and_is_stored_once(strict_vault, tmp_path, cut):
    """A capture that finds Codex's last turn not over (a PreCompact mid-turn, or its ``turn_context`` written and
    its prompt not yet) leaves the cursor at that turn; the next read started at the turn's user message, past its
    ``turn_context``/``task_started`` lines, so the turn got a hash for an id instead of Codex's ``turn_id``. Any
    read of the rollout from its start (the rollout moved to archived_sessions/ and captured by hand, or
    compressed to .jsonl.zst, or captures.db rebuilt) then found Codex's id unseen and stored the turn twice."""
    path = transcript(tmp_path, "codex", big=False)
    lines = path.read_text().splitlines(keepends=True)
    second = [i for i, line in enumerate(lines) if cut in line][1] + (cut == '"task_started"')
    path.write_text("".join(lines[:second]))
    report = capture(strict_vault, "codex", path)
    assert len(report.captured) == 1 and report.open_turns == (cut == '"task_complete"')
    path.write_text("".join(lines))  # the turn ends, and the session with it
    capture(strict_vault, "codex", path, final=True)
    ids = [e.meta["turn_id"] for e in captured(strict_vault, "codex")]
    assert ids == [f"019d036e-000{n}-7000-8000-00000000000{n}" for n in (1, 2, 3)]
    archived = tmp_path / "archived_sessions" / path.name
    archived.parent.mkdir()
    path.rename(archived)
    report = capture(Vault.open(strict_vault.root), "codex", archived, final=True)
    assert report.captured == [] and report.skipped == 3
    assert len(captured(strict_vault, "codex")) == 3


def test_a_hook_and_a_capture_run_by_hand_at_once_store_each_turn_once(strict_vault, tmp_path, monkeypatch):
    """Two captures of one session lock each other out only when they name it alike: the hook names the session
    (its payload's id) and ``memvault agent capture`` run by hand names the file, so the two took different locks,
    both found the turns not captured yet, and both stored them (seen with real processes: 2 runs in 5 stored
    every turn twice). Here both are made to ask "captured yet?" together when nothing keeps them apart."""
    import threading

    from memvault.stores.captures import CaptureLog

    path = transcript(tmp_path, "codex", big=False)
    together = threading.Barrier(2, timeout=3)
    asked = CaptureLog.seen

    def seen(self, runtime, turn_ids):
        found = asked(self, runtime, turn_ids)
        try:
            together.wait()
        except threading.BrokenBarrierError:  # the other one is held back: as it should be
            pass
        return found

    monkeypatch.setattr(CaptureLog, "seen", seen)
    errors: list[BaseException] = []

    def run(**kwargs) -> None:
        try:
            capture(Vault.open(strict_vault.root), "codex", path, final=True, **kwargs)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, kwargs={"session_id": "019d036d-5a1c-7e02-b3c4-4f6a8e2d9b10"}),
               threading.Thread(target=run)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors
    ids = [e.meta["turn_id"] for e in captured(strict_vault, "codex")]
    assert len(ids) == 3 and len(set(ids)) == 3, ids


def test_codex_stop_ends_its_own_turn_not_the_next_one_already_begun(strict_vault, tmp_path, monkeypatch):
    """Codex has no SessionEnd: its Stop (run as the model is about to finish a turn, before ``task_complete`` is
    written) captures as if the session were over, in a detached process. When that process read the rollout
    after the next turn had begun (a queued prompt goes out as soon as a turn ends), the next turn was stored with
    its prompt alone and the cursor moved to the end of the file: the rest of that turn was never captured. Stop
    names its turn (``turn_id``): the turns after it wait until they are over."""
    from agent_fixtures import call_hook

    path = transcript(tmp_path, "codex", big=False)
    lines = path.read_text().splitlines(keepends=True)
    second_prompt = [i for i, line in enumerate(lines) if '"user_message"' in line][1]
    path.write_text("".join(lines[: second_prompt + 3]))  # turn 2 begun: its prompt, its first command
    args = ["capture", "--runtime", "codex", "--vault", str(strict_vault.root)]

    def stop(turn: int) -> None:
        call_hook(monkeypatch, args, payload("codex", "Stop", transcript=path, cwd="/w",
                                             turn_id=f"019d036e-000{turn}-7000-8000-00000000000{turn}"))

    stop(1)
    assert [e.meta["turn_id"] for e in captured(strict_vault, "codex")] == ["019d036e-0001-7000-8000-000000000001"]
    path.write_text("".join(lines))
    stop(2)
    stop(3)
    episodes = captured(strict_vault, "codex")
    assert len(episodes) == 3
    assert "Assistant: shopfront 2.4.1 is on staging." in episodes[1].text, episodes[1].text


def test_codex_stop_in_a_rollout_read_in_pieces_still_leaves_the_next_turn_open(strict_vault, tmp_path, monkeypatch):
    """The turn Stop names may be in an earlier piece than the last (a rollout read in pieces): the turn begun
    after it still waits."""
    from agent_fixtures import call_hook

    from memvault.interfaces.agents import capture as capture_mod

    monkeypatch.setattr(capture_mod, "PIECE_BYTES", 1000)
    path = transcript(tmp_path, "codex", big=False)
    lines = path.read_text().splitlines(keepends=True)
    second_prompt = [i for i, line in enumerate(lines) if '"user_message"' in line][1]
    path.write_text("".join(lines[: second_prompt + 3]))
    call_hook(monkeypatch, ["capture", "--runtime", "codex", "--vault", str(strict_vault.root)],
              payload("codex", "Stop", transcript=path, cwd="/w", turn_id="019d036e-0001-7000-8000-000000000001"))
    assert [e.meta["turn_id"] for e in captured(strict_vault, "codex")] == ["019d036e-0001-7000-8000-000000000001"]
