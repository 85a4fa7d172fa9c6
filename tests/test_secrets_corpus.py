"""Recall and false-positive rate of the secret detector on a labelled corpus, and on the example vault.

The corpus is ``tests/data/secrets_corpus.jsonl``. Its secret half is stored as *templates*, never as literal
tokens, because GitHub push protection and other secret scanners would flag realistic fake credentials in the
repository: ``[[X:n]]`` becomes n characters drawn from alphabet X (seeded per entry, so every run sees the same
text), ``[[]]`` is dropped (it breaks literal prefixes such as ``gh[[]]p_``), and ``[[b64:...]]`` becomes the
base64 of its expanded content. Every secret is therefore synthetic: random characters in a real format.

Run ``.venv/bin/python -m pytest tests/test_secrets_corpus.py -q -s`` to print the figures quoted in
docs/secrets.md.
"""
from __future__ import annotations

import base64
import json
import random
import re
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

from memvault.rules.secrets import describe, find_secrets

CORPUS = Path(__file__).resolve().parent / "data" / "secrets_corpus.jsonl"
EXAMPLE_VAULT = Path(__file__).resolve().parents[1] / "vault"

# A regression suite (written with the rules): every secret found, no look-alike flagged.
MIN_RECALL = 1.0
MAX_FALSE_POSITIVE_RATE = 0.0

ALPHABETS = {
    "A": "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789",
    "a": "abcdefghijklmnopqrstuvwxyz0123456789",
    "U": "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789",
    "L": "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz",
    "h": "0123456789abcdef",
    "H": "0123456789ABCDEF",
    "d": "0123456789",
    "b": "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/",
    "u": "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-",
    "c": "./ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789",  # crypt(3)
}
_PLACEHOLDER = re.compile(r"\[\[(?:([A-Za-z]):(\d+)|b64:([^\[\]]*)|)\]\]")


@dataclass(frozen=True)
class Case:
    label: str  # "secret" or "benign"
    kind: str
    text: str
    template: str


def expand(template: str, seed: str) -> str:
    """The text a corpus template stands for; innermost placeholders first, so [[b64:...]] may hold others."""
    rng = random.Random(seed)

    def one(m: re.Match[str]) -> str:
        alphabet, size, b64 = m.groups()
        if alphabet:
            return "".join(rng.choice(ALPHABETS[alphabet]) for _ in range(int(size)))
        if b64 is not None:
            return base64.b64encode(b64.encode()).decode()
        return ""

    text = template
    while True:
        expanded = _PLACEHOLDER.sub(one, text)
        if expanded == text:
            return expanded
        text = expanded


def load_corpus() -> list[Case]:
    cases = []
    for number, line in enumerate(CORPUS.read_text().splitlines(), 1):
        record = json.loads(line)
        if "comment" in record:
            continue
        template = record.get("template", record.get("text", ""))
        cases.append(Case(record["label"], record.get("kind", "look-alike"),
                          expand(template, f"{number}:{template}"), template))
    return cases


def measure(cases: list[Case]) -> dict:
    secrets = [c for c in cases if c.label == "secret"]
    benign = [c for c in cases if c.label == "benign"]
    missed = [c for c in secrets if not find_secrets(c.text)]
    flagged = [(c, find_secrets(c.text)) for c in benign]
    flagged = [(c, f) for c, f in flagged if f]
    return {
        "secrets": len(secrets),
        "kinds": len({c.kind for c in secrets}),
        "benign": len(benign),
        "missed": missed,
        "false_positives": flagged,
        "recall": 1 - len(missed) / len(secrets),
        "fpr": len(flagged) / len(benign),
    }


def report(figures: dict) -> str:
    lines = [
        f"corpus: {figures['secrets']} secrets of {figures['kinds']} kinds, {figures['benign']} look-alikes",
        (f"recall {figures['recall']:.3f} ({figures['secrets'] - len(figures['missed'])}/{figures['secrets']}), "
         f"false-positive rate {figures['fpr']:.3f} ({len(figures['false_positives'])}/{figures['benign']})"),
    ]
    by_kind: dict[str, int] = defaultdict(int)
    for case in figures["missed"]:
        by_kind[case.kind] += 1
    for kind, count in sorted(by_kind.items()):
        # The template, not the expanded text: a report must not print even a synthetic credential.
        examples = "; ".join(c.template[:70] for c in figures["missed"] if c.kind == kind)
        lines.append(f"  missed {count} {kind}: {examples}")
    for case, findings in figures["false_positives"]:
        lines.append(f"  false positive: {case.text[:70]!r} -> {describe(findings)}")
    return "\n".join(lines)


def test_corpus_is_big_and_varied_enough():
    cases = load_corpus()
    secrets = [c for c in cases if c.label == "secret"]
    assert len(secrets) >= 80
    assert len({c.kind for c in secrets}) >= 30
    assert len([c for c in cases if c.label == "benign"]) >= 80
    assert {c.label for c in cases} == {"secret", "benign"}


def test_secret_templates_never_hold_a_literal_token():
    # Each secret must be built at test time: its random part is a placeholder, so the file holds no token.
    for case in load_corpus():
        if case.label == "secret" and case.text != "password: changeme":
            assert re.search(r"\[\[[A-Za-z]:\d+\]\]", case.template), case.template
            assert case.text != case.template


def test_templates_expand_deterministically():
    assert expand("x[[]]y", "s") == "xy"
    assert expand("[[h:8]]", "s") == expand("[[h:8]]", "s")
    assert re.fullmatch(r"[0-9a-f]{8}", expand("[[h:8]]", "s"))
    assert base64.b64decode(expand("[[b64:user:[[d:4]]]]", "s")).decode().startswith("user:")


def test_recall_and_false_positive_rate():
    figures = measure(load_corpus())
    text = report(figures)
    print("\n" + text)
    assert figures["recall"] >= MIN_RECALL, text
    assert figures["fpr"] <= MAX_FALSE_POSITIVE_RATE, text


def test_every_file_of_the_example_vault_is_clean():
    paths = [p for p in sorted(EXAMPLE_VAULT.rglob("*")) if p.is_file() and ".git" not in p.parts]
    assert len(paths) > 40
    flagged = {str(p.relative_to(EXAMPLE_VAULT)): describe(find_secrets(p.read_text())) for p in paths
               if find_secrets(p.read_text())}
    print(f"\nexample vault: {len(paths)} files, {len(flagged)} with findings")
    assert flagged == {}


def test_found_kinds_cover_the_corpus_kinds():
    # Not a threshold, a sanity check that the specific rules fire (not only the generic one): most labelled
    # shaped kinds are reported under a kind of the same name.
    cases = [c for c in load_corpus() if c.label == "secret"]
    reported = Counter(f.kind for c in cases for f in find_secrets(c.text))
    shaped = {c.kind for c in cases} & set(reported)
    assert len(shaped) >= 25, sorted(shaped)


def test_example_vault_fields_are_clean():
    # What the write gate and the hook pass to scan_fields: fact front matter and whole episode records.
    import yaml

    from memvault.rules.secrets import scan_fields

    records = []
    for path in sorted((EXAMPLE_VAULT / "facts").rglob("*.md")):
        text = path.read_text()
        if text.startswith("---"):
            records.append({"front matter": yaml.safe_load(text.split("---", 2)[1])})
    for path in sorted((EXAMPLE_VAULT / "episodes").glob("*.jsonl")):
        records += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    assert len(records) > 100
    flagged = [describe(scan_fields(r)) for r in records if scan_fields(r)]
    assert flagged == []


def test_generic_rule_sensitivity_on_random_tokens():
    # How often a bare random token (no name, no known prefix: only the generic rule can see it) is found, by
    # alphabet and length. Letters-only tokens are looked for only as an assigned value, so they get a name.
    rng = random.Random(7)
    rows = []
    for name, alphabet, context in (("base62", ALPHABETS["A"], "{}"), ("base64", ALPHABETS["b"], "{}"),
                                    ("base36", ALPHABETS["a"], "{}"), ("letters, assigned", ALPHABETS["L"],
                                                                      "SEED={}")):
        for size in (32, 40, 64):
            tokens = ["".join(rng.choice(alphabet) for _ in range(size)) for _ in range(500)]
            found = sum(bool(find_secrets("value " + context.format(t) + " end")) for t in tokens)
            rows.append((name, size, found / len(tokens)))
    print("\n" + "\n".join(f"  {name:18} {size:3} chars: {rate:.3f}" for name, size, rate in rows))
    assert all(rate >= 0.9 for _, size, rate in rows if size >= 40)


def test_speed_of_a_100_kb_text():
    import time

    sample = "\n".join(p.read_text() for p in sorted(EXAMPLE_VAULT.rglob("*")) if p.is_file() and ".git" not in p.parts)
    text = (sample * (100_000 // len(sample) + 1))[:100_000]
    times = []
    for _ in range(10):
        start = time.process_time()
        find_secrets(text)
        times.append(time.process_time() - start)
    print(f"\n100 KB of example-vault text: best {min(times) * 1000:.1f} ms, median "
          f"{sorted(times)[len(times) // 2] * 1000:.1f} ms CPU")
    assert min(times) < 0.25  # a guard against a quadratic regression, not the figure (docs/secrets.md)
