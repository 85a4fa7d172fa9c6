"""Review of the line merge of episode month files at sync (5d9e2a0, 9de8829): two clones writing one month file,
real git (a bare remote, two clones), each side's bytes committed by hand so every shape can be tried."""
from __future__ import annotations

import json

import pytest

from memvault import Vault
from memvault.rules.errors import GitError, SyncConflict
from memvault.stores.episodes import merge_lines
from conftest import git
from test_sync import tracked_clones, twins  # noqa: F401 (twins: a fixture)

MONTH = "episodes/shared/2026-11.jsonl"


def line(id: str, text: str, source: str = "agent:ops", at: str = "2026-11-03T10:00:00Z") -> bytes:
    return (json.dumps({"id": id, "created_at": at, "source": source, "kind": "raw", "text": text},
                       separators=(", ", ": ")) + "\n").encode()


class Pair:
    """Two clones whose person chose one folder name for both (``MEMVAULT_HOST=shared``): both append to
    ``episodes/shared/``, so a month file changed on both sides is merged in place (no successor folder)."""

    def __init__(self, tmp_path, monkeypatch, models):
        monkeypatch.setenv("MEMVAULT_HOST", "shared")
        self.remote = tmp_path / "remote.git"
        self.a, self.b, _ = tracked_clones(tmp_path, models)

    def commit(self, vault: Vault, data: bytes | None, path: str = MONTH, message: str = "edit") -> None:
        target = vault.root / path
        if data is None:
            git(vault.root, "rm", "-q", "--", path)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
            git(vault.root, "add", "--", path)
        git(vault.root, "commit", "-qm", message)

    def base(self, data: bytes, path: str = MONTH) -> None:
        self.commit(self.a, data, path, "base")
        git(self.a.root, "push", "-q", "origin", "HEAD:main")
        self.b.sync()
        assert (self.b.root / path).read_bytes() == data

    def remote_side(self, data: bytes | None, path: str = MONTH) -> None:
        """The other clone's commit, pushed: in b's rebase it is "ours" (stage 2)."""
        self.commit(self.a, data, path, "remote side")
        git(self.a.root, "push", "-q", "origin", "HEAD:main")

    def merged(self, path: str = MONTH) -> bytes:
        """b syncs (its own commit made by hand before); the month file as b and then a see it."""
        self.b.sync()
        self.assert_clean(self.b)
        assert git(self.b.root, "rev-parse", "HEAD") == git(self.b.root, "rev-parse", "origin/main")
        self.a.sync()
        mine = (self.b.root / path).read_bytes()
        assert (self.a.root / path).read_bytes() == mine
        return mine

    @staticmethod
    def assert_clean(vault: Vault) -> None:
        assert not (vault.root / ".git" / "rebase-merge").exists()
        assert not (vault.root / ".git" / "rebase-apply").exists()
        assert git(vault.root, "status", "--porcelain") == ""


@pytest.fixture
def pair(tmp_path, monkeypatch, models):
    return Pair(tmp_path, monkeypatch, models)


A, B, C = line("A", "alpha"), line("B", "beta"), line("C", "gamma")
X, Y = line("X", "from the remote"), line("Y", "from here")


def test_both_append_different_lines_each_kept_once(pair):
    pair.base(A)
    pair.remote_side(A + X)
    pair.commit(pair.b, A + Y)
    assert pair.merged() == A + X + Y


def test_both_append_the_same_line_it_is_kept_once(pair):
    pair.base(A)
    pair.remote_side(A + X + B)
    pair.commit(pair.b, A + B + Y)
    assert pair.merged() == A + X + B + Y


def test_a_purge_here_meeting_an_append_there_stays_purged(pair):
    secret = line("S", "token ghp_0123456789abcdef", source="user:leaky")
    pair.base(A + secret)
    pair.remote_side(A + secret + X)
    pair.commit(pair.b, A)
    assert pair.merged() == A + X


def test_a_purge_there_meeting_an_append_here_stays_purged(pair):
    secret = line("S", "token", source="user:leaky")
    pair.base(A + secret)
    pair.remote_side(A)
    pair.commit(pair.b, A + secret + Y)
    assert pair.merged() == A + Y


def test_both_purge_different_lines(pair):
    pair.base(A + B + C)
    pair.remote_side(A + C + X)
    pair.commit(pair.b, B + C + Y)
    assert pair.merged() == C + X + Y


def test_a_redaction_here_wins_over_an_append_there(pair):
    secret, redacted = line("S", "password hunter2"), line("S", "password <redacted>")
    pair.base(A + secret)
    pair.remote_side(A + secret + X)
    pair.commit(pair.b, A + redacted)
    out = pair.merged()
    assert b"hunter2" not in out and out.count(b'"id": "S"') == 1


def test_a_redaction_there_wins_over_an_append_here(pair):
    secret, redacted = line("S", "password hunter2"), line("S", "password <redacted>")
    pair.base(A + secret)
    pair.remote_side(A + redacted)
    pair.commit(pair.b, A + secret + Y)
    out = pair.merged()
    assert b"hunter2" not in out and out == A + redacted + Y


def test_a_line_edited_on_both_sides_is_never_kept_twice_nor_guessed(pair):
    """Both sides changed one episode (two redactions of one secret, or a redaction and a typo fix): neither can be
    chosen without reading them (the other may still hold the secret), so the sync stops on the file as before."""
    secret = line("S", "password hunter2 for db1")
    pair.base(A + secret)
    pair.remote_side(A + line("S", "password hunter2 for db1 (typo fixed)") + X)
    pair.commit(pair.b, A + line("S", "password <redacted> for db1"))
    head = git(pair.b.root, "rev-parse", "HEAD")
    with pytest.raises(SyncConflict):
        pair.b.sync()
    assert git(pair.b.root, "rev-parse", "HEAD") == head
    pair.assert_clean(pair.b)


def test_an_episode_purged_there_does_not_come_back_through_its_edit_here(pair):
    """The remote purged a source; this clone had redacted one of its lines (same id, new text): the purge stands."""
    leaky = line("S", "password hunter2", source="user:leaky")
    pair.base(A + leaky)
    pair.remote_side(A + X)
    pair.commit(pair.b, A + line("S", "password <redacted>", source="user:leaky"))
    assert b'"id": "S"' not in pair.merged()


def test_an_episode_purged_here_does_not_come_back_through_its_edit_there(pair):
    leaky = line("S", "password hunter2", source="user:leaky")
    pair.base(A + leaky)
    pair.remote_side(A + line("S", "password <redacted>", source="user:leaky") + X)
    pair.commit(pair.b, A + Y)
    assert pair.merged() == A + X + Y


def test_lines_without_ids_and_malformed_lines_are_kept_as_bytes(pair):
    junk, noid = b"{not json\n", b'{"text": "no id"}\n'
    pair.base(A + junk)
    pair.remote_side(A + junk + noid + X)
    pair.commit(pair.b, A + junk + Y + noid)
    out = pair.merged()
    assert out.count(noid) == 1 and out.count(junk) == 1 and X in out and Y in out


def test_crlf_lines_keep_their_bytes(pair):
    crlf = A.replace(b"\n", b"\r\n")
    pair.base(crlf)
    pair.remote_side(crlf + X)
    pair.commit(pair.b, crlf + Y)
    assert pair.merged() == crlf + X + Y


def test_a_final_line_without_newline(pair):
    pair.base(A)
    pair.remote_side(A + X.rstrip(b"\n"))
    pair.commit(pair.b, A + Y.rstrip(b"\n"))
    assert pair.merged() == A + X + Y


def test_delete_modify_both_ways(pair):
    pair.base(A)
    pair.remote_side(None)  # the remote purged every line: the file is gone
    pair.commit(pair.b, A + Y)
    assert pair.merged() == Y


def test_modify_delete(pair):
    pair.base(A)
    pair.remote_side(A + X)
    pair.commit(pair.b, None)  # this clone purged every line
    assert pair.merged() == X


def test_several_month_files_and_a_fact_stop_untouched(pair):
    other = "episodes/shared/2026-10.jsonl"
    fact = "facts/db/primary.md"
    pair.commit(pair.a, A, other, "base other")
    pair.commit(pair.a, b"---\n---\nThe primary is db1.\n", fact, "fact")
    pair.base(A)
    pair.remote_side(A + X)
    pair.remote_side(A + X, other)
    pair.remote_side(b"---\n---\nThe primary is db2.\n", fact)
    pair.commit(pair.b, A + Y)
    pair.commit(pair.b, A + Y, other)
    pair.commit(pair.b, b"---\n---\nThe primary is db3.\n", fact)
    head = git(pair.b.root, "rev-parse", "HEAD")
    with pytest.raises(SyncConflict) as info:
        pair.b.sync()
    assert "db/primary" in info.value.keys
    assert git(pair.b.root, "rev-parse", "HEAD") == head
    pair.assert_clean(pair.b)
    assert (pair.b.root / MONTH).read_bytes() == A + Y == (pair.b.root / other).read_bytes()


def test_merged_lines_are_indexed_once(pair):
    pair.base(A)
    pair.remote_side(A + line("X", "rotated the nginx logs on web7"))
    pair.commit(pair.b, A + line("Y", "rotated the nginx logs on web8"))
    pair.b.reindex()
    pair.merged()
    hits = [h.id for h in pair.b.recall("rotated nginx logs", k=10)]
    assert sorted(h for h in hits if h in ("X", "Y")) == ["X", "Y"]
    assert len(hits) == len(set(hits))


def test_merge_lines_unit_cases():
    assert merge_lines(A, A + B, A + B + C) == (A + B, C)  # the same line appended on both sides: once
    # a lone CR splits a line for the reader (parse_lines) and for the merge alike, and is written back as it was
    assert merge_lines(b"", A + b"junk\rmore\n", b"") == (A + b"junk\rmore\n", b"")
    assert merge_lines(A, A + b"\n\n  \n" + B, A) == (A + B, b"")  # blank lines are no episodes
    assert merge_lines(A, X, Y) == (X, Y)  # X is a new file there, Y here: both are kept


def test_several_local_commits_each_merged_in_turn(pair):
    secret = line("S", "token", source="user:leaky")
    pair.base(A + secret)
    pair.remote_side(A + secret + X)
    pair.commit(pair.b, A + secret + Y, message="append")
    pair.commit(pair.b, A + Y, message="purge")
    pair.commit(pair.b, A + Y + line("Z", "later"), message="append again")
    assert pair.merged() == A + X + Y + line("Z", "later")


def test_lines_merged_out_of_time_order_still_list_newest_first(pair):
    """The merge puts this clone's lines after the remote's whatever their times: a listing with a limit must not
    read the file's order as time order."""
    early, late = line("Y", "here, earlier", at="2026-11-04T09:00:00Z"), line("X", "there, later",
                                                                           at="2026-11-05T09:00:00Z")
    pair.base(A)
    pair.remote_side(A + late)
    pair.commit(pair.b, A + early)
    assert pair.merged() == A + late + early
    assert [e.id for e in pair.b.episodes.list(limit=1)] == ["X"]
    assert [e.id for e in pair.b.episodes.list(limit=2)] == ["Y", "X"]


def test_a_failure_while_resolving_aborts_the_rebase_and_keeps_local_commits(pair, monkeypatch):
    from memvault.core import remote

    pair.base(A)
    pair.remote_side(A + X)
    pair.commit(pair.b, A + Y)
    head = git(pair.b.root, "rev-parse", "HEAD")

    def boom(*args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(remote, "_stage_file", boom)
    with pytest.raises(OSError):
        pair.b.sync()
    assert git(pair.b.root, "rev-parse", "HEAD") == head
    pair.assert_clean(pair.b)
    assert (pair.b.root / MONTH).read_bytes() == A + Y


def test_a_host_folder_made_a_link_there_is_never_written_through(pair, tmp_path):
    import os

    outside = tmp_path / "outside"
    outside.mkdir()
    pair.base(A)
    git(pair.a.root, "rm", "-rq", "episodes/shared")
    (pair.a.root / "episodes").mkdir(exist_ok=True)
    os.symlink(outside, pair.a.root / "episodes" / "shared")
    git(pair.a.root, "add", "episodes/shared")
    git(pair.a.root, "commit", "-qm", "a link")
    git(pair.a.root, "push", "-q", "origin", "HEAD:main")
    pair.commit(pair.b, A + Y)
    head = git(pair.b.root, "rev-parse", "HEAD")
    with pytest.raises(Exception):
        pair.b.sync()
    assert list(outside.iterdir()) == []
    assert git(pair.b.root, "rev-parse", "HEAD") == head
    pair.assert_clean(pair.b)


def test_a_redaction_in_a_copy_moving_on_meets_the_originals_appends(twins):
    """The drawn-folder case: the copy's lines move to its next folder; its redaction must still win and its purge
    of the secret's line must not come back, and the original is not moved on in turn."""
    import shutil

    a, b = twins
    shared = a.episodes.store.host
    path = f"episodes/{shared}/2026-11.jsonl"
    secret = line("S", "password hunter2")
    (a.root / path).parent.mkdir(parents=True, exist_ok=True)
    (a.root / path).write_bytes(A + secret)
    git(a.root, "add", "--", path)
    git(a.root, "commit", "-qm", "base")
    git(a.root, "push", "-q", "origin", "HEAD:main")
    git(b.root, "pull", "-q", "origin", "main")  # the copy is made now: both hold the month file, one folder
    shutil.copyfile(a.state_dir / "episode-folders.json", b.state_dir / "episode-folders.json")
    b = Vault.open(b.root)
    (a.root / path).write_bytes(A + secret + X)
    git(a.root, "commit", "-qam", "append there")
    git(a.root, "push", "-q", "origin", "HEAD:main")
    (b.root / path).write_bytes(A + line("S", "password <redacted>"))
    git(b.root, "commit", "-qam", "redact here")
    b.sync()
    a.sync()
    for v in (a, b):
        assert not git(v.root, "status", "--porcelain")
        texts = [e.text for e in v.episodes.iter()]
        assert "password hunter2" not in texts and texts.count("password <redacted>") == 1
        assert sorted(texts) == sorted(["alpha", "from the remote", "password <redacted>"])
    assert a.episodes.store.host == shared


def test_a_side_that_cannot_be_read_is_an_error_never_an_empty_side(pair, monkeypatch):
    """git.staged answers None for a stage it cannot show, whatever the reason: the remote's side read as empty
    made its every line "not there", and the merge deleted them with no word."""
    from memvault.stores.gitstore import GitStore

    pair.base(A)
    pair.remote_side(A + X)
    pair.commit(pair.b, A + Y)
    head = git(pair.b.root, "rev-parse", "HEAD")
    real = GitStore.staged
    monkeypatch.setattr(GitStore, "staged", lambda self, n, rel: None if n == 2 else real(self, n, rel))
    with pytest.raises(GitError):
        pair.b.sync()
    assert git(pair.b.root, "rev-parse", "HEAD") == head
    pair.assert_clean(pair.b)
    assert git(pair.a.root, "rev-parse", "HEAD") == git(pair.b.root, "rev-parse", "origin/main")
