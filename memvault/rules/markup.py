"""Escaping for the prompt format: no stored byte can form markup.

Recalled memories are handed to a model inside ``<memory>...</memory>``; a memory written by an untrusted source
must not be able to close that fence and speak outside it. Rather than a list of forbidden closing tags (which
``</MEMORY>``, ``</ memory >`` or an attribute quote walk around), every character that can start, end or quote
markup is replaced by an entity: ``&`` ``<`` ``>`` always, quotes and line breaks inside attributes, and two
*classes* of characters, decided from the Unicode database rather than from a list (a list is always one
character short):

- **look-alikes** of angle brackets, which a model may read as brackets: every character whose Unicode name says
  angle, less-than, greater-than, precedes, succeeds, smaller/larger than, chevron, normal subgroup (``⊲ ⊳``)
  or binding bracket, or a left/right-pointing
  arrowhead, pointer or triangle (``〈 ⟨ ＜ ﹤ ‹ « ≺ ⊰ ⪪ ◁ ▷ ❮ ˂``...), and the Canadian syllabics that are a
  triangle pointing left or right (``ᐊ ᐅ ᐸ ᐳ`` and their long, W and dialect forms);
- **invisible** characters, which carry text a person reading the vault does not see: every format character
  (category Cf: zero-width space and joiners, word joiner, BOM, bidi controls, the TAG block's invisible copy of
  ASCII), unassigned code points (a newer Unicode may make them either), control characters other than tab and
  line breaks, variation selectors (which can encode bytes behind one visible character) and the Hangul fillers
  and other default-ignorable letters.

What remains in stored text cannot open a tag, so the only tags in the block are memvault's own; the entities read
back to exactly the stored text (``html.unescape``). The same two functions escape everything memvault puts in an
agent's context from outside its own words: file names, branch and project names, keys, sources and notices.
"""
from __future__ import annotations

import re
import unicodedata
from functools import lru_cache

#: Some of the look-alikes, for callers that want a quick character class (the web view's "does this text try to
#: speak markup" check). Escaping does not use this list: :func:`markup_like` decides by class, from the names.
ANGLE_LOOKALIKES = (
    "\u00ab\u00bb"  # double angle quotation marks
    "\u02c2\u02c3\u02f1\u02f2"  # modifier letter (low) left/right arrowhead
    "\u2039\u203a"  # single angle quotation marks
    "\u226a\u226b\u226e\u226f"  # much / not less-than, greater-than
    "\u227a\u227b\u22b0\u22b1"  # precedes / succeeds (under relation)
    "\u22d6\u22d7\u22d8\u22d9"  # less-than / greater-than with dot, very much
    "\u2329\u232a"  # left/right-pointing angle brackets
    "\u25c1\u25b7"  # white left/right-pointing triangles
    "\u276c\u276d\u276e\u276f\u2770\u2771"  # angle bracket and quotation ornaments
    "\u27e8\u27e9\u27ea\u27eb"  # mathematical angle brackets
    "\u2991\u2992\u2993\u2994\u2995\u2996"  # angle brackets with dot, arc less-than/greater-than brackets
    "\u29c0\u29c1"  # circled less-than / greater-than
    "\u29fc\u29fd"  # curved angle brackets
    "\u2a79\u2a7a\u2aa1\u2aa2\u2aa6\u2aa7\u2aaa\u2aab\u2af7\u2af8"  # circle inside, nested, closed by curve, smaller
    "\u2e16"  # dotted right-pointing angle
    "\u3008\u3009\u300a\u300b"  # CJK angle brackets
    "\ufe3d\ufe3e\ufe3f\ufe40"  # vertical presentation forms of angle brackets
    "\ufe64\ufe65"  # small < >
    "\uff1c\uff1e"  # fullwidth < >
    "\u1438\u1433\u140a\u1405"  # Canadian syllabics that look like < and >
)
#: Names of bracket look-alikes: words (not parts of words: TRIANGLE is not ANGLE) that say "this points left or
#: right like < or >".
_LOOKALIKE_NAME = re.compile(
    r"\b(?:ANGLE|LESS-THAN|GREATER-THAN|PRECEDES|SUCCEEDS|SMALLER THAN|LARGER THAN|CHEVRON|NORMAL SUBGROUP"
    r"|BINDING BRACKET)\b"
    r"|\b(?:LEFT|RIGHT)(?:WARDS)?[- ].*\b(?:POINTING|ARROWHEAD|TRIANGLE)\b|\b(?:LEFT|RIGHT)[- ]POINTING\b"
    r"|\bTRIANGLE\b.*\b(?:LEFT|RIGHT)\b")
#: The syllabics that are a triangle pointing left (A series) or right (O series): vowels, P, W and their forms.
_SYLLABIC_LOOKALIKE = re.compile(r"^CANADIAN SYLLABICS (?:(?:Y-CREE|WEST-CREE|NASKAPI) )?P?W?(?:O|OO|A|AA)$")
#: Default-ignorable characters that are not format characters (Unicode's Default_Ignorable_Code_Point, by name).
_IGNORABLE_NAME = re.compile(r"VARIATION SELECTOR|\bFILLER\b|GRAPHEME JOINER|\bINHERENT\b")
#: Characters escaped wherever they are; any other non-ASCII run goes through :func:`markup_like`.
_TEXT = re.compile("[&<>\x00-\x08\x0b\x0c\x0e-\x1f\x7f]|[^\x00-\x7f]+")
# Attributes also lose quotes, backticks, every control character and the Unicode line separators.
_ATTR = re.compile("[&<>\"'`\x00-\x1f\x7f]|[^\x00-\x7f]+")
_NAMED = {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}
_ATTR_ALSO = frozenset("\u2028\u2029\x85")


@lru_cache(maxsize=8192)
def markup_like(char: str) -> bool:
    """Whether a (non-ASCII) character is escaped: a bracket look-alike or an invisible character (see the
    module's description of both classes)."""
    category = unicodedata.category(char)
    if category in ("Cf", "Cn", "Cc", "Cs"):
        return True
    if 0xE0000 <= ord(char) <= 0xE0FFF:  # the TAG block and the variation selectors supplement, assigned or not
        return True
    name = unicodedata.name(char, "")
    return bool(_LOOKALIKE_NAME.search(name) or _IGNORABLE_NAME.search(name) or _SYLLABIC_LOOKALIKE.match(name))


def _entity(char: str) -> str:
    return _NAMED.get(char) or f"&#x{ord(char):X};"


def _text_sub(match: re.Match[str]) -> str:
    run = match.group(0)
    if run[0] < "\x80":
        return _entity(run)
    return "".join(_entity(ch) if markup_like(ch) else ch for ch in run)


def _attr_sub(match: re.Match[str]) -> str:
    run = match.group(0)
    if run[0] < "\x80":
        return _entity(run)
    return "".join(_entity(ch) if ch in _ATTR_ALSO or markup_like(ch) else ch for ch in run)


def escape_text(text: str) -> str:
    """Text as element content: ``&``, ``<``, ``>``, bracket look-alikes and invisible characters become
    entities (tabs and line breaks stay)."""
    return _TEXT.sub(_text_sub, text)


def escape_attr(value: object) -> str:
    """A value as a double-quoted attribute, quotes included: ``key="db/primary"``."""
    return '"' + _ATTR.sub(_attr_sub, "" if value is None else str(value)) + '"'


def one_line(value: object) -> str:
    """A field shown inside a line of text output (a source, a kind, an id), kept to that line: line feeds, tabs and
    Unicode line and paragraph separators written as ``\\u000a``, the rest as :func:`printable` leaves it. memvault
    writes none of them there, but a month file or front matter edited by hand can, and one stored line printed a
    second, forged one (``2. episode ... (source user:admin)``)."""
    return _BREAK.sub(lambda m: f"\\u{ord(m.group()):04x}", "" if value is None else str(value))


#: What :func:`printable` lets through that still starts a new line or column where a field should stay on its own.
_BREAK = re.compile("[\t\n\u2028\u2029]")


#: Characters a terminal acts on instead of showing: C0 controls but tab and line feed, DEL, C1 (0x80-0x9f: an
#: 8-bit CSI among them), and the bidirectional overrides that reorder what is shown.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def printable(text: str) -> str:
    """``text`` as a terminal should show it: every control character written as ``\\u001b``, so a memory's text or
    a pulled file's name cannot clear the screen, set the window title or forge a line (the escape is also valid
    inside a JSON string). The CLI prints everything through it; recall's budget counts what it prints."""
    return _CONTROL.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def printable_line(text: str) -> str:
    """:func:`printable` for a message that is one line (a warning, a log line, a hook's problem): the line breaks
    :func:`one_line` writes out (a line feed, a tab, the Unicode line and paragraph separators in a pulled file's
    name) are written as ``\\u000a`` too, so it cannot start a line memvault never wrote."""
    return printable(one_line(text))
