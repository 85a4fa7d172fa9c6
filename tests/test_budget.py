"""``--budget`` holds for what the caller receives: the JSON envelope (field names, ids, scores, paths, times,
warnings, the budget's own note), the text lines and the prompt block, as the CLI prints them and the MCP tool
returns them, counted with the budget's own counter (:func:`memvault.core.hits.count_tokens`)."""
from __future__ import annotations

import asyncio
import json
from datetime import datetime, timedelta, timezone

import pytest

from memvault import Vault
from memvault.core.hits import count_tokens
from memvault.core.render import render
from memvault.rules.markup import printable
from memvault.interfaces.cli import Context, cli
from conftest import git
from fake_embedder import set_model

BUDGETS = [60, 90, 120, 160, 200, 250, 320, 400, 520, 700, 900, 1300]
QUERY = "primary database replica"


@pytest.fixture
def bv(vault, models, tmp_path):
    """A vault on the fake embedder with a dozen memories of every kind about the same subject."""
    set_model(vault.root, "fake-hash")
    git(vault.root, "commit", "-qm", "fake model", "--", "memvault.toml")
    v = Vault.open(vault.root, embedder_factory=models)
    for i in range(8):
        v.facts.set(f"db/node-{i}", f"The primary database node {i} " + "replica lag is watched. " * (i + 1)
                    + f"Port 54{i:02d}.", source="user:admin", importance=0.5 + i / 20)
    for i in range(5):  # dated from today: a fixed date makes the ranking, and so what fits, depend on the day run
        v.episodes.append(f"The replica database {i} caught up with the primary after a restart.",
                          source="agent:ops", at=datetime.now(timezone.utc) - timedelta(days=i + 1))
    script = tmp_path / "promote.sh"
    script.write_text("#!/bin/sh\n# description: Promote the replica database to primary\necho promote\n")
    script.chmod(0o755)
    v.procedures.add("db/promote", script, source="user:admin")
    return v


def _cli(runner, models, v, *args):
    r = runner.invoke(cli, obj=Context(embedder_factory=models), args=["--vault", str(v.root), "recall", QUERY,
                                                                       "--no-record", *args])
    assert r.exit_code == 0, r.output
    return r.stdout


@pytest.mark.parametrize("fmt", ["json", "text", "prompt"])
def test_what_the_cli_prints_fits_the_budget(bv, runner, models, fmt):
    """Before: --json printed 60 -> 179, 200 -> 337, 400 -> 583 tokens: only the hits' compact JSON was counted."""
    full = _cli(runner, models, bv, "--format", fmt, "-k", "20")
    assert count_tokens(full) > 600  # most budgets below do cut
    over = {}
    for budget in BUDGETS:
        out = _cli(runner, models, bv, "--format", fmt, "-k", "20", "--budget", str(budget))
        if count_tokens(out) > budget and "too small for even one hit" not in out:  # that refusal may run over
            over[budget] = count_tokens(out)
    assert over == {}, f"{fmt}: budget -> tokens printed, over the budget: {over}"


@pytest.mark.parametrize("fmt", ["json", "text"])
def test_explain_is_counted_too(bv, runner, models, fmt):
    for budget in (200, 400, 900):
        out = _cli(runner, models, bv, "--format", fmt, "-k", "20", "--budget", str(budget), "--explain")
        assert count_tokens(out) <= budget


def test_the_json_answer_fits_and_says_what_it_left_out(bv, runner, models):
    for budget in BUDGETS:
        out = _cli(runner, models, bv, "--json", "-k", "20", "--budget", str(budget))
        data = json.loads(out)
        assert list(data) == ["hits", "mode", "warnings", "nothing_found", "window", "budget"]
        note = data["budget"]
        if data["hits"]:
            assert note["budget"] == budget and note["kept"] == len(data["hits"]) and note["dropped"] >= 1
            assert sorted(note) == ["best_dropped", "best_dropped_tokens", "budget", "dropped", "kept"]
            assert any(f"budget of {budget} tokens" in w for w in data["warnings"])
        else:  # too small for even one hit: said, and nothing else
            assert f"budget of {budget} tokens is too small for even one hit" in data["nothing_found"]
            assert note["kept"] == 0 and note["needed"] > budget


def test_a_budget_too_small_for_one_hit_says_so_in_every_format(bv, runner, models):
    for fmt in ("json", "text", "prompt"):
        out = _cli(runner, models, bv, "--format", fmt, "-k", "20", "--budget", "30")
        assert "too small for even one hit" in out and "needs a budget of" in out, out
    result = bv.recall(QUERY, k=20, budget=30, record_access=False)
    assert len(result) == 0 and result.budget["needed"] > 30
    again = bv.recall(QUERY, k=20, budget=result.budget["needed"], record_access=False)
    assert len(again) >= 1 and count_tokens(render(again, "json") + "\n") <= result.budget["needed"]


def test_the_python_api_answer_fits_as_rendered(bv):
    for fmt in ("json", "text", "prompt"):
        for budget in BUDGETS:
            result = bv.recall(QUERY, k=20, budget=budget, fmt=fmt, record_access=False)
            if len(result):
                assert count_tokens(render(result, fmt) + "\n") <= budget, (fmt, budget)


def test_the_budget_keeps_whole_hits_in_order_and_as_many_as_fit(bv):
    everything = bv.recall(QUERY, k=20, record_access=False)
    for budget in BUDGETS:
        kept = bv.recall(QUERY, k=20, budget=budget, record_access=False)
        if not len(kept):
            continue
        order = [h.id for h in everything]
        assert [order.index(h.id) for h in kept] == sorted(order.index(h.id) for h in kept)
        assert all(h.text == everything[order.index(h.id)].text for h in kept)
        # Little room wasted: no hit left out would have fitted too (but for a few tokens: room is kept for the
        # longest note the budget could need, whichever hit it names).
        left = [h for h in everything if h.id not in {k.id for k in kept}]
        used = count_tokens(render(kept, "json") + "\n")
        for hit in left:
            item = json.dumps(hit.to_dict(), ensure_ascii=False, indent=2)
            adds = (len(item) + 4 * item.count("\n") + 6) // 4  # as it would be printed, two levels in
            assert used + adds > budget - 12, (budget, used, adds)


def test_the_mcp_answer_fits_the_budget(bv):
    pytest.importorskip("mcp")
    from mcp import Client

    from memvault.interfaces.mcp import build_server

    async def go():
        async with Client(build_server(bv, source="agent:t", warm=False)) as client:
            return [await client.call_tool("recall", {"query": QUERY, "k": 20, "budget": b}) for b in BUDGETS]

    over = {}
    for budget, answer in zip(BUDGETS, asyncio.run(go())):
        assert not answer.is_error
        text = answer.content[0].text
        if answer.structured_content["hits"] and count_tokens(text) > budget:
            over[budget] = count_tokens(text)
    assert over == {}, f"MCP: budget -> tokens returned, over the budget: {over}"


def _synthetic(rng) -> list:
    from memvault.core.hits import Hit

    texts = ["plain text", "ünïcödé ✓ 数据库", "a\x1b[31m control \x85 and \u202e bidi", 'quotes " and \\ back',
             "line one\nline two\n\nline four", "<fact>&amp;</fact>"]
    hits = []
    for i in range(rng.randint(1, 14)):
        kind = rng.choice(["fact", "episode", "procedure"])
        extra = {"trusted": rng.random() < 0.8}
        if kind == "fact":
            extra.update(stale=rng.random() < 0.3, stale_reason="past its valid_until" if rng.random() < 0.5 else None)
        if kind == "procedure":
            extra["runs"] = [{"episode": "E1", "at": "2026-12-01T00:00:00Z", "exit_code": rng.choice([0, 3]),
                              "commit": rng.choice([None, "abc123def4567890"]), "dirty": rng.random() < 0.5}]
        hits.append(Hit(kind, f"{kind[:2]}/{'x' * rng.randint(1, 30)}-{i}",
                        " ".join(rng.choice(texts) for _ in range(rng.randint(1, 12))), 1 - i / 20,
                        {"relevance": rng.random(), "importance": 0.5, "confidence": rng.choice([1.0, 0.5]),
                         "recency": rng.random(), "frequency": 0.0},
                        rng.choice(["user:admin", "agent:x"]), "2026-12-01T00:00:00Z", rng.choice([None, "2026-12-02T00:00:00.5Z"]),
                        f"facts/{i}.md", commit="abc123def4567890" if kind == "procedure" else None,
                        blob="0123456789abcdef" if kind == "procedure" else None, extra=extra))
    return hits


@pytest.mark.parametrize("seed", range(30))
def test_the_count_is_exact_at_the_edge(seed):
    """At a budget of exactly what the whole answer prints, nothing is left out; one token less and something is
    (in any format, with control characters, non-ASCII, escapes, runs, --explain, warnings and a window)."""
    import random

    from memvault.core.hits import RecallResult
    from memvault.core.render import fit_budget
    from memvault.rules.config import RecallSettings
    from memvault.rules.markup import printable

    rng = random.Random(seed)
    hits = _synthetic(rng)
    for fmt in ("json", "text", "prompt"):
        for explain in (False, True):
            weights = RecallSettings().weights if explain else None
            whole = RecallResult(hits, mode="hybrid", warnings=["a warning ✓"] * rng.randint(0, 2))
            whole.window = {"since": "2026-11-01T00:00:00Z", "until": None, "phrase": "last month"} if seed % 3 else None
            exact = count_tokens(printable(render(whole, fmt, explain=explain, weights=weights)) + "\n")
            for budget, all_kept in ((exact, True), (exact - 1, False)):
                result = RecallResult(hits, mode="hybrid", warnings=list(whole.warnings))
                result.window = whole.window
                fit_budget(result, budget, fmt, explain=explain, weights=weights)
                assert (len(result) == len(hits)) is all_kept, (fmt, explain, budget)
                if len(result):
                    assert count_tokens(printable(render(result, fmt, explain=explain, weights=weights)) + "\n") <= budget


def test_a_warning_added_after_the_fit_is_made_room_for(bv, monkeypatch):
    """The recall log that cannot be written says so in the answer, after the hits were fitted: the fit runs again."""
    from memvault.rules.errors import MemvaultError

    def fail(entry):
        raise MemvaultError("the recall log is locked " + "and busy " * 40)

    monkeypatch.setattr(bv.recall_log, "log_recall", fail)
    for budget in (400, 520, 900):
        result = bv.recall(QUERY, k=20, budget=budget, record_access=False)
        assert any(w.startswith("recall not logged") for w in result.warnings)
        assert len(result) and count_tokens(render(result, "json") + "\n") <= budget
        assert sum(w.startswith("1") or " hits left out " in w for w in result.warnings) == 1  # one note, not two


def test_the_mcp_keyword_only_warning_is_inside_the_budget(bv, models):
    pytest.importorskip("mcp")
    from mcp import Client

    from memvault.interfaces.mcp import build_server

    models.unavailable.add("fake-hash")

    async def go():
        async with Client(build_server(bv, source="agent:t")) as client:
            return [await client.call_tool("recall", {"query": QUERY, "k": 20, "budget": b}) for b in (250, 520)]

    for budget, answer in zip((250, 520), asyncio.run(go())):
        data = answer.structured_content
        assert data["mode"] == "keyword" and "keyword-only" in data["warnings"][0]
        assert data["hits"] and count_tokens(answer.content[0].text) <= budget


def test_a_character_beyond_ascii_counts_a_token_and_ascii_a_quarter():
    """A CJK memory counted at a quarter token a character took 2.8x its count in a real tokenizer's tokens
    (MiniLM's WordPiece: one a CJK character), so a budget let through nearly three times what it said."""
    from memvault.core.hits import count_tokens

    assert count_tokens("") == 0
    assert count_tokens("The billing database is PostgreSQL 15.") == 10  # ⌈38 / 4⌉, as before
    assert count_tokens("数据库主服务器") == 7
    assert count_tokens("db-billing-1 上运行") == 4 + 3  # ⌈13 / 4⌉ ASCII, and 3 beyond
    assert count_tokens("Die Datenbank läuft") == 5 + 1


@pytest.mark.parametrize("fmt", ["json", "text", "prompt"])
def test_the_budget_said_to_be_needed_returns_the_best_hit(fmt):
    """"Needs a budget of N" is a promise: at N the best hit comes back. The room kept for the note was sized by
    the hit whose kind and id together are longest, but the note prints the id twice (``best_dropped`` and the
    warning) and the kind once: a runbook "p" outweighed a fact "pppppp" there while the fact's note is 5
    characters longer, and at N the answer said "too small for even one hit" again (JSON, 1 in 4 text lengths)."""
    from memvault.core.hits import Hit, RecallResult
    from memvault.core.render import fit_budget

    factors = {"relevance": 1.0, "importance": 0.5, "confidence": 1.0, "recency": 1.0, "frequency": 0.0}
    broken = {}
    for extra in range(8):
        hits = [Hit("procedure", "p", "run it " * 100 + "x" * extra, 0.9, factors, "user:a", None, None, "p.sh"),
                Hit("fact", "pppppp", "small", 0.8, factors, "user:a", None, None, "facts/pppppp.md")]
        first = RecallResult(hits)
        fit_budget(first, 1, fmt)
        needed = first.budget["needed"]
        again = RecallResult(hits)
        fit_budget(again, needed, fmt)
        if [h.id for h in again][:1] != ["p"]:
            broken[extra] = (needed, again.nothing_found)
    assert broken == {}


@pytest.mark.parametrize("fmt", ["json", "text", "prompt"])
def test_the_budget_said_to_be_needed_for_a_lone_hit_is_the_least(fmt):
    """A lone hit that fits leaves nothing out, so its answer carries no note; the budget said to be needed counted
    room for one all the same (JSON: ~80 tokens more than the answer takes)."""
    from memvault.core.hits import Hit, RecallResult
    from memvault.core.render import fit_budget

    factors = {"relevance": 1.0, "importance": 0.5, "confidence": 1.0, "recency": 1.0, "frequency": 0.0}
    hit = Hit("fact", "db/primary", "The primary database listens on port 5432. " * 20, 0.9, factors, "user:a",
              None, None, "facts/db/primary.md")
    first = RecallResult([hit])
    fit_budget(first, 1, fmt)
    needed = first.budget["needed"]
    exact = count_tokens(printable(render(RecallResult([hit]), fmt)) + "\n")
    assert needed == exact
    at = RecallResult([hit])
    fit_budget(at, needed, fmt)
    assert list(at) == [hit] and at.budget is None


def test_the_usage_record_counts_the_hits_returned_when_a_damaged_state_says_so(bv):
    """A damaged state.db is moved aside while recall reads the usage counts, and its warning joins the answer: the
    budget is fitted with that warning in it, so the hits counted as shown are the hits returned (the answer was
    fitted first and fitted again after, and the record kept counting the hits the second fit dropped)."""
    everything = bv.recall(QUERY, k=20, record_access=False)
    keys = [(h.kind, h.id) for h in everything]
    dropped_by_the_warning = 0
    for budget in BUDGETS:
        bv.state.close()
        (bv.state_dir / "state.db").write_bytes(b"not a database at all" * 100)
        for suffix in ("-wal", "-shm"):
            (bv.state_dir / f"state.db{suffix}").unlink(missing_ok=True)
        kept = bv.recall(QUERY, k=20, budget=budget)
        clean = bv.recall(QUERY, k=20, budget=budget, record_access=False)
        if not len(clean):
            continue
        assert any("was damaged" in w for w in kept.warnings), kept.warnings
        dropped_by_the_warning += len(kept) < len(clean)
        shown = {key for key, u in bv.state.get(keys).items() if u.shown > 0}
        assert shown == {(h.kind, h.id) for h in kept}, budget
    assert dropped_by_the_warning  # the warning takes the room of a hit at some budget


@pytest.mark.parametrize("fmt", ["json", "text", "prompt"])
@pytest.mark.parametrize("count", [1, 2])
def test_a_budget_too_small_for_one_hit_names_one_number_to_pass(fmt, count):
    """The warning said "the best of them needs 124 tokens" (the hit alone) beside "needs a budget of 211" (the
    answer with it, as printed): two numbers for one question, and only the second one is worth passing as
    --budget. Both now say that one, and so does the JSON's ``best_dropped_tokens``."""
    import re

    from memvault.core.hits import Hit, RecallResult
    from memvault.core.render import fit_budget

    factors = {"relevance": 1.0, "importance": 0.5, "confidence": 1.0, "recency": 1.0, "frequency": 0.0}
    hits = [Hit("fact", "db/primary", "The primary database listens on port 5432. " * 3, 0.9, factors, "user:a",
                None, None, "facts/db/primary.md"),
            Hit("fact", "db/replica", "The replica follows it. " * 3, 0.8, factors, "user:a", None, None,
                "facts/db/replica.md")][:count]
    result = RecallResult(hits)
    fit_budget(result, 10, fmt)
    needed = result.budget["needed"]
    (warning,) = result.warnings
    assert [int(n) for n in re.findall(r"needs a budget of (\d+)", warning)] == [needed], warning
    assert result.nothing_found.endswith(f"needs a budget of {needed}")
    assert result.budget["best_dropped_tokens"] == needed
    again = RecallResult(hits)
    fit_budget(again, needed, fmt)
    assert [h.id for h in again][:1] == ["db/primary"]
