"""Escaping for the prompt format: no stored byte can form markup.

Recalled memories are handed to a model inside ``<memory>...</memory>``; a memory written by an untrusted source
must not be able to close that fence and speak outside it. Rather than a list of forbidden closing tags (which
``</MEMORY>``, ``</ memory >`` or an attribute quote walk around), every character that can start, end or quote
markup is replaced by an entity: ``&`` ``<`` ``>`` always, quotes and line breaks inside attributes, and the
Unicode look-alikes of angle brackets (fullwidth, small, CJK, mathematical) that a model may read as brackets.
What remains in stored text cannot open a tag, so the only tags in the block are memvault's own.
"""
from __future__ import annotations

import re

#: Characters a reader (a person or a model) may take for ``<`` or ``>``.
ANGLE_LOOKALIKES = (
    "\uff1c\uff1e"  # fullwidth < >
    "\ufe64\ufe65"  # small < >
    "\u2039\u203a"  # single angle quotation marks
    "\u2329\u232a"  # left/right-pointing angle brackets
    "\u3008\u3009\u300a\u300b"  # CJK angle brackets
    "\u27e8\u27e9\u27ea\u27eb"  # mathematical angle brackets
    "\u29fc\u29fd"  # curved angle brackets
    "\u02c2\u02c3"  # modifier letter left/right arrowhead
    "\u1438\u1433"  # Canadian syllabics that look like < and >
    "\u276e\u276f\u2770\u2771"  # heavy angle quotation ornaments
)
_TEXT = re.compile("[&<>" + ANGLE_LOOKALIKES + "]")
# Attributes also lose quotes, backticks, line breaks and other control characters.
_ATTR = re.compile("[&<>\"'`\x00-\x1f\x7f\u2028\u2029" + ANGLE_LOOKALIKES + "]")
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
