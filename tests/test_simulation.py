"""The weights of recall are chosen offline (bench/eval_folds.py simulates recall's ranking on dumps of what it sees,
docs/benchmarks.md): the simulation must rank as recall does, or the figures published are of another ranker. Here
its handling of a time the question names is checked against recall's own ``_by_time`` on random candidates."""
from __future__ import annotations

import random
import sys
from datetime import datetime, timedelta, timezone

import numpy as np
import pytest

from conftest import REPO_ROOT
from memvault.core.candidates import Candidate
from memvault.core.recall import _by_time
from memvault.rules import timeq
from memvault.rules.freshness import stored_time

sys.path.insert(0, str(REPO_ROOT / "bench"))
import eval_folds as ef  # noqa: E402

BODIES = ["backup failed", "Retro: on 3 March 2025 the backup failed", "on 2 March 2025 the disk filled"]


@pytest.mark.parametrize("e", [0.0, 0.5, 0.75, 1.0])
def test_the_simulation_ranks_a_time_question_as_recall_does(e):
    window = timeq.parse("why did the backup fail on 3 March 2025", datetime(2025, 9, 1, tzinfo=timezone.utc))
    start, t = datetime(2025, 2, 1, tzinfo=timezone.utc), 2.0
    for trial in range(150):
        rnd = random.Random(trial)
        n = rnd.randint(1, 60)
        rows = []
        for i in range(n):
            created = (start + timedelta(hours=rnd.randint(0, 24 * 120))).strftime("%Y-%m-%dT%H:%M:%SZ")
            source = rnd.choice(["user:ops", "agent:scraper"])
            relevance = rnd.choice([round(rnd.random(), 2), 0.5])  # ties too
            rows.append((f"{i:03d}", created, rnd.choice(BODIES), source, relevance))
        found = [Candidate(("episode", key), {"created": c, "body": b, "source": s}, relevance=r)
                 for key, c, b, s, r in rows]
        rnd.shuffle(found)  # recall's candidates come in the order the searches found them
        _by_time(found, window, 1 + t, ef.TEXT_READS, (1 + t) ** e,
                 lambda c: ef.TRUST.is_trusted(c.doc["source"]))
        recall = [f"episode:{c.key[1]}" for c in sorted(found, key=lambda c: (-c.relevance, c.key))][:10]
        marks = [ef.time_mark(window, stored_time(c), b) for _key, c, b, _s, _r in rows]  # eval_folds.prepare's
        zero = np.zeros(n)
        q = ef.Q("set", "q", 0, "pos", set(), np.arange(n), np.array([r[-1] for r in rows]), zero, zero,
                 np.zeros(n, dtype=bool), zero, [f"episode:{r[0]}" for r in rows], {}, 0.0, 0.0, 1.0, False, False,
                 False, {}, True, np.array(marks), np.zeros(n, dtype=bool),
                 np.array([ef.TRUST.is_trusted(r[3]) for r in rows]))
        # s = 0 and no keyword side: the simulation's relevance is the given one, as recall's candidates' is
        assert ef.rank(q, 0.0, 0.0, 0.0, 0.0, 0.0, t, None, None, e, floor=0.0) == recall, trial
