"""Listing every fact (``fact list``, ``stale``, purge's and dedup's fact pass) at six months: 20,000 files.

The files are the truth and each is read whole and parsed, as before; what a listing no longer does is resolve every
folder of every path again to prove the file is inside ``facts/`` (``os.path.realpath``: ~10 ``lstat`` calls and a
Python loop per file, 1.5 s of the 5.2 s of ``fact list`` at 20,000 facts). The file is opened without following a
link at its name and the kernel's name of what was opened (``/proc/self/fd``) is checked instead: the handle that
is then read, not the path again. Anything the quick check does not clear (a link at the name, a folder that
leads elsewhere, no ``/proc``) takes the resolving path it always took, so the answer is the same file for file.
"""
from __future__ import annotations

import os

import pytest

from memvault.rules import fsread
from memvault.rules.validation import Problem


def odd_vault(vault, tmp_path):
    """A vault with the odd files six months bring: every listing of it must read the same with or without the
    quick path."""
    facts = vault.root / "facts"
    vault.facts.set("db/primary", "The primary database host listens on port 5432.", tags=["postgres"])
    vault.facts.set("web/lb", "The load balancer forwards port 443.", category="network")
    for n in range(12):  # deep folders, as a big vault's facts/tldr/<topic>/<name>.md
        vault.facts.set(f"deep/a{n % 3}/b{n % 2}/c/fact-{n}", f"Deep fact number {n} about host web{n}.")
    (facts / "broken.md").write_text("---\ncategory: [unclosed\n---\nbody\n")
    (facts / "unclosed.md").write_text("---\ncategory: x\nno end of the front matter\n")
    (facts / "empty-body.md").write_text("---\ncategory: x\n---\n\n")
    (facts / "latin1.md").write_bytes("---\ncategory: x\n---\ncaf\u00e9 au lait\n".encode("latin-1"))
    (facts / "huge.md").write_text("---\ncategory: x\n---\n" + "a fact that grew " * 10_000 + "\n")
    (facts / "crlf.md").write_bytes(b"---\r\ncategory: windows\r\nimportance: 0.9\r\n---\r\nPasted from Windows.\r\n")
    (facts / "no-front-matter.md").write_text("Just a sentence written by hand.\n")
    (facts / "conflict.md").write_text("---\ncategory: x\n---\n<<<<<<< HEAD\nmine\n=======\ntheirs\n>>>>>>> b\n")
    (facts / "alias.md").write_text("---\na: &x [1]\nb: *x\n---\nbody\n")
    (facts / "inside-link.md").symlink_to("web/lb.md")  # a link to a fact inside facts/: read
    (facts / "escape.md").symlink_to(tmp_path / "secret.md")  # a link out of facts/: refused
    (tmp_path / "secret.md").write_text("---\ncategory: x\n---\nthe host's own secret\n")
    (facts / "dangling.md").symlink_to("nowhere.md")
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "outside.md").write_text("---\ncategory: x\n---\nnot the vault's\n")
    (facts / "linked-folder").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    (facts / "alias-folder").symlink_to("deep", target_is_directory=True)  # a folder link inside facts/
    os.mkfifo(facts / "fifo.md")
    vault.reindex()
    # edited by hand after the index was built: the listing reads the file, never the index
    (facts / "db" / "primary.md").write_text("---\nsource: user:ops\nimportance: 0.25\n---\nMoved to port 6432.\n")
    return vault


def listing(vault):
    problems: list[Problem] = []
    facts = [(f.to_dict(vault.root), f.quarantined, f.extra) for f in vault.facts.list(problems=problems)]
    return facts, sorted((str(p.path), p.reason, p.line) for p in problems)


def test_a_listing_reads_what_the_resolving_read_reads_file_for_file(vault, tmp_path, monkeypatch):
    odd_vault(vault, tmp_path)
    quick = listing(vault)
    stale_quick = vault.stale()
    monkeypatch.setattr(fsread, "_KERNEL_NAMES", None)  # every read resolves the path, as before
    assert listing(vault) == quick
    assert vault.stale() == stale_quick
    facts, problems = quick
    keys = {d["key"] for d, _, _ in facts}
    assert {"inside-link", "crlf", "no-front-matter", "web/lb", "deep/a0/b0/c/fact-0"} <= keys
    assert not keys & {"escape", "broken", "latin1", "fifo", "dangling", "conflict", "alias", "empty-body"}
    primary = next(d for d, _, _ in facts if d["key"] == "db/primary")
    assert (primary["text"], primary["importance"], primary["source"]) == ("Moved to port 6432.", 0.25, "user:ops")
    shown = "\n".join(str(p) for p in problems)
    for name in ("escape.md", "broken.md", "latin1.md", "fifo.md", "conflict.md", "huge.md", "dangling.md"):
        assert name in shown, (name, shown)


def test_a_file_swapped_for_a_link_out_of_the_folder_is_refused_on_the_quick_path(vault, tmp_path):
    """The check is on what was opened: a folder on the way that is a link out of ``facts/`` (made after the walk
    saw a real folder) is caught by the kernel's name of the open file, not let through by the path's look."""
    vault.facts.set("team/notes", "A note.")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "notes.md").write_text("---\ncategory: x\n---\nthe host's own file\n")
    folder = vault.root / "facts" / "team"
    files = vault.facts.store.files()
    (folder / "notes.md").unlink()
    folder.rmdir()
    folder.symlink_to(outside, target_is_directory=True)
    store = vault.facts.store
    with pytest.raises(Exception) as caught:
        store.read_file("team/notes", dict(files)["team/notes"])
    assert "outside" in str(caught.value) and "not followed" in str(caught.value)


def test_listing_facts_does_not_resolve_every_folder_of_every_path(vault, monkeypatch):
    """A cost that grows with the depth of each file, not a timing: ``os.lstat`` calls (what ``realpath`` makes,
    one per folder on the way) while 24 facts in folders four deep are listed. Before: 17 per fact in this test's
    temporary folders (415 in all); now a few for the whole listing."""
    for n in range(24):
        vault.facts.set(f"area/t{n % 4}/s{n % 3}/fact-{n}", f"Fact number {n}.")
    calls = []
    real = os.lstat

    def counting(path, *args, **kwargs):
        calls.append(path)
        return real(path, *args, **kwargs)

    monkeypatch.setattr(os, "lstat", counting)
    facts = vault.facts.store.list()
    assert len(facts) == 24
    assert len(calls) <= 24, f"{len(calls)} lstat calls for 24 facts: {calls[:12]}"


def test_listing_the_facts_memvault_wrote_does_not_run_the_yaml_loader(vault, monkeypatch):
    """A cost, not a timing: the YAML loader (a third of ``fact list`` at 20,000 facts) runs for no fact whose front
    matter is the plain ``key: value`` lines memvault writes; one written otherwise by hand still goes to it."""
    from memvault.rules import frontmatter_edit as fm

    for n in range(10):
        vault.facts.set(f"area/fact-{n}", f"Fact number {n}.", tags=["ops", "db"], category="infra",
                        valid_until="2030-01-01", importance=0.75)
    (vault.root / "facts" / "by-hand.md").write_text("---\ncategory: 'quoted'  # a comment\n---\nBy hand.\n")
    loads = []
    yaml, loader, handler = fm._yaml()
    real = handler.load
    monkeypatch.setattr(handler, "load", lambda text, **kw: loads.append(text) or real(text, **kw))
    facts = {f.key: f for f in vault.facts.store.list()}
    assert len(facts) == 11 and facts["by-hand"].category == "quoted"
    assert facts["area/fact-3"].tags == ["ops", "db"] and facts["area/fact-3"].importance == 0.75
    assert loads == ["category: 'quoted'  # a comment"]
