from __future__ import annotations

import random
import time
from pathlib import Path

import pytest

from memvault.rules.dedup import Keywords, Match, compare, groups, keywords
from memvault.rules.errors import InvalidValue

PRIMARY = "The primary database listens on 10.8.0.4 port 5432"


def test_keywords_words_and_values():
    kw = keywords("The primary database listens on 10.8.0.4:5432 since 2026-11-02 at 3:15 UTC")
    assert kw == Keywords(
        words=frozenset({"primary", "database", "listen", "since", "utc"}),
        values=frozenset({"10.8.0.4", "5432", "2026-11-02", "03:15"}),
    )


@pytest.mark.parametrize(
    "text,values",
    [
        ("Production runs acme-shop v2.15.1", {"2.15.1"}),
        ("PostgreSQL 16.4 on a 500 GB volume", {"16.4", "500gb"}),
        ("a 500GB volume at 80% used", {"500gb", "80%"}),
        ("lb1 peaked at 2,310 req/s", {"2310"}),
        ("subnet 10.8.0.0/24, gateway 10.8.0.1", {"10.8.0.0/24", "10.8.0.1"}),
        ("created 2026-11-01T03:28:32Z", {"2026-11-01", "03:28:32"}),
        ("took 13m32s for 4.08 GB", {"13m32s", "4.08gb"}),
        ("node_exporter listens on :9100", {"9100"}),
        ("ends with a number 5432.", {"5432"}),
    ],
)
def test_keyword_values(text, values):
    assert keywords(text).values == frozenset(values)


def test_stop_words_and_plurals():
    kw = keywords("The backups of the hosts are in the buckets; redis status is fine")
    assert kw.words == frozenset({"backup", "host", "bucket", "redis", "status", "fine"})
    assert keywords("db1.acme.internal").words == frozenset({"db1", "acme", "internal"})


def test_conflict_on_port():
    match = compare(PRIMARY, "The primary database listens on 10.8.0.4 port 5433")
    assert match is not None
    assert match.kind == "conflict"
    assert match.differing == ("5432", "5433")
    assert match.jaccard == 1.0
    assert {"primary", "database", "port", "10.8.0.4"} <= set(match.shared)


def test_paraphrase_is_a_duplicate():
    match = compare(PRIMARY, "Port 5432 on 10.8.0.4 is where the primary database listens")
    assert match == Match(
        "duplicate", 1.0, ("10.8.0.4", "5432", "database", "listen", "port", "primary"), ()
    )
    match = compare(
        "The primary database db1 listens on 10.8.0.4 port 5432 and takes all writes",
        "All writes go to the primary database db1, which listens on 10.8.0.4 port 5432",
    )
    assert match is not None and match.kind == "duplicate"
    assert 0.6 <= match.jaccard < 1.0


def test_unrelated_is_none():
    assert compare(PRIMARY, "Redis 7.2.5 runs on cache1 with maxmemory 4gb and policy allkeys-lru") is None
    assert compare(PRIMARY, "") is None
    assert compare("", "") is None


def test_min_shared():
    # Identical two-word texts: Jaccard 1.0 but only two shared keywords.
    assert compare("primary database", "primary database") is None
    assert compare("primary database", "primary database", min_shared=2) is not None
    # Values count toward min_shared.
    assert compare("primary database 5432", "primary database 5432").kind == "duplicate"
    assert compare(PRIMARY, PRIMARY, min_shared=7) is None
    assert compare(PRIMARY, PRIMARY, min_shared=6) is not None


def test_threshold_is_configurable():
    a = "nightly backup of acme_shop runs on db2 with pg_dump"
    b = "nightly backup of acme_shop runs on db2 and uploads each dump to restic"
    match = compare(a, b, threshold=0.55)
    assert match is not None and match.kind == "duplicate"
    assert match.jaccard == pytest.approx(5 / 9)
    assert compare(a, b) is None  # 5 of 9 words: below the default 0.60
    assert compare(a, b, threshold=0.56) is None
    with pytest.raises(InvalidValue):
        compare(a, b, threshold=1.5)
    with pytest.raises(InvalidValue):
        groups([("a", a)], min_shared=-1)


def test_version_conflict():
    match = compare("The primary runs PostgreSQL 16.4 on db1", "The primary runs PostgreSQL 16.5 on db1")
    assert match is not None
    assert (match.kind, match.differing) == ("conflict", ("16.4", "16.5"))
    match = compare("Production runs acme-shop v2.15.1 on web1-web3", "Production runs acme-shop v2.15.0 on web1-web3")
    assert (match.kind, match.differing) == ("conflict", ("2.15.0", "2.15.1"))


def test_date_and_time_conflicts():
    match = compare(
        "The wildcard certificate for acme.example expires 2027-02-13",
        "The wildcard certificate for acme.example expires 2026-12-14",
    )
    assert (match.kind, match.differing) == ("conflict", ("2026-12-14", "2027-02-13"))
    match = compare("nightly pg_dump of acme_shop runs on db2 at 03:15 UTC",
                    "nightly pg_dump of acme_shop runs on db2 at 3:15 UTC")
    assert match.kind == "duplicate"  # 3:15 and 03:15 are the same time
    match = compare("nightly pg_dump of acme_shop runs on db2 at 03:15 UTC",
                    "nightly pg_dump of acme_shop runs on db2 at 04:15 UTC")
    assert (match.kind, match.differing) == ("conflict", ("03:15", "04:15"))


def test_values_on_one_side_only_is_a_duplicate():
    match = compare("the primary database is db1 and takes all writes", "the primary database is db1 (10.8.0.4) and takes all writes")
    assert match is not None and match.kind == "duplicate"
    assert match.jaccard < 1.0  # the IP is in the union, not the intersection


# --- groups -------------------------------------------------------------------------------------------------

def test_groups_small():
    items = [
        ("db/primary", PRIMARY),
        ("db/primary-copy", "Port 5432 on 10.8.0.4 is where the primary database listens"),
        ("db/primary-wrong", "The primary database listens on 10.8.0.4 port 5433"),
        ("cache/redis", "Redis 7.2.5 runs on cache1 with maxmemory 4gb and policy allkeys-lru"),
    ]
    dup_groups, conflicts = groups(items)
    assert dup_groups == [["db/primary", "db/primary-copy"]]
    assert [(a, b) for a, b, _ in conflicts] == [
        ("db/primary", "db/primary-wrong"),
        ("db/primary-copy", "db/primary-wrong"),
    ]
    assert all(m.kind == "conflict" and m.differing == ("5432", "5433") for _, _, m in conflicts)


def test_groups_never_pairs_an_item_with_itself():
    dup_groups, conflicts = groups([("a", PRIMARY), ("a", PRIMARY)])
    assert (dup_groups, conflicts) == ([], [])
    assert groups([("a", PRIMARY)]) == ([], [])
    assert groups([]) == ([], [])


def test_groups_keep_conflicting_items_apart():
    # b has no values, so it duplicates both a and c, but a and c conflict: they must not share a group.
    items = [
        ("a", "the primary database db1 listens on port 5432"),
        ("b", "the primary database db1 listens on port"),
        ("c", "the primary database db1 listens on port 5433"),
    ]
    dup_groups, conflicts = groups(items)
    assert [(x, y) for x, y, _ in conflicts] == [("a", "c")]
    assert len(dup_groups) == 1 and "b" in dup_groups[0] and len(dup_groups[0]) == 2


def _synthetic(n: int, seed: int = 7):
    rng = random.Random(seed)
    syllables = ["ka", "lo", "mi", "ne", "ru", "sa", "ti", "vo", "ze", "pu", "da", "fe", "go", "hi", "ju"]
    vocab = sorted({"".join(rng.choice(syllables) for _ in range(3)) for _ in range(6000)})
    common = ["host", "port", "server", "runs", "uses", "backup"]  # in most items: skipped for candidates
    items: list[tuple[str, str]] = []
    for i in range(n):
        words = rng.sample(vocab, 10) + rng.sample(common, 3)
        items.append((f"fact-{i:05d}", " ".join(words) + f" port {rng.randrange(1024, 65535)}"))
    planted_groups, planted_conflicts = [], []
    for t in range(20):
        words = rng.sample(vocab, 10) + ["server"]
        base = " ".join(words) + " listens on 10.9.0.7 port 6000"
        shuffled = words[:]
        rng.shuffle(shuffled)
        para1 = " ".join(shuffled[:-1]) + " port 6000 on 10.9.0.7"  # one word dropped, reordered
        para2 = " ".join(words) + " listening ports 6000 10.9.0.7"
        ids = [f"dup-{t:02d}-{k}" for k in "abc"]
        items += list(zip(ids, (base, para1, para2)))
        planted_groups.append(ids)
    for t in range(20):
        words = rng.sample(vocab, 10)
        a, b = f"conf-{t:02d}-a", f"conf-{t:02d}-b"
        items.append((a, " ".join(words) + " version 16.4"))
        items.append((b, " ".join(words) + " version 16.5"))
        planted_conflicts.append((a, b))
    rng.shuffle(items)
    return items, planted_groups, planted_conflicts


def test_groups_scale_and_find_planted_pairs():
    items, planted_groups, planted_conflicts = _synthetic(2000)
    assert len(items) > 2000
    start = time.perf_counter()
    dup_groups, conflicts = groups(items)
    elapsed = time.perf_counter() - start
    assert elapsed < 2.0, f"groups() took {elapsed:.2f} s"
    assert sorted(dup_groups) == sorted(planted_groups)
    assert sorted((a, b) for a, b, _ in conflicts) == sorted(planted_conflicts)
    assert all(m.differing == ("16.4", "16.5") for _, _, m in conflicts)
    for group in dup_groups:
        assert len(group) == len(set(group))


def test_example_vault_facts_have_no_duplicates():
    # The shipped example vault is curated. web1/web2 are identical but for host and address: two hosts,
    # so neither a duplicate nor a conflict.
    root = Path(__file__).resolve().parents[1] / "vault" / "facts"
    items = [(str(p.relative_to(root)), p.read_text().split("---", 2)[-1]) for p in sorted(root.rglob("*.md"))]
    dup_groups, conflicts = groups(items)
    assert dup_groups == []
    assert conflicts == []


def test_texts_naming_different_hosts_are_neither_duplicates_nor_conflicts():
    a = "web1 serves the public site behind HAProxy on 10.8.0.11 with nginx 1.26."
    b = "web2 serves the public site behind HAProxy on 10.8.0.12 with nginx 1.26."
    assert compare(a, b) is None
    # the same host stated twice with different addresses still conflicts
    assert compare(a, a.replace("10.8.0.11", "10.8.0.13")).kind == "conflict"
