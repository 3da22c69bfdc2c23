"""The shared-prefix term: decode steps whose requests read the same cached prefix pages.

With the prefix cache on, requests of one conversation or one system prompt hold the same
physical pages for their first tokens; a decode step streams every request's keys, and the
pages another request of the step reads too come back, in part, from the GPU's L2. The
served-step probe (``benchmarks/served_steps.py``, ``served_<model>.json`` beside the raw
profile) times whole decode steps of R requests of one context in G groups sharing a prefix,
for G from R (nothing shared) down to 1, for the target alone and for DSpark's window. The
target forward's device time (``verify_s``) of each shared point less its unshared one is
fitted, per query-tile width W, as the change of the decode attention
(:meth:`~dspark_sim.cost.terms.TargetFit.decode_attn`) when ``shared(W)`` of the repeated
tokens come off its stream, ``shared(W)`` in [0, 1] by least squares: the share of the
repeated tokens the stream does not read from memory. Held out
by whole levels of R (:func:`held_out_levels`).
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np

from dspark_sim.cost.profile_format import Profile
from dspark_sim.cost.shapes import SCALAR
from dspark_sim.cost.terms import TargetFit
from dspark_sim.errors import InputError
from dspark_sim.profiling.heldout import as_held_out, signed_summary
from dspark_sim.profiling.probes import read_probe

KEYS = ("reqs", "groups", "context", "shared_tokens", "verify_tokens", "verify_s")


def shared_points(probe: dict, file=None) -> list[dict]:
    """The probe's shared-prefix points, each beside its unshared one (same kind and R) as
    ``base_s``; the points of a (kind, R) without an unshared point are left out."""
    pts = [p for p in probe.get("points", []) if isinstance(p, dict) and p.get("part") == "shared"]
    for i, p in enumerate(pts):
        if not isinstance(p.get("kind"), str):
            raise InputError(file, f"points[{i}].kind", p.get("kind"), "must name the step's drafter kind")
        for key in KEYS:
            v = p.get(key)
            if not isinstance(v, (int, float)) or isinstance(v, bool) or v < 0:
                raise InputError(file, f"points[{i}].{key}", v, "must be a number >= 0")
    base = {(p["kind"], p["reqs"]): p["verify_s"] for p in pts if not p["groups"]}
    return [{**p, "base_s": base[p["kind"], p["reqs"]]} for p in pts
            if p["groups"] and (p["kind"], p["reqs"]) in base]


def columns(fit: TargetFit, points: list[dict]) -> dict:
    """Per point: R, its query-tile width, the measured and unshared target seconds, and
    ``gain(ratio)``: the decode attention's change when ``ratio`` of its repeated tokens come
    off the stream (arrays over the points)."""
    every = replace(fit, shared_widths=(1.0,), shared_ratio=(1.0,))  # each repeated token off the stream
    shapes = [(p["reqs"], round(p["verify_tokens"]), p["reqs"] * p["context"], p["context"], p["shared_tokens"])
              for p in points]
    unshared = np.array([every.decode_attn(r, v, ctx, SCALAR, c) for r, v, ctx, c, _ in shapes])

    def gain(ratio: np.ndarray) -> np.ndarray:  # a ratio k of D off the stream: k * D with every token off
        return np.array([every.decode_attn(r, v, ctx, SCALAR, c, shared=float(k) * d)
                         for (r, v, ctx, c, d), k in zip(shapes, np.broadcast_to(ratio, unshared.shape))]) - unshared

    return {"reqs": np.array([p["reqs"] for p in points], float),
            "width": np.array([SCALAR.pow2(round(p["verify_tokens"]) / p["reqs"]) for p in points], float),
            "step_s": np.array([p["verify_s"] for p in points], float),
            "base_s": np.array([p["base_s"] for p in points], float), "gain": gain}


def fit_ratios(cols: dict, keep: np.ndarray) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """(widths, ratios): per query-tile width among the rows ``keep``, the ratio in [0, 1] whose
    gains best match the measured changes (least squares, bounded scalar search)."""
    from scipy.optimize import minimize_scalar

    measured = cols["step_s"] - cols["base_s"]
    widths, ratios = [], []
    for w in np.unique(cols["width"][keep]).tolist():
        at = keep & (cols["width"] == w)

        def sse(k: float) -> float:
            resid = (cols["gain"](np.where(at, k, 0.0)) - measured)[at]
            return float(resid @ resid)
        best = minimize_scalar(sse, bounds=(0.0, 1.0), method="bounded", options={"xatol": 1e-9})
        widths.append(float(w))
        ratios.append(float(best.x))
    return tuple(widths), tuple(ratios)


def held_out_levels(cols: dict) -> dict:
    """Each whole level of R held out in turn: the shared step priced from its unshared one
    with the ratios fitted without that level, against the measured step; and the unshared
    step taken for it (no term)."""
    pred = np.empty_like(cols["step_s"])
    for level in np.unique(cols["reqs"]):
        test = cols["reqs"] == level
        widths, ratios = fit_ratios(cols, ~test)
        pred[test] = (cols["base_s"] + cols["gain"](np.interp(cols["width"], widths, ratios)))[test]
    return {"with": signed_summary(pred / cols["step_s"] - 1.0),
            "without": signed_summary(cols["base_s"] / cols["step_s"] - 1.0)}


def with_shared_term(profile: Profile, probe_path: Path) -> tuple[Profile, dict | None]:
    """``profile`` with the shared-prefix ratios fitted on the probe at ``probe_path`` and their
    held-out error (``shared@reqs``), and the report; unchanged (and None) without points."""
    points = shared_points(read_probe(probe_path), probe_path)
    if not points:
        return profile, None
    cols = columns(profile.target, points)
    widths, ratios = fit_ratios(cols, np.ones(len(points), bool))
    held = held_out_levels(cols)
    target = replace(profile.target, shared_widths=widths, shared_ratio=ratios)
    return (replace(profile, target=target, held_out={**profile.held_out, "shared@reqs": as_held_out(held["with"])}),
            {"shared_widths": widths, "shared_ratio": ratios, "held_out": held, "points": len(points)})
