"""Small numeric shapes shared by the cost tables, the profile and its fit.

Every function here works on Python floats (the engine's hot path) and on
numpy arrays (the fit), so one formula serves both.
"""
from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from typing import Callable

import numpy as np


def interp_clamped(xs, ys, x: float) -> float:
    """Linear interpolation of (xs, ys) at x, held flat outside [xs[0], xs[-1]] (SGLang's rule)."""
    if x <= xs[0]:
        return ys[0]
    if x >= xs[-1]:
        return ys[-1]
    hi = bisect.bisect_right(xs, x)
    lo = hi - 1
    return ys[lo] + (x - xs[lo]) / (xs[hi] - xs[lo]) * (ys[hi] - ys[lo])


def interp_array(xs, ys, x):
    """:func:`interp_clamped` for arrays: ``x`` [N] -> [N] (``np.interp`` clamps the same way)."""
    return np.interp(x, xs, ys)


def roof(fixed_s, per_unit_s, units, sharpness):
    """Smooth maximum of a fixed time and a time linear in ``units``: the roofline ridge.

    ``(fixed^k + (per_unit * units)^k)^(1/k)``: the fixed (memory) time while
    it dominates, the linear (compute) time past the ridge, and a knee whose
    sharpness k the fit chooses (k -> infinity is the hard ``max``).
    """
    return smax(fixed_s, per_unit_s * units, sharpness)


def smax(a, b, sharpness):
    """Smooth maximum ``(a^k + b^k)^(1/k)`` of two non-negative times (k = sharpness)."""
    return (a ** sharpness + b ** sharpness) ** (1.0 / sharpness)


def hat_matrix(knots, x) -> np.ndarray:
    """Weights of linear interpolation at ``x`` [N] on ``knots`` [K]: a [N, K] matrix.

    ``hat_matrix(knots, x) @ values == interp_array(knots, values, x)`` for any
    values, which lets a fit solve for knot values by linear least squares.
    """
    knots = np.asarray(knots, dtype=np.float64)
    x = np.clip(np.asarray(x, dtype=np.float64), knots[0], knots[-1])
    out = np.zeros((x.size, knots.size))
    if knots.size == 1:
        out[:, 0] = 1.0
        return out
    hi = np.clip(np.searchsorted(knots, x, side="right"), 1, knots.size - 1)
    lo = hi - 1
    frac = (x - knots[lo]) / (knots[hi] - knots[lo])
    rows = np.arange(x.size)
    out[rows, lo] = 1.0 - frac
    out[rows, hi] += frac
    return out


def pad_tokens(limits, steps, n):
    """Tokens a CUDA-graph step runs for ``n``: rounded up to the step of its tier.

    ``n <= limits[i]`` rounds up to a multiple of ``steps[i]`` (first such i);
    above the last limit, to a multiple of ``steps[-1]`` (so ``len(steps) ==
    len(limits) + 1``). No tiers: ``n`` itself. Float or array ``n``.
    """
    if not steps:
        return n
    if isinstance(n, np.ndarray):
        step = np.full(n.shape, float(steps[-1]))
        for limit, s in zip(reversed(limits), reversed(steps[:-1])):
            step = np.where(n <= limit, float(s), step)
        return np.ceil(n / step) * step
    for limit, s in zip(limits, steps):
        if n <= limit:
            return math.ceil(n / s) * s
    return math.ceil(n / steps[-1]) * steps[-1]


def interp2_clamped(xs, ys, table, x: float, y: float) -> float:
    """Bilinear interpolation of ``table[i][j]`` at (x, y) on knots xs, ys, held flat outside."""
    i, fx = _bracket(xs, x)
    j, fy = _bracket(ys, y)
    a = _lerp(table[i], j, fy)
    return a + fx * (_lerp(table[i + 1], j, fy) - a) if fx else a


def _bracket(xs, x: float) -> tuple[int, float]:
    """(i, frac): x lies ``frac`` of the way from xs[i] to xs[i+1] (frac 0 at or past the ends)."""
    if x <= xs[0]:
        return 0, 0.0
    if x >= xs[-1]:
        return len(xs) - 1, 0.0
    hi = bisect.bisect_right(xs, x)
    return hi - 1, (x - xs[hi - 1]) / (xs[hi] - xs[hi - 1])


def _lerp(row, j: int, frac: float) -> float:
    return row[j] + frac * (row[j + 1] - row[j]) if frac else row[j]


def interp2_array(xs, ys, table, x, y):
    """:func:`interp2_clamped` for arrays: ``x``, ``y`` [N] -> [N]."""
    return ((hat_matrix(xs, x) @ np.asarray(table, dtype=np.float64)) * hat_matrix(ys, y)).sum(1)


@dataclass(frozen=True)
class Ops:
    """The numeric shapes for one kind of input: Python floats (the engine) or arrays (the fit)."""

    interp: Callable
    interp2: Callable
    pow2: Callable


def pow2_scalar(x: float) -> int:
    """The smallest power of two >= x (1 for x <= 1)."""
    return 1 << max(math.ceil(x) - 1, 0).bit_length()


def pow2_array(x):
    """:func:`pow2_scalar` for arrays."""
    return 2.0 ** np.ceil(np.log2(np.maximum(np.ceil(x), 1.0)))


SCALAR = Ops(interp_clamped, interp2_clamped, pow2_scalar)
ARRAY = Ops(interp_array, interp2_array, pow2_array)
