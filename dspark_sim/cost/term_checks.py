"""Checks of a profile's fitted terms on construction: each failure names the key and value."""
from __future__ import annotations

import math

from dspark_sim.errors import InputError


def fail(key: str, value: object, why: str):
    """Raise the :class:`InputError` of a bad value at ``key`` (the caller adds the file)."""
    raise InputError(None, key, value, why)


def check_knots(knots_key: str, knots: tuple, values_key: str, values: tuple) -> None:
    if len(knots) != len(values):
        fail(values_key, len(values), f"must have the length of {knots_key} ({len(knots)})")
    check_increasing(knots_key, knots)


def check_rows(knots_key: str, knots: tuple, rows_key: str, rows: tuple, count: int) -> None:
    """``count`` rows of numbers >= 0, each as long as the increasing ``knots``."""
    if len(rows) != count or any(not all(math.isfinite(v) and v >= 0 for v in row) for row in rows):
        fail(rows_key, [list(r) for r in rows], f"must hold {count} rows of numbers >= 0")
    for row in rows:
        check_knots(knots_key, knots, rows_key, row)


def check_increasing(key: str, values: tuple) -> None:
    if any(b <= a for a, b in zip(values, values[1:])):
        fail(key, list(values), "must be strictly increasing")


def check_terms(obj, names, shapes=("sharpness",)) -> None:
    for name in names:
        value = getattr(obj, name)
        if not (math.isfinite(value) and value >= 0):
            fail(name, value, "must be a finite number >= 0")
    for name in shapes:
        if not 1.0 <= getattr(obj, name) <= 64.0:
            fail(name, getattr(obj, name), "must lie in [1, 64]")


def check_pad(limits: tuple, steps: tuple) -> None:
    """Check graph token tiers: increasing limits, one more whole-number step than limits."""
    if steps and len(steps) != len(limits) + 1:
        fail("pad_steps", list(steps), f"must have one more entry than pad_limits ({len(limits)})")
    if not steps and limits:
        fail("pad_limits", list(limits), "needs pad_steps")
    if any(s < 1 or s != int(s) for s in steps):
        fail("pad_steps", list(steps), "steps must be whole numbers >= 1")
    check_increasing("pad_limits", limits)


def check_table(fit) -> None:
    """kv_ratio: one row per kv_r_knots, each a factor - 1 at every width_knots; or empty."""
    check_increasing("kv_r_knots", fit.kv_r_knots)
    if len(fit.kv_ratio) != len(fit.kv_r_knots):
        fail("kv_ratio", len(fit.kv_ratio), f"must have one row per kv_r_knots ({len(fit.kv_r_knots)})")
    for i, row in enumerate(fit.kv_ratio):
        if len(row) != len(fit.width_knots):
            fail(f"kv_ratio[{i}]", len(row), f"must have the length of width_knots ({len(fit.width_knots)})")
        if any(v <= -1 for v in row):
            fail(f"kv_ratio[{i}]", list(row), "ratios must be > -1 (a positive factor)")
