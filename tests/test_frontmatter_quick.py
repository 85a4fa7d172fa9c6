"""The line-by-line reading of plain front matter (``frontmatter_edit._plain_meta``) gives what the YAML loader gives.

It reads the ``key: value`` lines memvault writes without the loader, through YAML's own resolver and constructor
for each value, and hands anything else to the loader. So for every front matter it takes, the mapping must be the
loader's to the type (``yes`` is True, ``1:20`` is 80, ``0o17`` is text, ``2026-01-01`` a date), and whatever the
loader refuses it must not take.
"""
from __future__ import annotations

import random

import pytest

from memvault.rules import frontmatter_edit as fm
from memvault.rules.errors import FrontMatterError


def typed(value):
    """A value with the type of every part, so 1, 1.0 and True differ (and nan equals nan)."""
    if isinstance(value, dict):
        return ("dict", [(typed(k), typed(v)) for k, v in value.items()])
    if isinstance(value, list):
        return ("list", [typed(v) for v in value])
    return (type(value).__name__, repr(value))


def loader(lines):
    yaml, load, _ = fm._yaml()
    try:
        meta = yaml.load("\n".join(lines), Loader=load)
    except yaml.YAMLError:
        return "refused"
    except ValueError as exc:  # resolved but not built (0x_, 2026-02-30): the same error from both readings
        return ("error", type(exc).__name__)
    return meta if meta is not None else {}


def quick(lines):
    try:
        return fm._plain_meta(lines)
    except ValueError as exc:
        return ("error", type(exc).__name__)


GOTCHAS = [
    "yes", "no", "on", "Off", "TRUE", "null", "~", "Null", "1:20", "190:20:30", "0o17", "017", "0x1F", "1_000", "+1",
    "1e3", "1.0e+3", ".inf", "-.inf", ".NaN", ".", "...", "+", "2026-01-01", "2026-1-1", "2026-11-20T10:00:00Z",
    "2026-11-20 10:00:00", "2026-11-20T10:00:00.123456+02:00", "2026-11-20t10:00:00z", "user:alice",
    "agent:claude-code",
    "10.0.0.1:5432", "x:", "a: b", "a:b:c", "http://x/y", "(x)", "x.", "/etc", "0.5", "1", "0", "00", "0.", "1.", "-1",
    "3.14_15", "1,000", "x@y", "a b", "a  b", "[]", "[x, 1, yes, 0.5, 2026-01-01]", "[x,y]", "[a b]", "[x:y]",
    "[1:20]", "[(x)]", "[x, ]", "[, x]", "['x']", "[*x]", "&a x", "*a", "!!str 1", "'1'", '"1"', "|", ">", "- x",
    "x # comment", "x#y", "@x", "`x`", "%x", "?", "? x", "=", "<<", "1e", "0b101", "0b1_0", "1:2:3.5", "1:70",
    "caf\u00e9", "x\t", " x", "x ", "", "0b", "0x_", "._", "2026-02-30", "2026-13-01T10:00:00Z", "9" * 5000,
]


@pytest.mark.parametrize("value", GOTCHAS)
def test_each_value_reads_as_the_loader_reads_it(value):
    for lines in (["k: " + value], ["yes: " + value], ["k: " + value, "k: again"], ["category: x", "k: " + value]):
        got = quick(lines)
        if got is not None:
            assert typed(got) == typed(loader(lines)), lines


def test_random_front_matter_reads_as_the_loader_reads_it():
    rng = random.Random(20261207)
    keys = ["a", "k", "yes", "No", "on", "null", "true", "_x", "key_1", "Y", "n", "tags", "source", "1", "a-b"]
    pieces = ["0", "1", "9", "2026", "-", "+", ".", ":", "/", "(", ")", "@", "_", "e", "E", "x", "inf", "nan", "0x",
              "0o", "0b", "T", "Z", "z", "11-20", "10:00", " ", ",", "[", "]", ", ", "#", "'", '"', "*", "&", "!",
              "yes", "null", "~", ":00", "e+3"]
    plain = [p for p in pieces if not set(p) & set(",[]#'\"*&!~")]
    taken = 0
    for _ in range(20_000):
        lines = []
        for _ in range(rng.randint(1, 4)):
            some = pieces if rng.random() < 0.3 else plain  # mostly values the quick reading takes
            value = "".join(rng.choice(some) for _ in range(rng.randint(1, 6)))
            if rng.random() < 0.2:
                value = "[" + ", ".join(value.split(",")) + "]"
            lines.append(f"{rng.choice(keys)}: {value}")
        got = quick(lines)
        if got is not None:
            taken += 1
            assert typed(got) == typed(loader(lines)), lines
    assert taken > 1_500  # the quick reading was exercised, not passed by


def test_what_memvault_writes_is_read_without_the_loader_and_the_same(monkeypatch):
    text = ("---\ncategory: database\nimportance: 0.8\nconfidence: 1.0\nsource: user:alice\ntags: [postgres, backup]\n"
            "created: 2026-11-20T10:00:00Z\nupdated: 2026-11-21T09:30:00Z\nvalid_until: 2027-01-01\n---\nBody.\n")
    assert fm._plain_meta(fm.parse(text).fm_lines) is not None
    quick = fm.parse(text)
    monkeypatch.setattr(fm, "_plain_meta", lambda lines: None)
    slow = fm.parse(text)
    assert typed(quick.meta) == typed(slow.meta) and quick.key_lines == slow.key_lines and quick.body == slow.body


def test_front_matter_the_loader_refuses_is_refused_as_it_was(monkeypatch):
    texts = ["---\na: b\nc: [x\n---\nbody\n", "---\na: b\nb: *x\n---\nbody\n", "---\na: b\nb: c: d\n---\nbody\n",
             "---\na: 0b\nb: [\n---\nbody\n"]

    def refusals():
        out = []
        for text in texts:
            with pytest.raises(FrontMatterError) as caught:
                fm.parse(text)
            out.append((caught.value.reason, caught.value.line))
        return out

    quick = refusals()
    monkeypatch.setattr(fm, "_plain_meta", lambda lines: None)
    assert refusals() == quick
