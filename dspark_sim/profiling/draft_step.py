"""The drafter inside a served step (:class:`~dspark_sim.cost.draft_fit.DraftFit`'s ``step_ratio``),
fitted on whole decode steps timed as served against the profiler's drafter timed alone.

The profiler times a drafter step alone, its CUDA graph replayed back to back. A served step runs
it right after the target's forward. ``benchmarks/served_steps.py --part layout`` times whole
decode steps as the serving loop runs them (overlapped, through CUDA graphs) over R requests of
long-tailed contexts, the drafter's part by device events (``draft_s``), with the requests' KV
pages in order and scattered. Per drafter kind and R: the drafter's seconds over the profile's
price of that drafter step alone (its requests, block size and summed context), less 1, the mean
over the page layouts, is the ratio at R. Only an R that is a power of two enters: the profile
prices a drafter at the next power of two of its requests (``request_tiers``), while the probe's
decoder caps that tier at its own most running requests, so another R may not be the shape
priced. Held out by R: each R's steps priced with the ratio of the other counts (interpolated,
clamped) against the price alone.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np

from dspark_sim.cost.draft_fit import DRAFT_KINDS
from dspark_sim.cost.profile_format import Profile
from dspark_sim.cost.shapes import SCALAR
from dspark_sim.errors import InputError
from dspark_sim.profiling.heldout import as_held_out, signed_summary
from dspark_sim.profiling.probes import check_positive, points_of, provenance_of, read_probe

CHAIN_BLOCK = 3  # the probe's chain drafter: MTP-3 (its block drafter's size is in its provenance)


def step_points(probe: dict, file=None) -> list[dict]:
    """The probe's whole decode steps with a drafter whose request count is a power of two:
    kind, requests, block size, summed context, the drafter's seconds (each checked) and the
    pages' layout."""
    sizes = {"chain": CHAIN_BLOCK, "block": (provenance_of(probe).get("block_size") or {}).get("block")}
    out = []
    for i, p in enumerate(points_of(probe)):
        if not isinstance(p, dict) or p.get("part") != "layout" or p.get("kind") not in DRAFT_KINDS:
            continue
        for key in ("reqs", "context_sum", "draft_s"):
            check_positive(p, key, i, file)
        size = sizes[p["kind"]]
        if not isinstance(size, int) or size < 1:
            raise InputError(file, "provenance.block_size.block", size, "must be the block drafter's size")
        reqs = int(p["reqs"])
        if reqs & (reqs - 1) == 0:
            out.append({"kind": p["kind"], "reqs": reqs, "block_size": size, "context_sum": float(p["context_sum"]),
                        "draft_s": float(p["draft_s"]), "layout": p.get("layout", "-")})
    return out


def alone_s(profile: Profile, q: dict) -> float:
    """The profile's price of point ``q``'s drafter step alone (no in-step ratio)."""
    return float(profile.draft[q["kind"]].alone().seconds(q["reqs"], q["block_size"], q["context_sum"], SCALAR))


def ratios(profile: Profile, points: list[dict]) -> dict[str, tuple[tuple[float, ...], tuple[float, ...]]]:
    """Per drafter kind the profile has and the points time: (requests, ratio at each), the mean
    over the points at those requests."""
    out = {}
    for kind in DRAFT_KINDS:
        got = [q for q in points if q["kind"] == kind]
        if kind not in profile.draft or not got:
            continue
        knots = tuple(sorted({float(q["reqs"]) for q in got}))
        out[kind] = knots, tuple(float(np.mean([q["draft_s"] / alone_s(profile, q) - 1.0 for q in got if q["reqs"] == k]))
                                 for k in knots)
    return out


def held_out_reqs(profile: Profile, points: list[dict], fitted: dict) -> dict:
    """Each request count held out in turn, per kind: its steps priced with the ratio of the
    other counts (interpolated, clamped), and the price alone beside."""
    pred, real, alone = [], [], []
    for q in points:
        knots, rows = fitted[q["kind"]]
        keep = [i for i, k in enumerate(knots) if k != q["reqs"]]
        if not keep:
            continue
        s = alone_s(profile, q)
        pred.append(s * (1.0 + float(np.interp(q["reqs"], [knots[i] for i in keep], [rows[i] for i in keep]))))
        real.append(q["draft_s"])
        alone.append(s)
    pred, real, alone = np.array(pred), np.array(real), np.array(alone)
    return {"with": signed_summary(pred / real - 1.0), "without": signed_summary(alone / real - 1.0)}


def with_draft_step_term(profile: Profile, probe_path: Path) -> tuple[Profile, dict | None]:
    """``profile`` with each drafter's in-step ratio fitted on the probe at ``probe_path`` (when it
    timed the profile's model at two request counts or more) and its held-out error
    (``draft_step@reqs``), and the report; unchanged (and None) otherwise."""
    probe = read_probe(probe_path)
    prov = provenance_of(probe)
    if prov.get("model") != profile.model:
        return profile, None
    points = step_points(probe, probe_path)
    fitted = {k: v for k, v in ratios(profile, points).items() if len(v[0]) >= 2}
    if not fitted:
        return profile, None
    points = [q for q in points if q["kind"] in fitted]
    held = held_out_reqs(profile, points, fitted)
    draft = {k: replace(fit, step_knots=fitted[k][0], step_ratio=fitted[k][1]) if k in fitted else fit
             for k, fit in profile.draft.items()}
    return (replace(profile, draft=draft, held_out={**profile.held_out, "draft_step@reqs": as_held_out(held["with"])}),
            {"ratios": fitted, "held_out": held, "points": points, "gpu_uuid": prov.get("gpu_uuid"),
             "date": prov.get("date"), "tree": prov.get("tree")})
