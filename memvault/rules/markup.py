"""Escaping for the prompt format: no stored byte can form markup.

Recalled memories are handed to a model inside ``<memory>...</memory>``; a memory written by an untrusted source
must not be able to close that fence and speak outside it. Rather than a list of forbidden closing tags (which
``</MEMORY>``, ``</ memory >`` or an attribute quote walk around), every character that can start, end or quote
markup is replaced by an entity: ``&`` ``<`` ``>`` always, quotes and line breaks inside attributes, the
Unicode look-alikes of angle brackets (fullwidth, small, CJK, mathematical, ornaments, vertical forms, dotted and
circled less-than signs) that a model may read as brackets, and the invisible characters that can carry text a
person does not see (the TAG block, bidi controls). What remains in stored text cannot open a tag, so the only
tags in the block are memvault's own; the entities read back to exactly the stored text.
"""
from __future__ import annotations

import re

#: Characters a reader (a person or a model) may take for ``<`` or ``>``: every character Unicode names an angle
#: bracket, an angle quotation mark, a left or right arrowhead letter, or a plain, small, fullwidth, dotted,
#: circled, nested or "much" less-than or greater-than (tests/test_markup.py checks this list against the names).
ANGLE_LOOKALIKES = (
    "\u00ab\u00bb"  # double angle quotation marks
    "\u02c2\u02c3\u02f1\u02f2"  # modifier letter (low) left/right arrowhead
    "\u2039\u203a"  # single angle quotation marks
    "\u226a\u226b\u226e\u226f"  # much / not less-than, greater-than
    "\u22d6\u22d7\u22d8\u22d9"  # less-than / greater-than with dot, very much
    "\u2329\u232a"  # left/right-pointing angle brackets
    "\u276c\u276d\u276e\u276f\u2770\u2771"  # angle bracket and quotation ornaments
    "\u27e8\u27e9\u27ea\u27eb"  # mathematical angle brackets
    "\u2991\u2992\u2993\u2994\u2995\u2996"  # angle brackets with dot, arc less-than/greater-than brackets
    "\u29c0\u29c1"  # circled less-than / greater-than
    "\u29fc\u29fd"  # curved angle brackets
    "\u2a79\u2a7a\u2aa1\u2aa2\u2aa6\u2aa7\u2af7\u2af8"  # with circle inside, nested, closed by curve
    "\u2e16"  # dotted right-pointing angle
    "\u3008\u3009\u300a\u300b"  # CJK angle brackets
    "\ufe3d\ufe3e\ufe3f\ufe40"  # vertical presentation forms of angle brackets
    "\ufe64\ufe65"  # small < >
    "\uff1c\uff1e"  # fullwidth < >
    "\u1438\u1433"  # Canadian syllabics that look like < and >
)
#: Characters that are there without being seen, so text could speak to a model that a person reading the vault
#: never sees: the TAG block (U+E0000-U+E007F, an invisible copy of ASCII: "ASCII smuggling") and the bidi
#: embedding, override and isolate controls (they reorder what is shown). They become visible entities.
INVISIBLE = "\U000e0000-\U000e007f\u202a-\u202e\u2066-\u2069"
_TEXT = re.compile("[&<>" + ANGLE_LOOKALIKES + INVISIBLE + "]")
# Attributes also lose quotes, backticks, line breaks and other control characters.
_ATTR = re.compile("[&<>\"'`\x00-\x1f\x7f\u2028\u2029" + ANGLE_LOOKALIKES + INVISIBLE + "]")
_NAMED = {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}


def _entity(match: re.Match[str]) -> str:
    char = match.group(0)
    return _NAMED.get(char) or f"&#x{ord(char):X};"


def escape_text(text: str) -> str:
    """Stored text as element content: ``&``, ``<``, ``>`` and bracket look-alikes become entities."""
    return _TEXT.sub(_entity, text)


def escape_attr(value: object) -> str:
    """A value as a double-quoted attribute, quotes included: ``key="db/primary"``."""
    return '"' + _ATTR.sub(_entity, "" if value is None else str(value)) + '"'
