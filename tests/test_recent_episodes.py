"""What a session starting in a project hears of its recent episodes (memvault.interfaces.agents.recent), when the
vault is shared by several hosts (``[episodes] track_in_git``: one folder per host) and when a month file or a line
is dated after the present (a host whose clock is wrong, a line written by hand or committed by a teammate)."""
from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

from memvault.interfaces.agents.project import Project
from memvault.interfaces.agents.recent import recent

AT = datetime(2026, 12, 6, 12, 0, tzinfo=timezone.utc)
BILLING = Project(cwd="/src/billing", root="/src/billing", name="billing")


def line(text: str, when: datetime, *, kind: str = "incident", ident: str | None = None) -> str:
    return json.dumps({"id": ident or f"e-{text.split()[0]}", "created_at": when.strftime("%Y-%m-%dT%H:%M:%SZ"),
                       "source": "user:ops", "kind": kind, "text": text, "tags": ["billing"]}) + "\n"


def write(path: Path, *lines: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as f:
        f.writelines(lines)
    return path


def ids(files: list[Path], limit: int = 10) -> list[str]:
    return [p.episode.id for p in recent(sorted(files, key=lambda p: (p.name, p.as_posix())), BILLING, limit, at=AT)]


def test_every_hosts_files_of_this_month_and_the_last_are_read(tmp_path):
    """Three hosts share the vault: each appends to its own month file. The session must hear each host's failure
    of this month and the failure of late last month, not the two files last in name order."""
    base = tmp_path / "episodes"
    files = [
        write(base / "alpha" / "2026-12.jsonl", line("alpha deploy of billing failed", AT - timedelta(hours=3))),
        write(base / "beta" / "2026-12.jsonl", line("beta disk of billing full", AT - timedelta(hours=5))),
        write(base / "gamma" / "2026-12.jsonl", line("gamma billing queue stuck", AT - timedelta(hours=7))),
        write(base / "alpha" / "2026-11.jsonl", line("late billing outage", AT - timedelta(days=8))),
    ]
    assert set(ids(files)) == {"e-alpha", "e-beta", "e-gamma", "e-late"}


def test_a_month_file_named_after_the_present_does_not_push_this_month_out(tmp_path):
    """A host whose clock ran a year ahead wrote 2027-12.jsonl: taken as "the newest month", it hid this month's
    failure from every session start for a year."""
    base = tmp_path / "episodes"
    files = [
        write(base / "2026-12.jsonl", line("today billing deploy failed", AT - timedelta(hours=2))),
        write(base / "2027-12.jsonl", line("skewed billing incident", AT + timedelta(days=365))),
    ]
    assert ids(files) == ["e-today"]


def test_a_line_dated_after_the_present_is_not_heard_first_for_ever(tmp_path):
    """A line dated weeks ahead (inside this month's file) weighed as if it had just happened, and kept that weight
    until its date came: it is not believed (as recall's recency does not believe it); a line within the clock
    skew allowed to a write is."""
    base = tmp_path / "episodes"
    files = [write(base / "2026-12.jsonl",
                   line("yesterday billing rollback", AT - timedelta(days=1), kind="failure"),
                   line("planted billing incident", AT + timedelta(days=20)),
                   line("skewed billing incident", AT + timedelta(minutes=3)))]
    assert ids(files) == ["e-skewed", "e-yesterday"]
