"""The subject of a question, read from the memories its words found, and the rest of the question without it.

When most of the best keyword matches hold a word of the question ("Caroline" in a conversation with her, "database"
in a team's database facts), that word is the question's **subject**: it tells none of those memories apart, yet it
pulls the question's vector toward all of them alike, and toward the ones that say it most. What tells them apart
is the **rest** of the question ("what did ... research", "how often do we snapshot ... and where are copies
stored"). Recall reads the cosine of each fact and conversation turn with the rest as well as with the whole
question (``[recall] rest_weight``, :mod:`memvault.core.candidates`).

Plain rules on words, no language model: a word is the subject when at least :data:`SHARE` of the
:data:`TOP` best keyword matches hold it (of the 20, however few the words found: a word only a few memories hold is
no subject), a word and its ``-s``/``-es``/``-ed``/``-ing`` forms counted as one, stop
words never. Both numbers were fixed before any weight was chosen (on LoCoMo facts' dev questions, by cosine alone:
0.3, 0.5 and 0.8 all gained, 0.3 most); the weight was chosen on folds of every dev set (docs/benchmarks.md).
"""
from __future__ import annotations

import re

#: How many of the best keyword matches are read for the subject.
TOP = 20
#: The share of them that must hold a word for it to be the subject.
SHARE = 0.3
#: The question's words as the index's tokenizer splits them (unicode letters and digits).
_WORD = re.compile(r"\w+", re.UNICODE)
_SUFFIXES = ("ing", "ed", "es", "s")


def stem(word: str) -> str:
    """``word`` (lower case) without one of ``-ing``, ``-ed``, ``-es``, ``-s`` when three letters stay: "alerts" and
    "alert", "answered" and "answer" are one word here."""
    for suffix in _SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)]
    return word


def subject(question: str, texts: list[str], stopwords: frozenset[str]) -> set[str]:
    """The words of ``question`` (lower case, not in ``stopwords``) held by at least :data:`SHARE` × :data:`TOP` of
    ``texts`` (the best keyword matches, best first; only the first :data:`TOP` are read)."""
    texts = texts[:TOP]
    if not texts:
        return set()
    held = [{stem(w) for w in _WORD.findall(text.lower())} for text in texts]
    words = {w for w in _WORD.findall(question.lower()) if w not in stopwords}
    need = SHARE * TOP  # of the best TOP, however many the words found: a word few memories hold is no subject
    return {w for w in words if sum(stem(w) in h for h in held) >= need}


def rest(question: str, texts: list[str], stopwords: frozenset[str]) -> str | None:
    """``question`` with its :func:`subject` taken out, its other words as written and in order; None when it has no
    subject, or nothing but stop words would be left."""
    words = subject(question, texts, stopwords)
    if not words:
        return None
    kept = [piece for piece in question.split() if not any(w in words for w in _WORD.findall(piece.lower()))]
    if not any(w not in stopwords for piece in kept for w in _WORD.findall(piece.lower())):
        return None
    return " ".join(kept)
