"""The two fitting stages every section of a profile goes through.

1. :func:`fit_terms`: positive coefficients (and shape numbers) by robust
   (soft-L1) nonlinear least squares on log step time, with weak priors
   around physical starting values, so terms the grid cannot separate fall
   back on physics.
2. :func:`ridge` / :func:`fit_knots`: knot corrections inside the grid, by
   ridge regression of the relative residual towards zero.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.optimize import least_squares

from dspark_sim.cost.shapes import hat_matrix

SHARPNESS_STARTS = (2.0, 5.0, 12.0)
SHARPNESS_BOUNDS = (1.0, 24.0)
PRIOR_WEIGHT = 0.01  # one prior sigma costs what one point off by 1 % costs
KNOT_RIDGE = 3.0     # shrinkage of knot corrections: a knot backed by one point moves little
ROBUST_SCALE = 0.05  # soft-L1 scale of log-residuals: points off by > 5 % count less


@dataclass(frozen=True)
class Param:
    """One fitted number: a positive coefficient (``shape=False``: fitted as ``start * e^u``,
    prior width ``sigma`` and bounds ``lo``/``hi`` on u) or a shape (``shape=True``: the value
    itself within [lo, hi], no prior)."""

    name: str
    start: float
    sigma: float = 1.0
    lo: float = -14.0
    hi: float = 8.0
    shape: bool = False


def sharpness_param(name: str, start: float = SHARPNESS_STARTS[1]) -> Param:
    """The knee k of a smooth maximum, fitted within ``SHARPNESS_BOUNDS``."""
    return Param(name, start, lo=SHARPNESS_BOUNDS[0], hi=SHARPNESS_BOUNDS[1], shape=True)


@dataclass
class Rows:
    """Measured rows of one section as arrays (the columns a formula needs)."""

    cols: dict
    step_s: np.ndarray
    section: np.ndarray

    def take(self, idx: np.ndarray) -> Rows:
        return Rows({k: v[idx] for k, v in self.cols.items()}, self.step_s[idx], self.section[idx])


def fit_terms(params: list[Param], build, rows: Rows, init: dict | None = None) -> dict:
    """Values minimising robust log error of ``build(values).predict(rows)``, plus priors.

    Started from ``init`` (values by name; the others at their start) when given, else
    from each of ``SHARPNESS_STARTS`` for the parameter named ``sharpness``, best kept.
    """
    shape = np.array([p.shape for p in params])
    start = np.array([p.start for p in params])
    sigma = np.array([p.sigma for p in params])
    lo, hi = np.array([p.lo for p in params]), np.array([p.hi for p in params])
    log_meas = np.log(rows.step_s)

    def values(u):
        return {p.name: float(x if p.shape else s * math.exp(x)) for p, s, x in zip(params, start, u)}

    def residuals(u):
        pred = build(values(u)).predict(rows)
        return np.concatenate([np.log(np.maximum(pred, 1e-12)) - log_meas,
                               PRIOR_WEIGHT * u[~shape] / sigma[~shape]])

    starts = []
    if init is not None:
        starts.append([init[p.name] if p.shape else math.log(init[p.name] / p.start)
                       if p.name in init else 0.0 for p in params])
    else:
        for k in SHARPNESS_STARTS:
            u0 = np.where(shape, start, 0.0)
            u0[[p.name == "sharpness" for p in params]] = k
            starts.append(u0)
    best = None
    for u0 in starts:
        u0 = np.clip(np.asarray(u0, dtype=np.float64), lo + 1e-9, hi - 1e-9)
        res = least_squares(residuals, u0, bounds=(lo, hi), loss="soft_l1", f_scale=ROBUST_SCALE,
                            x_scale=1.0, max_nfev=400)
        if best is None or res.cost < best.cost:
            best = res
    return values(best.x)


def ridge(rows: Rows, pred: np.ndarray, design: list[np.ndarray]) -> list[np.ndarray]:
    """Coefficients of each design block [N, K] so that ``pred + sum(block @ coef)`` fits the
    measured step, by ridge regression of the relative residual (towards zero)."""
    y = (rows.step_s - pred) / rows.step_s
    x = np.hstack([d / rows.step_s[:, None] for d in design])
    coef = np.linalg.solve(x.T @ x + KNOT_RIDGE * np.eye(x.shape[1]), x.T @ y)
    return np.split(coef, np.cumsum([d.shape[1] for d in design])[:-1])


def knots_of(component: np.ndarray, axis: np.ndarray) -> tuple[float, ...]:
    """Knots at the measured values of ``axis`` where ``component`` is non-zero."""
    pts = np.unique(axis[component != 0]) if np.any(component != 0) else np.unique(axis)
    return tuple(float(v) for v in pts)


def fit_knots(rows: Rows, pred: np.ndarray, blocks) -> list[tuple[tuple, np.ndarray]]:
    """Ridge-fit knot values so that ``pred + sum(component * interp(knots, values, axis))`` fits.

    ``blocks``: (component [N], axis [N]) per correction; returns (knots, values) per block.
    """
    knots = [knots_of(component, axis) for component, axis in blocks]
    design = [hat_matrix(k, axis) * component[:, None] for k, (component, axis) in zip(knots, blocks)]
    return list(zip(knots, ridge(rows, pred, design)))
