"""What a memvault.toml value may be: the converters that check a value and give its Python form, and
:func:`setting`, which declares a field of a section with its default, help and converter (:mod:`.config`)."""
from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import field
from typing import Any

from .errors import InvalidValue

_AGE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(s|m|h|d|w|y)\s*", re.IGNORECASE)
_AGE_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400, "y": 365 * 86400}
_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(b|kb|kib|mb|mib|gb|gib)?\s*", re.IGNORECASE)
_SIZE_UNITS = {"b": 1, "kb": 1000, "kib": 1024, "mb": 10**6, "mib": 1 << 20, "gb": 10**9, "gib": 1 << 30}


def age_seconds(text: str) -> float | None:
    """``30d``, ``12h``, ``2w``, ``90m``, ``45s``, ``1y`` in seconds; None when ``text`` is not an age."""
    m = _AGE.fullmatch(text) if isinstance(text, str) else None
    if not m:
        return None
    seconds = float(m.group(1)) * _AGE_UNITS[m.group(2).lower()]
    return seconds if math.isfinite(seconds) else None


# ------------------------------------------------------------------------------------------------ converters
Convert = Callable[[Any, str], Any]


def _invalid(reason: str) -> InvalidValue:
    """A value of the wrong type or range; the loader turns it into a ConfigError naming the file and the key."""
    return InvalidValue("setting", reason)


def _bool(value: Any, _: str) -> bool:
    if not isinstance(value, bool):
        raise _invalid(f"must be true or false, not {value!r}")
    return value


def _int(lo: int | None = None, hi: int | None = None) -> Convert:
    def convert(value: Any, _: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise _invalid(f"must be a whole number, not {value!r}")
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            raise _invalid(f"must be between {lo} and {hi}, not {value}" if hi is not None else f"must be at least {lo}, not {value}")
        return value
    return convert


def _float(lo: float = 0.0, hi: float | None = None, *, open_hi: bool = False) -> Convert:
    def convert(value: Any, _: str) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise _invalid(f"must be a number, not {value!r}")
        if value < lo or (hi is not None and (value >= hi if open_hi else value > hi)):
            bound = f"below {hi}" if open_hi else f"at most {hi}"
            raise _invalid(f"must be at least {lo}" + (f" and {bound}" if hi is not None else "") + f", not {value}")
        return float(value)
    return convert


def _opt_float(lo: float = 0.0, hi: float | None = None) -> Convert:
    inner = _float(lo, hi)

    def convert(value: Any, name: str) -> float | None:
        return None if value is None else inner(value, name)
    return convert


def _any_str(value: Any, _: str) -> str:
    if not isinstance(value, str):
        raise _invalid(f"must be a string, not {value!r}")
    return value.strip()


def _str(value: Any, _: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise _invalid(f"must be a non-empty string, not {value!r}")
    return value


def _name(convert: Convert) -> Convert:
    """``convert``, refusing a control character: a model's name goes into a Hugging Face URL (a newline raised
    InvalidURL out of recall) or a path."""
    def checked(value: Any, name: str) -> Any:
        out = convert(value, name)
        if isinstance(out, str) and any(ord(c) < 32 or ord(c) == 127 for c in out):
            raise _invalid(f"holds a control character: {out[:80]!r}")
        return out
    return checked


def _opt_str(value: Any, name: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise _invalid(f"must be a string, not {value!r}")
    return value


def _choice(*choices: str) -> Convert:
    def convert(value: Any, _: str) -> str:
        if value not in choices:
            raise _invalid(f"must be one of {', '.join(choices)}, not {value!r}")
        return value
    return convert


def _age(value: Any, _: str) -> float:
    seconds = age_seconds(value) if isinstance(value, str) else None
    if seconds is None or seconds <= 0:
        raise _invalid(f"must be an age like 30d, 12h or 90m, not {value!r}")
    return seconds


def _age0(value: Any, name: str) -> float:
    """An age that may be zero (``0s``: every time)."""
    seconds = age_seconds(value) if isinstance(value, str) else None
    if seconds is None:
        raise _invalid(f"must be an age like 30s or 5m (0s: every time), not {value!r}")
    return seconds


def _age_upto(hi: str, *, zero: bool = False) -> Convert:
    """An age of at most ``hi`` (``"1d"``): a timeout or an interval a pushed memvault.toml sets for every host,
    where ``9999999999y`` kept a warm process alive for good or overflowed a timer (OverflowError)."""
    inner = _age0 if zero else _age
    limit = age_seconds(hi)

    def convert(value: Any, name: str) -> float:
        seconds = inner(value, name)
        if limit is not None and seconds > limit:
            raise _invalid(f"must be at most {hi}, not {value!r}")
        return seconds
    return convert


#: The largest size a [limits] or [capture] setting may give: the limits bound what one write costs to embed, so a
#: pushed ``fact_bytes = 99999999999999999999`` must not turn them off.
SIZE_MAX = 16 << 20


def _size_upto(hi: int = SIZE_MAX) -> Convert:
    def convert(value: Any, _: str) -> int:
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            size = value
        else:
            m = _SIZE.fullmatch(value) if isinstance(value, str) else None
            number = float(m.group(1)) * _SIZE_UNITS[(m.group(2) or "b").lower()] if m else math.nan
            if not math.isfinite(number) or number <= 0:  # "9" * 400 + "GiB" is inf: int() raised OverflowError
                raise _invalid(f"must be a size like 64KiB or 2MiB (or a number of bytes), not {value!r}")
            size = int(number)
            if size < 1:  # "0.5" was 0 bytes: every fact refused, every stored one left unread
                raise _invalid(f"must be at least 1 byte, not {value!r}")
        if size > hi:
            raise _invalid(f"must be at most {hi >> 20}MiB, not {value!r}")
        return size
    return convert


_size = _size_upto()


#: The most source patterns a list may hold: each is tried against a source for every memory a recall ranks (50,000
#: pushed ones made a recall take 2 minutes).
PATTERNS_MAX = 1000


def _patterns(value: Any, _: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise _invalid('must be a list of source patterns like ["user:*", "agent:deployer"]')
    if any(ord(c) < 32 or ord(c) == 127 for v in value for c in v):  # printed by `memvault scopes`, one a line
        raise _invalid("holds a control character: source patterns are like \"user:*\"")
    if len(value) > PATTERNS_MAX:
        raise _invalid(f"lists {len(value)} source patterns, at most {PATTERNS_MAX}")
    return tuple(value)


#: The largest weight in a weight table (they are relative: the defaults are at most 3).
WEIGHT_MAX = 100.0


def _weight_table(defaults: dict[str, float], noun: str, example: str) -> Convert:
    """A table of non-negative weights over the names of ``defaults`` (those not given keep their default)."""
    def convert(value: Any, _: str) -> dict[str, float]:
        if not isinstance(value, dict):
            raise _invalid(f"must be a table like {example}")
        out = dict(defaults)
        for name, weight in value.items():
            if name not in defaults:
                raise _invalid(f"unknown {noun} {name!r} (known: {', '.join(defaults)})")
            # Weights are relative: 1e308 each summed to inf (and made BM25 scores NULL: recall crashed).
            if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not math.isfinite(weight) \
                    or not 0 <= weight <= WEIGHT_MAX:
                raise _invalid(f"{name} must be a number >= 0 and at most {WEIGHT_MAX:g}, not {weight!r}")
            out[name] = float(weight)
        if sum(out.values()) <= 0:
            raise _invalid("must not all be zero")
        return out

    return convert


def setting(default: Any, help: str, convert: Convert, *, shown: str | None = None,
            template: bool = True) -> Any:
    """A field of a section: ``default`` is in file form (``"30d"``), ``convert`` validates and converts.
    ``template=False`` leaves it out of the generated memvault.toml (still documented in the README)."""
    value = convert(default, "") if default is not None else None
    if isinstance(value, (dict, list)):
        return field(default_factory=lambda: convert(default, ""),
                     metadata={"help": help, "convert": convert, "file": default, "shown": shown, "template": template})
    return field(default=value, metadata={"help": help, "convert": convert, "file": default, "shown": shown,
                                          "template": template})
