"""Small numeric shapes shared by the cost tables, the profile and its fit.

Every function here works on Python floats (the engine's hot path) and on
numpy arrays (the fit), so one formula serves both. :data:`EXACT` evaluates the
same formulas on arrays with the numbers :data:`SCALAR` gives, bit for bit (the
simulator's vectorised pricing of many steps at once).
"""
from __future__ import annotations

import bisect
import math
import operator
from dataclasses import dataclass, replace
from itertools import repeat
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


def roof(fixed_s, per_unit_s, units, sharpness, power=operator.pow):
    """Smooth maximum of a fixed time and a time linear in ``units``: the roofline ridge.

    ``(fixed^k + (per_unit * units)^k)^(1/k)``: the fixed (memory) time while
    it dominates, the linear (compute) time past the ridge, and a knee whose
    sharpness k the fit chooses (k -> infinity is the hard ``max``).
    """
    return smax(fixed_s, per_unit_s * units, sharpness, power)


def smax(a, b, sharpness, power=operator.pow):
    """Smooth maximum ``(a^k + b^k)^(1/k)`` of two non-negative times (k = sharpness)."""
    return power(power(a, sharpness) + power(b, sharpness), 1.0 / sharpness)


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


def _numpy_pow_is_libm() -> bool:
    """numpy raises float64 arrays with the C library's ``pow`` unless it links SVML, which it
    does on AVX-512 (SKX) machines only."""
    try:
        from numpy._core._multiarray_umath import __cpu_features__
    except ImportError:  # numpy < 2
        try:
            from numpy.core._multiarray_umath import __cpu_features__
        except ImportError:
            return False
    return not __cpu_features__.get("AVX512_SKX", True)


_LIBM_POW = _numpy_pow_is_libm()


def power_exact(x, k):
    """``x ** k`` with the C library's ``pow`` for every element, as Python floats are raised
    (numpy's own SIMD ``pow`` on AVX-512 machines can differ in the last bit); floats pass
    straight through."""
    if not isinstance(x, np.ndarray):
        return x ** k
    if _LIBM_POW:
        return np.power(x, k)
    return np.fromiter(map(pow, x.ravel().tolist(), repeat(k)), np.float64, x.size).reshape(x.shape)


_KNOTS: dict[int, tuple[tuple, np.ndarray]] = {}


def _knots(values: tuple) -> np.ndarray:
    """``values`` (a profile's tuple of knots, or of rows) as a float64 array, made once per tuple."""
    hit = _KNOTS.get(id(values))
    if hit is None or hit[0] is not values:
        hit = _KNOTS[id(values)] = (values, np.asarray(values, dtype=np.float64))
    return hit[1]


def interp_exact(xs, ys, x):
    """:func:`interp_clamped` on an array ``x`` [N] -> [N] with the same operations in the same
    order, so every element is the scalar's number bit for bit (a float ``x`` goes to it)."""
    if not isinstance(x, np.ndarray):
        return interp_clamped(xs, ys, x)
    xs_a, ys_a = _knots(xs), _knots(ys)
    if xs_a.size == 1:
        return np.full(x.shape, ys_a[0])
    hi = np.minimum(np.maximum(np.searchsorted(xs_a, x, side="right"), 1), xs_a.size - 1)  # np.clip, without its overhead
    lo = hi - 1
    inner = ys_a[lo] + (x - xs_a[lo]) / (xs_a[hi] - xs_a[lo]) * (ys_a[hi] - ys_a[lo])
    return np.where(x <= xs_a[0], ys_a[0], np.where(x >= xs_a[-1], ys_a[-1], inner))


def _bracket_exact(xs: np.ndarray, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_bracket` on arrays: (i, frac), both [N]."""
    last = xs.size - 1
    inside = (x > xs[0]) & (x < xs[-1])
    i = np.where(inside, np.searchsorted(xs, x, side="right") - 1, np.where(x <= xs[0], 0, last))
    nxt = np.minimum(i + 1, last)
    frac = np.where(inside, (x - xs[i]) / np.where(inside, xs[nxt] - xs[i], 1.0), 0.0)
    return i, frac


def _lerp_exact(table: np.ndarray, i, j, frac):
    """:func:`_lerp` of rows ``table[i]`` at columns ``j`` on arrays."""
    nxt = np.minimum(j + 1, table.shape[1] - 1)
    at = table[i, j]
    return np.where(frac != 0, at + frac * (table[i, nxt] - at), at)


def interp2_exact(xs, ys, table, x, y):
    """:func:`interp2_clamped` on arrays (``x``, ``y`` [N] or floats) with the scalar's numbers."""
    if not isinstance(x, np.ndarray) and not isinstance(y, np.ndarray):
        return interp2_clamped(xs, ys, table, x, y)
    x, y = np.broadcast_arrays(np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64))
    t = _knots(table)
    i, fx = _bracket_exact(_knots(xs), x)
    j, fy = _bracket_exact(_knots(ys), y)
    a = _lerp_exact(t, i, j, fy)
    b = _lerp_exact(t, np.minimum(i + 1, t.shape[0] - 1), j, fy)
    return np.where(fx != 0, a + fx * (b - a), a)


@dataclass(frozen=True)
class Ops:
    """The numeric shapes for one kind of input: Python floats (the engine), arrays (the fit), or
    arrays priced exactly as the engine's floats (the simulator's stretches of steps)."""

    interp: Callable
    interp2: Callable
    pow2: Callable
    power: Callable = operator.pow


def pow2_scalar(x: float) -> int:
    """The smallest power of two >= x (1 for x <= 1)."""
    return 1 << max(math.ceil(x) - 1, 0).bit_length()


def pow2_array(x):
    """:func:`pow2_scalar` for arrays."""
    return 2.0 ** np.ceil(np.log2(np.maximum(np.ceil(x), 1.0)))


def pow2_exact(x):
    """:func:`pow2_scalar` on arrays, exactly: 2 ** bit_length(ceil(x) - 1) (a float goes to it)."""
    if not isinstance(x, np.ndarray):
        return pow2_scalar(x)
    below = np.maximum(np.ceil(x) - 1.0, 0.0)
    return np.ldexp(1.0, np.frexp(below)[1])


SCALAR = Ops(interp_clamped, interp2_clamped, pow2_scalar)
ARRAY = Ops(interp_array, interp2_array, pow2_array)
EXACT = Ops(interp_exact, interp2_exact, pow2_exact, power_exact)


@dataclass(slots=True)
class DecodeShape:
    """Factors of the decode attention that depend on the batch only (R requests, V verify
    tokens), not on the context: floats, or arrays of one per step; None where the profile
    has no such term."""

    splits: object
    stream: object = None  # 1 + kv_width_ratio(W)
    latency: object = None  # 1 + lat_width_ratio(W)
    table: object = None  # 1 + kv_ratio(R, W)


def spread_tail(ratio: float, slots: float, reqs, lag_s, shape: DecodeShape):
    """Seconds the longest request's attention programs run past the rest when contexts differ
    (``TargetFit``'s ``spread_ratio`` term; 0 when all are equal): ``lag_s``, one program's
    time over the longest request's keys less over the mean one's (before key splits and the
    tile), times ``ratio`` and the share of the ``reqs`` x splits programs per KV head past ``slots``."""
    lag = lag_s / shape.splits
    if shape.latency is not None:
        lag = lag * shape.latency
    queued = 1.0 - slots / (reqs * shape.splits)
    if isinstance(lag, np.ndarray) or isinstance(queued, np.ndarray):
        return ratio * np.maximum(queued, 0.0) * np.maximum(lag, 0.0)
    return ratio * max(queued, 0.0) * max(lag, 0.0)


SHAPES_HELD = 4096  # batch shapes (R, V or R, g pairs) a cost model keeps


def held(memo: dict, make, a, b, ops: Ops):
    """``make(a, b, ops)``, kept in ``memo`` by ``(a, b)`` where ``ops`` is the engine's scalar one
    (a run prices the same few batch shapes step after step)."""
    if ops is not SCALAR:
        return make(a, b, ops)
    value = memo.get((a, b))
    if value is None:
        if len(memo) >= SHAPES_HELD:
            memo.clear()
        value = memo[a, b] = make(a, b, ops)
    return value


def scaled_terms(obj, bounds: dict, ratio: dict):
    """``obj`` with every term multiplied by ``ratio[bound]`` (bound per ``bounds``)."""
    changes = {}
    for name, bound in bounds.items():
        value = getattr(obj, name)
        k = ratio.get(bound, 1.0)
        changes[name] = tuple(v * k for v in value) if isinstance(value, tuple) else value * k
    return replace(obj, **changes)
