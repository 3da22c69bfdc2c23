"""The spread term: decode steps whose requests' contexts differ (long-tailed, as served).

The profiler's verify grid gives every request of a step the same context; a served step
holds contexts drawn long-tailed, and the profiler also times such steps (its ``spread``
rows: lognormal contexts about a mean, beside the same step at the mean). The fit's decode
attention is the smooth maximum of the KV stream and the longest request's latency floor:
right while all programs run at once, short once there are more programs (R requests x key
splits x KV heads) than the GPU holds, because the longest request's programs then start
behind part of the stream. That shortfall is fitted here, on the spread rows only, as

    spread_ratio * max(0, 1 - spread_slots / (R * splits(R))) * (longest - mean latency)

(:func:`dspark_sim.cost.shapes.spread_tail`): ``spread_slots`` over a grid of powers of two, the ratio by
least squares through the origin. Held out by whole levels of R (:func:`held_out_levels`).
"""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from dspark_sim.cost.profile_format import Profile
from dspark_sim.cost.shapes import SCALAR, spread_tail
from dspark_sim.cost.terms import TargetFit
from dspark_sim.errors import InputError
from dspark_sim.profiling.heldout import as_held_out, signed_summary

ROW_KEYS = ("reqs", "tokens", "context", "max_context", "step_s")
SLOTS = tuple(2.0 ** k for k in range(3, 11))  # 8 .. 1024 request x split programs per KV head


def spread_rows(raw: dict, file=None) -> list[dict]:
    """The raw profile's ``spread`` rows (none: an empty list)."""
    rows = raw.get("spread") or []
    if not isinstance(rows, list):
        raise InputError(file, "spread", type(rows).__name__, "must be a list of timed steps")
    for i, r in enumerate(rows):
        for key in ROW_KEYS:
            v = r.get(key) if isinstance(r, dict) else None
            if not isinstance(v, (int, float)) or isinstance(v, bool) or not v > 0:
                raise InputError(file, f"spread[{i}].{key}", v, "must be a number > 0")
    return rows


def columns(fit: TargetFit, rows: list[dict]) -> dict[str, np.ndarray]:
    """Per row: R, the measured step, the fit's price of it without the term (``base_s``) and
    the term's feature at each candidate of ``SLOTS`` (``tails``: rows x slots, seconds)."""
    base = replace(fit, spread_ratio=0.0, spread_slots=0.0)
    out = {"reqs": np.array([r["reqs"] for r in rows], float), "step_s": np.array([r["step_s"] for r in rows], float)}
    out["base_s"] = np.array([sum(base.parts(r["reqs"], r["tokens"], 0, r["reqs"] * r["context"], 0, 0, SCALAR,
                                             max_ctx=r["max_context"])) for r in rows])
    out["tails"] = np.array([[spread_tail(1.0, s, r["reqs"], base.kv_req_s_per_token * (r["max_context"] - r["context"]),
                                          base.decode_shape(r["reqs"], r["tokens"], SCALAR))
                              for s in SLOTS] for r in rows])
    return out


def fit_term(cols: dict[str, np.ndarray], keep: np.ndarray) -> tuple[float, float]:
    """(ratio, slots) minimising the squared error of the rows ``keep``; (0, 0) when no
    candidate lowers it."""
    excess = (cols["step_s"] - cols["base_s"])[keep]
    best, best_sse = (0.0, 0.0), float(excess @ excess)
    for j, slots in enumerate(SLOTS):
        x = cols["tails"][keep, j]
        denom = float(x @ x)
        ratio = max(0.0, float(x @ excess) / denom) if denom else 0.0
        resid = excess - ratio * x
        if float(resid @ resid) < best_sse:
            best, best_sse = (ratio, slots), float(resid @ resid)
    return best


def held_out_levels(cols: dict[str, np.ndarray]) -> dict:
    """Each whole level of R held out in turn: the step priced with the term fitted without it,
    against the measured step, and the price without the term."""
    pred = np.empty_like(cols["step_s"])
    for level in np.unique(cols["reqs"]):
        test = cols["reqs"] == level
        ratio, slots = fit_term(cols, ~test)
        j = SLOTS.index(slots) if slots else 0
        pred[test] = cols["base_s"][test] + ratio * cols["tails"][test, j]
    return {"with": signed_summary(pred / cols["step_s"] - 1.0), "without": signed_summary(cols["base_s"] / cols["step_s"] - 1.0)}


def with_spread_term(profile: Profile, raw: dict, file=None) -> tuple[Profile, dict | None]:
    """``profile`` with the spread term fitted on ``raw``'s spread rows and its held-out error
    (``spread@reqs``), and the report; unchanged (and None) when the raw profile has none."""
    rows = spread_rows(raw, file)
    if not rows:
        return profile, None
    cols = columns(profile.target, rows)
    ratio, slots = fit_term(cols, np.ones(len(rows), bool))
    if not math.isfinite(ratio):
        raise InputError(file, "spread", ratio, "the spread term did not fit")
    held = held_out_levels(cols)
    target = replace(profile.target, spread_ratio=ratio, spread_slots=slots)
    return (replace(profile, target=target, held_out={**profile.held_out, "spread@reqs": as_held_out(held["with"])}),
            {"spread_ratio": ratio, "spread_slots": slots, "held_out": held})
