"""Columns of trace text to validated numpy arrays; a bad cell raises InputError naming its line.

Each function takes one column of a chunk (``values``), the file line of every
row (``lines``), the column name and the file, and parses the whole column with
one numpy call; only when that fails does it walk the rows to find the culprit.
"""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from dspark_sim.errors import InputError
from dspark_sim.limits import MAX_TOKENS

_NAT = np.iinfo(np.int64).min
_TZ_ANY = re.compile(r"(?:Z|[+-]\d\d:?\d\d)[ \t]*$", re.M)
_TZ = re.compile(r"(?:Z|([+-])(\d\d):?(\d\d))$")


def wallclock_ns(text: list[str], lines: list[int], name: str, path: Path) -> np.ndarray:
    """Wall-clock strings to int64 nanoseconds since the epoch (UTC offsets honoured)."""
    offsets_ns = None
    if _TZ_ANY.search("\n".join(text)):
        text, offsets_ns = _split_utc_offsets(text)
    try:
        ns = np.array(text, dtype="datetime64[ns]").view(np.int64)
    except ValueError:
        ns = None
    if ns is None or (ns == _NAT).any():
        _raise_first_bad(text, lines, name, path, _is_timestamp,
                         "not a timestamp like 2023-11-16 18:17:03.9799600")
    return ns if offsets_ns is None else ns - offsets_ns


def _split_utc_offsets(text: list[str]) -> tuple[list[str], np.ndarray]:
    """Strip "+hh:mm" / "Z" suffixes; return the naive strings and each offset in ns."""
    naive, offsets = [], []
    for s in text:
        s = s.strip()
        m = _TZ.search(s)
        if m is None:
            naive.append(s)
            offsets.append(0)
            continue
        naive.append(s[:m.start()])
        sign = -1 if m.group(1) == "-" else 1
        minutes = int(m.group(2)) * 60 + int(m.group(3)) if m.group(1) else 0
        offsets.append(sign * minutes * 60 * 10**9)
    return naive, np.array(offsets, dtype=np.int64)


def numbers(values: list, lines: list[int], name: str, path: Path) -> np.ndarray:
    """Finite float64 values, or InputError naming the first bad line."""
    try:
        out = np.array(values, dtype=np.float64)
    except (ValueError, TypeError):
        out = None
    if out is None or not np.isfinite(out).all():
        _raise_first_bad(values, lines, name, path, _is_finite, "not a finite number")
    return out


def counts(values: list, lines: list[int], name: str, path: Path, *, minimum: int) -> np.ndarray:
    """Whole token counts in [minimum, MAX_TOKENS] as int64, or InputError naming the first bad line
    (checked in float64, before the cast, so no count wraps around)."""
    x = numbers(values, lines, name, path)
    bad = (x != np.floor(x)) | (x < minimum) | (x > MAX_TOKENS)
    if bad.any():
        i = int(np.argmax(bad))
        why = "not a whole number" if x[i] != np.floor(x[i]) else f"token count must be in [{minimum}, {MAX_TOKENS}]"
        raise InputError(path, f"line {lines[i]}: {name}", values[i], why)
    return x.astype(np.int64)


def _raise_first_bad(values: list, lines: list[int], name: str, path: Path, ok, why: str) -> None:
    """Raise InputError for the first value ``ok`` rejects (the whole-column parse failed)."""
    for value, line in zip(values, lines):
        if not ok(value):
            raise InputError(path, f"line {line}: {name}", value, why)
    raise InputError(path, name, None, why)  # numpy rejected the column but no single cell


def _is_timestamp(text: str) -> bool:
    try:
        stamp = np.datetime64(text, "ns")
    except ValueError:
        return False
    return not np.isnat(stamp)


def _is_finite(value) -> bool:
    try:
        return bool(np.isfinite(np.array([value], dtype=np.float64)).all())
    except (ValueError, TypeError):
        return False
