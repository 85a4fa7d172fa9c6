"""Secrets written in a form the shaped rules cannot read as it stands: an Azure shared access signature (its
``sig`` is short enough, and URL-encoded, so the generic rule sees only pieces of it) and a percent-encoded text
(``postgresql%3A%2F%2Fapp%3AS3cr3t%40db``), which is decoded and scanned again as base64 is. Stdlib only;
:mod:`memvault.rules.secrets` applies these and owns the findings."""
from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import unquote  # pathlib imports it already

from .secret_rules import _PLACEHOLDER, _compile

#: The kind of a SAS signature finding.
SAS_KIND = "Azure SAS token"

# A SAS token is a query string: sv (the signed version, a date) is in every kind of SAS (account, service, user
# delegation), sig is base64 of an HMAC-SHA256, URL-encoded (%2B, %2F, %3D). Either may come first.
_SIG = _compile(r"sig=")
_SAS_VERSION = _compile(r"(?<![^?&;=:\s\"'`<>()\[\]{}])sv=\d{4}-\d{2}-\d{2}(?![0-9])")
_SIG_VALUE = _compile(r"[^\s&\"'<>#;`]{1,200}(?![^\s&\"'<>#;`])")  # a signature is 44, ~60 encoded
_BASE64 = _compile(r"[A-Za-z0-9+/]+={0,2}")
_SIG_BEFORE = frozenset("?&;=:\"'` \t\r\n")
# Where a query string (or an encoded value) ends: whitespace, quotes, brackets.
_TOKEN_STOP = frozenset(" \t\r\n\"'`<>()[]{}")
_VALUE_STOP = _TOKEN_STOP | frozenset("?&=;,")
_REACH = 4096  # longest query string or encoded value looked at around one match

# An escape of ':', '/', '@', '=' or '&' (or of its escape, "%253A"): what makes encoded text worth decoding.
_ESCAPE = _compile(r"%(?:25)*(?:3a|2f|40|3d|26)")


def _bounds(text: str, pos: int, stop: frozenset[str]) -> tuple[int, int]:
    start = pos
    while start > 0 and pos - start < _REACH and text[start - 1] not in stop:
        start -= 1
    end = pos
    while end < len(text) and end - pos < _REACH and text[end] not in stop:
        end += 1
    return start, end


def sas_signatures(text: str) -> Iterator[tuple[int, int, str]]:
    """``(start, end, signature)`` of each ``sig=`` value of a query string that also carries ``sv=<date>``,
    unless the signature is a placeholder (``<signature>``, ``REDACTED``, ``...``) or not base64."""
    end, is_sas = -1, False  # the query string of the last match: many sig= in one are read once
    for m in _SIG.finditer(text):
        if m.start() > 0 and text[m.start() - 1] not in _SIG_BEFORE:
            continue  # "xsig=", "config=" ...
        value = _SIG_VALUE.match(text, m.end())
        if value is None:
            continue
        if m.start() >= end:
            start, end = _bounds(text, m.start(), _TOKEN_STOP)
            is_sas = bool(_SAS_VERSION.search(text, start, end))
        if not is_sas:
            continue  # a sig= that is no SAS (or a SAS without its signature: nothing to flag)
        signature = unquote(value.group())
        if len(signature) < 8 or _PLACEHOLDER.match(signature) or not _BASE64.fullmatch(signature):
            continue
        if signature.isalpha() and (signature.islower() or signature.isupper()):
            continue  # a word ("sig=signature"), not an HMAC
        yield value.start(), value.end(), value.group()


def url_encoded(text: str, lower: str) -> Iterator[tuple[int, int, str]]:
    """``(start, end, decoded)`` of each percent-encoded value (up to ``?&=;,``, whitespace, quotes, brackets)
    that escapes ``:``, ``/``, ``@``, ``=`` or ``&``: decoded up to three times (a URL inside a URL is encoded
    twice), for the caller to scan again."""
    cursor = 0
    for m in _ESCAPE.finditer(lower):
        if m.start() < cursor:
            continue
        start, end = _bounds(text, m.start(), _VALUE_STOP)
        cursor = end
        encoded = decoded = text[start:end]
        for _ in range(3):
            once = unquote(decoded)
            if once == decoded:
                break
            decoded = once
        if decoded != encoded:
            yield start, end, decoded
