"""The power-limit term of prompt steps (:mod:`dspark_sim.cost.hot`), fitted on prompt steps
timed back to back against the same steps timed as the profiler times them.

``benchmarks/prefill_clocks.py`` times the profiler's prompt steps (one request, a chunk after
a cached prefix) idling ``r`` times each call's seconds after it, for r = 0 (back to back: a
prefill duty of 1, as a saturated server runs them), the profile's own ``prefill_idle`` and
more, the shapes interleaved over two rounds, on the GPU the profile's prompt steps were timed
on. Per shape, the back-to-back step over the profile's one, less 1, divided by the share of
the profile's price that its linear layers make, is that shape's ``hot_ratio``;
the term keeps the median over the shapes. Held out by whole chunk sizes: each size's
back-to-back steps priced from its profile-condition steps with the ratio of the other sizes.
The steps idled longer than the profile's (a lower duty) check that below the profile's duty
nothing changes (the term prices them at the profile's price).

The window the duty is taken over is not fitted (:data:`dspark_sim.cost.hot.WINDOW_S`).
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np

from dspark_sim.cost.base import StepWork
from dspark_sim.cost.hot import WINDOW_S, DecodeHot
from dspark_sim.cost.jsonio import read_json
from dspark_sim.cost.profile_format import Profile
from dspark_sim.cost.shapes import SCALAR
from dspark_sim.errors import InputError
from dspark_sim.profiling.heldout import as_held_out, signed_summary

KEYS = ("round", "chunk", "cached", "idle", "step_s")


def clock_cells(probe: dict, file=None) -> list[dict]:
    """The probe's cells, each checked: round, chunk, cached, idle and step seconds."""
    cells = probe.get("cells")
    if not isinstance(cells, list):
        raise InputError(file, "cells", type(cells).__name__, "must be a list of timed prompt steps")
    for i, c in enumerate(cells):
        for key in KEYS:
            v = c.get(key) if isinstance(c, dict) else None
            if not isinstance(v, (int, float)) or isinstance(v, bool) or v < 0 or (key == "step_s" and v <= 0):
                raise InputError(file, f"cells[{i}].{key}", v, "must be a number >= 0 (step_s > 0)")
    return cells


def shape_rows(cells: list[dict], profile_idle: float, fit) -> dict:
    """Per (round, chunk, cached) with a back-to-back cell and one at ``profile_idle``: the
    chunk, both step seconds, the share of the profile's price in its linear layers, and the
    longer-idle cells' seconds over the profile-condition one (arrays)."""
    by = {}
    for c in cells:
        by.setdefault((c["round"], c["chunk"], c["cached"]), {})[float(c["idle"])] = c["step_s"]
    rows = {"chunk": [], "hot_s": [], "base_s": [], "share": [], "cooler": []}
    for (_, chunk, cached), idle in sorted(by.items()):
        if 0.0 not in idle or profile_idle not in idle:
            continue
        work = StepWork(prefill_tokens=int(chunk), prefill_reqs=1, prefill_attn_tokens2=chunk * (cached + chunk / 2))
        over, linear, per_req, attn = fit.parts(0, 0, work.prefill_tokens, 0, work.prefill_attn_tokens2, 1, SCALAR)
        rows["chunk"].append(chunk)
        rows["hot_s"].append(idle[0.0])
        rows["base_s"].append(idle[profile_idle])
        rows["share"].append(linear / (over + linear + per_req + attn))
        rows["cooler"] += [s / idle[profile_idle] - 1.0 for r, s in idle.items() if r > profile_idle]
    return {k: np.array(v, float) for k, v in rows.items()}


def ratio(rows: dict, keep: np.ndarray) -> float:
    """The median over the rows ``keep`` of each shape's ratio (see the module docstring)."""
    return float(np.median((rows["hot_s"] / rows["base_s"] - 1.0)[keep] / rows["share"][keep]))


def held_out_chunks(rows: dict) -> dict:
    """Each chunk size held out in turn; the profile's price (no term) beside."""
    pred = np.empty_like(rows["hot_s"])
    for chunk in np.unique(rows["chunk"]):
        test = rows["chunk"] == chunk
        pred[test] = (rows["base_s"] * (1.0 + ratio(rows, ~test) * rows["share"]))[test]
    return {"with": signed_summary(pred / rows["hot_s"] - 1.0),
            "without": signed_summary(rows["base_s"] / rows["hot_s"] - 1.0),
            "cooler": signed_summary(-rows["cooler"] / (1.0 + rows["cooler"])) if rows["cooler"].size else None}


def with_hot_term(profile: Profile, probe_path: Path) -> tuple[Profile, dict | None]:
    """``profile`` with the power-limit term fitted on the probe at ``probe_path`` (when it
    timed the profile's model at the profile's ``prefill_idle``) and its held-out error
    (``hot@chunk``), and the report; unchanged (and None) otherwise."""
    probe = read_json(probe_path)
    if not isinstance(probe, dict):
        raise InputError(probe_path, "file", type(probe).__name__, "must be a JSON object (the probe's result)")
    idle, prov = profile.provenance.get("prefill_idle"), probe.get("provenance")
    prov = prov if isinstance(prov, dict) else {}
    if prov.get("model") != profile.model or not isinstance(idle, (int, float)):
        return profile, None
    rows = shape_rows(clock_cells(probe, probe_path), float(idle), profile.target)
    if len(np.unique(rows["chunk"])) < 2:
        return profile, None
    hot = max(0.0, ratio(rows, np.ones(rows["chunk"].size, bool)))
    held = held_out_chunks(rows)
    target = replace(profile.target, hot_ratio=hot, hot_window_s=WINDOW_S, hot_duty0=1.0 / (1.0 + float(idle)))
    return (replace(profile, target=target, held_out={**profile.held_out, "hot@chunk": as_held_out(held["with"])}),
            {"hot_ratio": hot, "hot_window_s": WINDOW_S, "hot_duty0": target.hot_duty0, "held_out": held,
             "shapes": int(rows["chunk"].size), "gpu_uuid": prov.get("gpu_uuid")})


def decode_hot_rows(probe: dict, file=None) -> tuple[tuple[float, ...], tuple[tuple[float, ...], ...], dict]:
    """The decode steps' term from ``benchmarks/served_steps.py --part after``: the requests timed
    (knots) and, per drafter kind (:attr:`DecodeHot.KINDS`), each one's decode step after a second of
    prompt steps over the same step after a second idle, less 1 (at least 0); and the points
    ``{(kind, reqs): (hot_s, cool_s)}``."""
    points = {}
    for i, p in enumerate(probe.get("points", ()) if isinstance(probe, dict) else ()):
        if not isinstance(p, dict) or p.get("part") != "after":
            continue
        for key in ("hot_s", "cool_s", "reqs"):
            if not isinstance(p.get(key), (int, float)) or isinstance(p.get(key), bool) or p[key] <= 0:
                raise InputError(file, f"points[{i}].{key}", p.get(key), "must be a number > 0")
        if p.get("kind") not in DecodeHot.KINDS:
            raise InputError(file, f"points[{i}].kind", p.get("kind"), f"must be one of {', '.join(DecodeHot.KINDS)}")
        points[(p["kind"], float(p["reqs"]))] = (float(p["hot_s"]), float(p["cool_s"]))
    knots = tuple(sorted({r for _, r in points}))
    if not knots or any((k, r) not in points for k in DecodeHot.KINDS for r in knots):
        raise InputError(file, "points", len(points), "must time every drafter kind (none, chain, block) at the same requests")
    rows = tuple(tuple(max(0.0, points[(k, r)][0] / points[(k, r)][1] - 1.0) for r in knots) for k in DecodeHot.KINDS)
    return knots, rows, points


def held_out_reqs(knots: tuple, rows: tuple, points: dict) -> dict:
    """Each request count held out in turn: its hot steps priced from its cool ones with the
    ratio the other counts interpolate (clamped), and the cool price (no term) beside."""
    pred, real, cool = [], [], []
    for k, row in zip(DecodeHot.KINDS, rows):
        for i, r in enumerate(knots):
            others = [j for j in range(len(knots)) if j != i]
            ratio = float(np.interp(r, [knots[j] for j in others], [row[j] for j in others]))
            hot_s, cool_s = points[(k, r)]
            pred.append(cool_s * (1.0 + ratio))
            real.append(hot_s)
            cool.append(cool_s)
    pred, real, cool = np.array(pred), np.array(real), np.array(cool)
    return {"with": signed_summary(pred / real - 1.0), "without": signed_summary(cool / real - 1.0)}


def with_decode_hot_term(profile: Profile, probe_path: Path) -> tuple[Profile, dict | None]:
    """``profile`` with the decode steps' power-limit term (:class:`~dspark_sim.cost.hot.DecodeHot`)
    from the probe at ``probe_path`` (when it timed the profile's model at two request counts or
    more) and its held-out error (``hot_decode@reqs``), and the report; unchanged (and None) otherwise."""
    probe = read_json(probe_path)
    prov = probe.get("provenance") if isinstance(probe, dict) else None
    prov = prov if isinstance(prov, dict) else {}
    if prov.get("model") != profile.model:
        return profile, None
    knots, rows, points = decode_hot_rows(probe, probe_path)
    if len(knots) < 2:
        return profile, None
    held = held_out_reqs(knots, rows, points)
    target = replace(profile.target, hot_decode_reqs=knots, hot_decode=rows)
    return (replace(profile, target=target, held_out={**profile.held_out, "hot_decode@reqs": as_held_out(held["with"])}),
            {"knots": knots, "ratios": dict(zip(DecodeHot.KINDS, rows)), "held_out": held,
             "gpu_uuid": prov.get("gpu_uuid"), "date": prov.get("date")})
