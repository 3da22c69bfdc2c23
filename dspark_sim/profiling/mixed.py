"""The mixed-step term: decode rows beside a prompt chunk in one eager forward.

The profiler times decode steps (no prompt tokens) and prompt steps (no decode rows)
apart, and the fit prices a step that carries both as the sum of their terms. The measured
decoder runs such a step as one eager forward whose attention is planned for its longest
query, the chunk: every decode row gets the chunk's query tiles (``prefill_tile`` tokens
each, most of them empty) and no key splits. ``benchmarks/mixed_steps.py`` times these
steps on the GPU (R decoding requests beside one chunk of C tokens after K cached, and
each half alone). What a mixed step costs over its two halves, less what the fit's own
terms give that same difference (the linear layers' roof over the joined tokens), is
what the model may lack; it is fitted here, on the probe's points only, as

    mixed = mixed_s_per_row_tile * R * ceil(P / (Q * prefill_tile))

(R decode rows, P prompt tokens in Q chunks), added to an eager step's attention when it
carries decode rows. The term is fitted on, and judged by, the interaction it models: what the
mixed step costs over its two halves as measured, against what the fit gives that difference
(relative to the step). The halves' own errors (a board faster or slower than the one the rest
of the profile was timed on prices both halves and the mixed step alike) cancel there, where
they would not in the mixed step's price: fitted on whole prices, the coefficient would lean on
the rest of the profile's errors on the probe's GPU. The coefficient minimises the interaction's
squared relative error and is kept only when it predicts the interaction of every held-out
level (whole levels of R and of C in turn, :func:`held_out_levels`) better than no term; else
the fit keeps 0 and says so. The held-out prices of whole steps are reported beside it.
"""
from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np

from dspark_sim.cost.jsonio import read_json
from dspark_sim.cost.profile_format import Profile
from dspark_sim.cost.shapes import ARRAY
from dspark_sim.cost.terms import TargetFit
from dspark_sim.errors import InputError
from dspark_sim.profiling.heldout import as_held_out, signed_summary

POINT_KEYS = ("reqs", "chunk", "cached", "context_sum", "context_max", "gpu_s")
LEVEL_AXES = ("reqs", "chunk")


def read_probe(path: Path) -> list[dict]:
    """The probe's measured points (``points`` of a ``benchmarks/mixed_steps.py`` result)."""
    data = read_json(path)
    points = data.get("points") if isinstance(data, dict) else None
    if not isinstance(points, list) or not points:
        raise InputError(path, "points", points, "must be a non-empty list of measured steps")
    method = (data.get("provenance") or {}).get("method", "none")
    if method != "none":
        raise InputError(path, "provenance.method", method, "must be none: the term is fitted on target-only steps")
    for i, p in enumerate(points):
        for key in POINT_KEYS:
            if not isinstance(p.get(key), (int, float)) or isinstance(p.get(key), bool) or p[key] < 0:
                raise InputError(path, f"points[{i}].{key}", p.get(key), "must be a number >= 0")
    return points


def model_gpu_s(fit: TargetFit, reqs, chunk, cached, ctx_sum, ctx_max) -> np.ndarray:
    """The fit's device seconds of steps of ``reqs`` decode rows (one verify token each) beside
    one chunk of ``chunk`` tokens after ``cached`` (none when 0): the host's launch time apart,
    as the probe measures them with the host hidden."""
    reqs, chunk, cached = (np.asarray(x, float) for x in (reqs, chunk, cached))
    ctx_sum, ctx_max = np.asarray(ctx_sum, float), np.asarray(ctx_max, float)
    pre = (chunk > 0).astype(float)
    over, linear, per_req = fit.fixed_parts(reqs, reqs, chunk, pre, ARRAY)
    attn = fit.prefill_attn(chunk, chunk * (cached + chunk / 2.0), pre, ARRAY) \
        + fit.decode_attn(reqs, reqs, ctx_sum, ARRAY, ctx_max) + fit.mixed_attn(reqs, chunk, pre, ARRAY)
    return over + linear + per_req + attn


def interactions(fit: TargetFit, points: list[dict]) -> dict[str, np.ndarray]:
    """Per mixed point (R > 0 and C > 0 whose halves were measured): its levels, the row-tile
    count the term scales, the interaction measured minus the fit's (``excess``, seconds), the
    measured step (``step_s``) and the fit's price of it without the term (``base_s``)."""
    by = {(p["reqs"], p["chunk"], p["cached"]): p for p in points}
    rows = [(p, by[p["reqs"], 0, 0], by[0, p["chunk"], p["cached"]]) for p in points
            if p["reqs"] and p["chunk"] and (p["reqs"], 0, 0) in by and (0, p["chunk"], p["cached"]) in by]
    if not rows:
        raise InputError(None, "points", len(points), "no mixed step with both halves measured")
    col = lambda i, key: np.array([r[i][key] for r in rows], float)  # noqa: E731
    reqs, chunk, cached = col(0, "reqs"), col(0, "chunk"), col(0, "cached")
    zero = np.zeros_like(reqs)
    price = lambda r, c, k, s, m: model_gpu_s(fit, r, c, k, s, m)  # noqa: E731
    modelled = price(reqs, chunk, cached, col(0, "context_sum"), col(0, "context_max")) \
        - price(reqs, zero, zero, col(1, "context_sum"), col(1, "context_max")) - price(zero, chunk, cached, zero, zero)
    measured = col(0, "gpu_s") - col(1, "gpu_s") - col(2, "gpu_s")
    return {"reqs": reqs, "chunk": chunk, "cached": cached, "tiles": row_tiles(fit, reqs, chunk, np.ones_like(reqs)),
            "excess": measured - modelled, "step_s": col(0, "gpu_s"),
            "base_s": price(reqs, chunk, cached, col(0, "context_sum"), col(0, "context_max"))}


def row_tiles(fit: TargetFit, reqs, prompt_tokens, prompt_reqs):
    """R x the query tiles of the step's (mean) chunk: the empty programs the term prices."""
    tile = fit.prefill_tile or 1.0
    q = np.maximum(prompt_reqs, 1.0)
    return reqs * np.ceil(prompt_tokens / (q * tile))


def fit_term(rows: dict[str, np.ndarray], keep: np.ndarray) -> float:
    """``mixed_s_per_row_tile`` >= 0 minimising the squared error, relative to the measured step,
    of the rows ``keep``'s interaction: the term's price of it against the measured ``excess``."""
    x = rows["tiles"][keep] / rows["step_s"][keep]
    y = rows["excess"][keep] / rows["step_s"][keep]
    denom = float(x @ x)
    return max(0.0, float(x @ y) / denom) if denom else 0.0


def held_out_levels(rows: dict[str, np.ndarray]) -> dict[str, dict]:
    """Each whole level of R, then of C, held out in turn, the term fitted without the level:
    the interaction's error relative to the step (``interaction_with``, and ``interaction_without``
    the term: the measured excess missed whole), which decides whether the term is kept, and the
    step's price against the measured step (``with``; ``without`` the term)."""
    out = {}
    for axis in LEVEL_AXES:
        added = np.empty_like(rows["step_s"])
        for level in np.unique(rows[axis]):
            test = rows[axis] == level
            added[test] = fit_term(rows, ~test) * rows["tiles"][test]
        step, base = rows["step_s"], rows["base_s"]
        out[axis] = {"with": signed_summary((base + added) / step - 1.0), "without": signed_summary(base / step - 1.0),
                     "interaction_with": signed_summary((added - rows["excess"]) / step),
                     "interaction_without": signed_summary(-rows["excess"] / step)}
    return out


def with_mixed_term(fit: TargetFit, path: Path) -> tuple[TargetFit, dict]:
    """``fit`` with ``mixed_s_per_row_tile`` fitted on the probe at ``path``, and its report
    (the coefficient, every point's interaction, the held-out errors by level)."""
    base = replace(fit, mixed_s_per_row_tile=0.0)
    rows = interactions(base, read_probe(path))
    k = fit_term(rows, np.ones(rows["reqs"].size, bool))
    if not math.isfinite(k):
        raise InputError(path, "points", k, "the mixed-step term did not fit")
    held = held_out_levels(rows)
    if any(e["interaction_with"]["median"] >= e["interaction_without"]["median"] for e in held.values()):
        k = 0.0  # the term does not predict held-out levels' interaction better than none: the fit keeps none
    return replace(base, mixed_s_per_row_tile=k), {
        "mixed_s_per_row_tile": k, "held_out": held,
        "points": [{a: float(rows[a][i]) for a in ("reqs", "chunk", "cached", "tiles", "excess", "step_s", "base_s")}
                   for i in range(rows["reqs"].size)]}


def with_mixed_steps(profile: Profile, path: Path) -> Profile:
    """``profile`` with the mixed-step term fitted on the probe at ``path`` and its held-out
    errors (``mixed@reqs``, ``mixed@chunk``: each level held out whole, the step's price)."""
    target, report = with_mixed_term(profile.target, path)
    shipped = "with" if target.mixed_s_per_row_tile else "without"  # the errors of the prices the profile gives
    held = {f"mixed@{axis}": as_held_out(e[shipped]) for axis, e in report["held_out"].items()}
    return replace(profile, target=target, held_out={**profile.held_out, **held})
