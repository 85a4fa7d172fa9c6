"""The secret detector's patterns are compiled on first use, and one whose every match starts with a literal is not
used on a text without it: a one-shot process that logs a recall no longer compiles ~190 patterns (docs/benchmarks.md,
issue 24). The literal must be a true prefix of every match, or a secret would pass unseen: checked here against
the regex parser's own reading of each pattern."""
from __future__ import annotations

import re
import subprocess
import sys

import pytest

from memvault.rules import secret_rules
from memvault.rules.secret_rules import _Lazy, _leading_literal
from conftest import REPO_ROOT

_parser = pytest.importorskip("re._parser")
_constants = pytest.importorskip("re._constants")


def _required_prefix(pattern: str, flags: int = 0) -> str:
    """The literal characters the parser says every match begins with (through leading capturing groups)."""
    items = list(_parser.parse(pattern, flags))
    out = []
    while items:
        op, arg = items.pop(0)
        if op is _constants.LITERAL:
            out.append(chr(arg))
        elif op is _constants.SUBPATTERN and arg[0] is not None and not arg[1] and not arg[2]:
            items = list(arg[3]) + items  # a capturing group: its body comes first
        elif op in (_constants.ASSERT, _constants.ASSERT_NOT) and arg[0] == -1:
            continue  # a lookbehind takes no text of the match
        else:
            break
    return "".join(out)


def _all_lazy() -> list[_Lazy]:
    found = []
    for value in vars(secret_rules).values():
        for item in value if isinstance(value, tuple) else (value,):
            if isinstance(item, _Lazy):
                found.append(item)
            elif isinstance(item, secret_rules._Rule):
                found.append(item.pattern)
            elif isinstance(item, secret_rules._Block):
                found += [p for p in (item.header, item.footer, item.tail) if p is not None]
    return found


def test_every_literal_is_a_prefix_every_match_must_start_with():
    patterns = _all_lazy()
    assert len(patterns) > 100
    with_literal = [p for p in patterns if p.literal]
    assert len(with_literal) > 80  # the prefilter covers most rules, or it buys nothing
    for p in with_literal:
        assert _required_prefix(p.pattern, p.flags).startswith(p.literal), p.pattern


@pytest.mark.parametrize("pattern, literal", [
    ("abc", "abc"),
    ("ab*c", "a"),  # the b may be absent
    ("ab{0,2}", "a"),
    ("(abc)?def", ""),  # the whole group may be absent
    ("(abc|xyz)def", ""),
    ("abc|xyz", ""),
    ("(abc)(x|y)", "abc"),  # an alternation in a later group does not bypass the start
    ("(?P<w>key)(?:=|:)", "key"),
    ("(?:abc)", ""),
    ("(?<![a-z])abc", ""),
    ("(?<!-)---+x", "--"),  # not inside a run of dashes: the run's start is still the match's
    (r"redis\-cli\b", "redis-cli"),
    (r"\.apps\.x", ".apps.x"),
    (r"a\d", "a"),
    ("[ab]c", ""),
    ("^abc", ""),
    ("(?m)abc", ""),
    (r"a[|]b|c", ""),
    (r"ab[|]c", "ab"),
])
def test_the_leading_literal(pattern, literal):
    assert _leading_literal(pattern) == literal
    if literal:
        assert _required_prefix(pattern).startswith(literal)


def test_a_pattern_answers_as_the_compiled_one_with_or_without_its_literal():
    lazy = _Lazy(r"(ghp_[A-Za-z0-9]{8})")
    compiled = re.compile(lazy.pattern)
    for text in ("nothing here", "ghp_abcdefgh and ghp_12345678", "xghp_abcdefgh", ""):
        assert [m.span() for m in lazy.finditer(text)] == [m.span() for m in compiled.finditer(text)]
        assert bool(lazy.search(text)) == bool(compiled.search(text))
        assert lazy.sub("*", text) == compiled.sub("*", text)
        assert lazy.split(text) == compiled.split(text)
        assert lazy.findall(text) == compiled.findall(text)
    assert lazy._compiled is not None


def test_logging_a_recall_compiles_few_patterns():
    """What a cold ``recall`` pays: importing the detector and cleaning an ordinary question compiles a handful of
    patterns, not all of them."""
    code = ("from memvault.rules import redaction, secret_rules as s\n"
            "redaction.clean('how do I rotate the database password')\n"
            "import gc\n"
            "lazy = [o for o in gc.get_objects() if isinstance(o, s._Lazy)]\n"
            "print(sum(o._compiled is not None for o in lazy), len(lazy))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO_ROOT)
    compiled, total = map(int, out.stdout.split())
    assert total > 100 and compiled <= 10, (compiled, total)
