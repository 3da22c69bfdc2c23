"""The engine's host time: per decode step (``host``) and between steps (``schedule``), and their held-out error."""
from __future__ import annotations

import numpy as np

from dspark_sim.cost.profile_format import HostFit, TargetFit
from dspark_sim.cost.shapes import ARRAY, SCALAR
from dspark_sim.cost.host_terms import ScheduleFit
from dspark_sim.profiling.heldout import k_fold


def graph_part(rows: list[dict], target: TargetFit, drafts: dict) -> np.ndarray:
    """What the target and drafter fits predict for whole decode steps ``rows``."""
    col = lambda k: np.array([r[k] for r in rows], dtype=np.float64)  # noqa: E731
    reqs, vtok, ctx = col("reqs"), col("verify_tokens"), col("reqs") * col("context")
    zero = np.zeros(len(rows))
    pred = sum(target.parts(reqs, vtok, zero, ctx, zero, zero, ARRAY))
    for i, r in enumerate(rows):
        fit = drafts.get(r["kind"])
        if fit is not None and r["block_size"]:
            pred[i] += fit.seconds(float(r["reqs"]), float(r["block_size"]), ctx[i], SCALAR)
    return pred


def fit_host(rows: list[dict], target: TargetFit, drafts: dict) -> dict[str, HostFit]:
    """``bias_s + req_s * R`` per step kind: non-negative least squares on what the graph
    fits leave of each measured whole step."""
    from scipy.optimize import nnls

    out = {}
    # what the graph fits leave, not the row's host_s: the profiler's draft and verify timers
    # run from before the host prepares each graph's inputs, so wall - draft - verify misses
    # that preparation (about 0.8 ms for the three passes of an MTP-3 chain)
    resid = np.array([r["step_s"] for r in rows]) - graph_part(rows, target, drafts) if rows else []
    for kind in sorted({r["kind"] for r in rows}):
        idx = [i for i, r in enumerate(rows) if r["kind"] == kind]
        reqs = np.array([rows[i]["reqs"] for i in idx], dtype=np.float64)
        y = np.array([resid[i] for i in idx])
        # relative weights: every step size counts the same
        w = 1.0 / np.array([rows[i]["step_s"] for i in idx])
        (bias, per_req), _ = nnls(np.stack([np.ones_like(reqs), reqs], 1) * w[:, None], y * w)
        out[kind] = HostFit(kind, float(bias), float(per_req))
    return out


def fit_schedule(rows: list[dict]) -> ScheduleFit | None:
    """``bias_s + req_s * R`` for the serving loop's gaps between steps (all drafter kinds:
    the loop does the same work for each), non-negative least squares on seconds (the gap
    adds to a step: its absolute error is what moves latency); None without rows."""
    from scipy.optimize import nnls

    if not rows:
        return None
    reqs = np.array([r["reqs"] for r in rows], dtype=np.float64)
    y = np.array([r["step_s"] for r in rows])
    (bias, per_req), _ = nnls(np.stack([np.ones_like(reqs), reqs], 1), y)
    return ScheduleFit(float(bias), float(per_req))


def predict_steps(rows: list[dict], target: TargetFit, drafts: dict, host: dict) -> np.ndarray:
    """Whole decode step seconds: graphs (target + drafter) plus the host term."""
    pred = graph_part(rows, target, drafts)
    for i, r in enumerate(rows):
        if r["kind"] in host:
            pred[i] += host[r["kind"]].seconds(r["reqs"])
    return pred




def held_out_steps(rows: list[dict], target: TargetFit, drafts: dict, folds: int,
                    seed: int) -> np.ndarray:
    """k-fold relative errors of whole decode steps, the host term refitted without the fold
    (the target and drafter fits come from their own grids)."""
    def predict(train, test):
        host = fit_host([rows[i] for i in train], target, drafts)
        return predict_steps([rows[i] for i in test], target, drafts, host)
    pred = k_fold(len(rows), folds, seed, predict)
    return np.abs(pred / np.array([r["step_s"] for r in rows]) - 1.0)


def held_out_schedule(rows: list[dict], folds: int, seed: int) -> np.ndarray:
    """k-fold relative errors of the scheduling gaps."""
    def predict(train, test):
        fit = fit_schedule([rows[i] for i in train])
        return np.array([fit.seconds(rows[i]["reqs"]) for i in test])
    pred = k_fold(len(rows), folds, seed, predict)
    return np.abs(pred / np.array([r["step_s"] for r in rows]) - 1.0)
