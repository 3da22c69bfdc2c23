"""Held-out error: k-fold cross-validation, and its summary (median, p90, max)."""
from __future__ import annotations

import numpy as np

from dspark_sim.cost.profile_format import HeldOut
from dspark_sim.profiling.stages import Rows


def k_fold(n: int, folds: int, seed: int, predict) -> np.ndarray:
    """Predictions of ``n`` rows, each made by ``predict(train, test)`` (index arrays) from a
    fit without its fold."""
    order = np.random.default_rng(seed).permutation(n)
    pred = np.empty(n)
    for fold in range(min(folds, n)):
        test = order[fold::min(folds, n)]
        pred[test] = predict(np.setdiff1d(order, test), test)
    return pred


def held_out(rows: Rows, fit_fn, predict_fn, folds: int, seed: int) -> np.ndarray:
    """Relative errors of k-fold predictions, one per row."""
    pred = k_fold(rows.step_s.size, folds, seed,
                   lambda train, test: predict_fn(fit_fn(rows.take(train)), rows.take(test)))
    return np.abs(pred / rows.step_s - 1.0)


def summarize_errors(err: np.ndarray, signed: np.ndarray | None = None) -> HeldOut:
    """Median, p90 and max of relative errors, and how many; ``signed``: the same errors with
    their signs (predicted / measured - 1), whose median is kept beside."""
    if err.size == 0:
        return HeldOut(0.0, 0.0, 0.0, 0)
    return HeldOut(float(np.median(err)), float(np.percentile(err, 90)), float(err.max()), int(err.size),
                   None if signed is None else float(np.median(signed)))


def signed_summary(signed: np.ndarray) -> dict:
    """Median, p90 and max of |error|, the mean and median signed error and how many, of signed
    relative errors (predicted / measured - 1): a term fitted after the rest, held out by level."""
    err = np.abs(signed)
    return {"median": float(np.median(err)), "p90": float(np.percentile(err, 90)), "max": float(err.max()),
            "mean_signed": float(signed.mean()), "median_signed": float(np.median(signed)), "points": int(err.size)}


def summary_text(s: dict) -> str:
    """A :func:`signed_summary` in words, as docs/profiles.md's blocks give it."""
    return (f"median {100 * s['median']:.1f} %, p90 {100 * s['p90']:.1f} %, max {100 * s['max']:.1f} %, "
            f"mean signed {100 * s['mean_signed']:+.1f} %")


def as_held_out(summary: dict) -> HeldOut:
    """A :func:`signed_summary` as the profile keeps it."""
    return HeldOut(summary["median"], summary["p90"], summary["max"], summary["points"], summary["median_signed"])
