"""What is kept of text that may hold a secret or a span its author marked private: one rule for every place that
stores such text outside the write gate (captured turns, the recall log's questions).

``<private>...</private>`` is dropped however it is spelled: any case, spaces or a line break inside the tag,
attributes (``<private reason="x">``), nested spans (the outermost pair counts), a stray close tag (everything
before it, since the last kept text, was meant to be private) and an unclosed opening tag (everything after it,
fail closed). Then the secret detector the write gate uses (:mod:`memvault.rules.secrets`) redacts what it finds,
and a line it would still refuse (a secret only its context reveals) goes whole.
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from .secrets import find_secrets, redact, scan_fields, secret_spans

PRIVATE_MARK = "[private: not stored]"
#: An opening or closing ``private`` tag: ``<private>``, ``< Private reason="x" >``, ``</private >``, a line break
#: anywhere in it; an opening tag whose ``>`` never comes runs to the end of the text.
_TAG = re.compile(r"<\s*(/\s*)?private\b([^>]*)(>|\Z)", re.IGNORECASE)
#: Where a private span is cut into the pieces looked for elsewhere: tags, lines and sentence ends.
_PIECES = re.compile(r"<[^>]*>|\n|[.;!?](?=\s|$)")
#: A private span's line shorter than this is not looked for elsewhere (a short word would be cut from every
#: answer that happens to use it).
ECHO_MIN = 8


def strip_private(text: str, mark: str = PRIVATE_MARK) -> tuple[str, list[str]]:
    """``text`` without its private spans (each replaced by ``mark``), and the spans' contents (what an echo of
    them elsewhere looks like: :func:`drop_echoes`)."""
    if "<" not in text:
        return text, []
    out: list[str] = []
    spans: list[str] = []
    depth, pos, start = 0, 0, 0
    for m in _TAG.finditer(text):
        if m.group(1) is None:  # an opening tag
            if depth == 0:
                out.append(text[pos:m.start()])
                start = m.end() if m.group(3) else m.start(2)  # a tag never closed: what follows is the span
            depth += 1
            continue
        if depth == 0:  # a close with no open: what came before it since the last kept text was private
            spans.append(text[pos:m.start()])
        else:
            depth -= 1
            if depth:
                continue
            spans.append(text[start:m.start()])
        out.append(mark)
        pos = m.end()
    if depth:
        spans.append(text[start:])
        out.append(mark)
    else:
        out.append(text[pos:])
    return "".join(out), [s for s in spans if s.strip()]


def drop_echoes(text: str, spans: Iterable[str], mark: str = PRIVATE_MARK) -> tuple[str, int]:
    """``text`` with every repetition of a private span (whole, or one of its lines or sentences of
    :data:`ECHO_MIN` characters or more) replaced by ``mark``: an assistant quoting what the person marked
    private. The number of repetitions dropped."""
    pieces: set[str] = set()
    for span in spans:
        pieces.add(span.strip())
        pieces.update(piece.strip() for piece in _PIECES.split(span))
    count = 0
    for piece in sorted((p for p in pieces if len(p) >= ECHO_MIN), key=len, reverse=True):
        if piece in text:
            count += text.count(piece)
            text = text.replace(piece, mark)
    return text, count


def scrub_lines(text: str) -> tuple[str, int]:
    """What the write gate would still refuse after redaction (a secret only its context reveals) goes with its
    whole line. The text and the number of lines dropped."""
    dropped = 0
    for _ in range(3):
        findings = scan_fields({"text": text})
        if not findings:
            return text, dropped
        lines = text.split("\n")
        for finding in findings:
            if 0 < finding.line <= len(lines):
                lines[finding.line - 1] = f"<redacted-line:{finding.kind.replace(' ', '-')}>"
                dropped += 1
        text = "\n".join(lines)
    return "<redacted-text>", dropped + 1


def clean(text: str) -> str:
    """``text`` as it may be stored outside the gate: private spans (and their echoes) dropped, secrets redacted,
    lines the detector still flags removed."""
    text, spans = strip_private(text)
    text, _ = drop_echoes(text, spans)
    text, _ = redact(text)
    return scrub_lines(text)[0]


def redact_args(args: Sequence[str]) -> list[str]:
    """``args`` (a command's arguments) as they may be recorded: each argument that looks like a secret, or that
    holds a secret its neighbours reveal, becomes ``<redacted: KIND>``. Arguments are read one by one *and* as one
    command line: ``--password hunter2hunter2`` is two arguments, neither a secret on its own."""
    recorded = list(args)
    starts, pos = [], 0
    for arg in recorded:
        starts.append(pos)
        pos += len(arg) + 1
    for start, end, finding in secret_spans(" ".join(recorded)):
        for i, arg_start in enumerate(starts):
            if arg_start < end and start < arg_start + len(recorded[i]) and not recorded[i].startswith("<redacted"):
                recorded[i] = f"<redacted: {finding.kind}>"
    for i, arg in enumerate(recorded):
        if not arg.startswith("<redacted") and (found := find_secrets(arg)):
            recorded[i] = f"<redacted: {found[0].kind}>"
    return recorded
