"""The power-limit term of prompt steps (:mod:`dspark_sim.cost.hot`), fitted on prompt steps
timed back to back against the same steps timed as the profiler times them.

``benchmarks/prefill_clocks.py`` times the profiler's prompt steps (one request, a chunk after
a cached prefix) idling ``r`` times each call's seconds after it, for r = 0 (back to back: a
prefill duty of 1, as a saturated server runs them), the profile's own ``prefill_idle`` and
more, the shapes interleaved over two rounds, on the GPU the profile's prompt steps were timed
on. Per shape, the back-to-back step over the profile's one, less 1, divided by the share of
the profile's price that its linear layers make, is that shape's ``hot_ratio``;
each GPU's ratio is the median over its shapes. Boards differ in how far their clock falls at the
power limit, so where ``benchmarks/served_steps.py --part after --hold-mixed`` timed served-like
mixed steps (the decode rows beside a prompt chunk) on another GPU, after a second of their kind
back to back against after a second idle, that GPU's ratio (the prompt chunk's linear share of
the cool step as priced) joins, and the term keeps the mean over the GPUs. Held out by whole
chunk sizes on the profile's GPU (each size's back-to-back steps priced from its
profile-condition steps with the ratio of the other sizes) and by GPU (each GPU's hot steps
priced with the other GPUs' ratio). The steps idled longer than the profile's (a lower duty)
check that below the profile's duty nothing changes (the term prices them at the profile's price).

The decode steps' term (:class:`~dspark_sim.cost.hot.DecodeHot`) likewise keeps, per drafter kind
and request count, the mean over the GPUs whose decode steps were timed after a second of prompt
(or mixed) steps against after a second idle (``--part after``), held out by request count and by GPU.

The window the duty is taken over is not fitted (:data:`dspark_sim.cost.hot.WINDOW_S`).
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np

from dspark_sim.cost.base import StepWork
from dspark_sim.cost.hot import WINDOW_S, DecodeHot
from dspark_sim.cost.profile_format import Profile
from dspark_sim.cost.shapes import SCALAR
from dspark_sim.errors import InputError
from dspark_sim.profiling.heldout import as_held_out, signed_summary
from dspark_sim.profiling.probes import check_positive, points_of, provenance_of, read_probe

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


def mixed_rows(probe: dict, fit, file=None) -> dict:
    """The mixed steps ``benchmarks/served_steps.py --part after --hold-mixed`` held: per point,
    the step after a second of its kind back to back (``hot_s``) and after a second idle
    (``base_s``), and the share of the cool step its prompt chunk's linear layers make as ``fit``
    prices them (``share``); no rows where the probe held prompt steps."""
    rows = {"chunk": [], "hot_s": [], "base_s": [], "share": []}
    for i, p in enumerate(points_of(probe)):
        if not isinstance(p, dict) or p.get("part") != "after" or p.get("hold") != "mixed":
            continue
        for key in ("held_hot_s", "held_cool_s", "chunk"):
            check_positive(p, key, i, file)
        chunk = float(p["chunk"])
        linear = fit.parts(0, 0, chunk, 0, chunk * chunk / 2, 1, SCALAR)[1]
        rows["chunk"].append(chunk)
        rows["hot_s"].append(float(p["held_hot_s"]))
        rows["base_s"].append(float(p["held_cool_s"]))
        rows["share"].append(linear / float(p["held_cool_s"]))
    return {k: np.array(v, float) for k, v in rows.items()}


def held_out_hosts(hosts: list[dict]) -> dict:
    """Each GPU's hot steps priced from its cool ones with the mean ratio of the other GPUs, and
    the cool price (no term) beside; ``hosts``: ``{"rows": ..., "ratio": ...}`` each."""
    pred, real, cool = [], [], []
    for i, h in enumerate(hosts):
        other = float(np.mean([g["ratio"] for j, g in enumerate(hosts) if j != i]))
        rows = h["rows"]
        pred.append(rows["base_s"] * (1.0 + other * rows["share"]))
        real.append(rows["hot_s"])
        cool.append(rows["base_s"])
    pred, real, cool = (np.concatenate(x) for x in (pred, real, cool))
    return {"with": signed_summary(pred / real - 1.0), "without": signed_summary(cool / real - 1.0)}


def held_out_chunks(rows: dict) -> dict:
    """Each chunk size held out in turn; the profile's price (no term) beside."""
    pred = np.empty_like(rows["hot_s"])
    for chunk in np.unique(rows["chunk"]):
        test = rows["chunk"] == chunk
        pred[test] = (rows["base_s"] * (1.0 + ratio(rows, ~test) * rows["share"]))[test]
    return {"with": signed_summary(pred / rows["hot_s"] - 1.0),
            "without": signed_summary(rows["base_s"] / rows["hot_s"] - 1.0),
            "cooler": signed_summary(-rows["cooler"] / (1.0 + rows["cooler"])) if rows["cooler"].size else None}


def with_hot_term(profile: Profile, probe_path: Path, mixed: tuple[Path, ...] = ()) -> tuple[Profile, dict | None]:
    """``profile`` with the power-limit term fitted on the probe at ``probe_path`` (when it
    timed the profile's model at the profile's ``prefill_idle``) and the mixed steps of the
    probes ``mixed`` that held them (other GPUs), its held-out errors (``hot@chunk``, and
    ``hot@host`` with two GPUs or more), and the report; unchanged (and None) otherwise."""
    probe = read_probe(probe_path)
    idle, prov = profile.provenance.get("prefill_idle"), provenance_of(probe)
    if prov.get("model") != profile.model or not isinstance(idle, (int, float)):
        return profile, None
    rows = shape_rows(clock_cells(probe, probe_path), float(idle), profile.target)
    if len(np.unique(rows["chunk"])) < 2:
        return profile, None
    hosts = [{"gpu_uuid": prov.get("gpu_uuid"), "rows": rows, "file": Path(probe_path).name}]
    for path in mixed:
        other = read_probe(path)
        more = mixed_rows(other, profile.target, path) if provenance_of(other).get("model") == profile.model else None
        if more is not None and more["chunk"].size:
            hosts.append({"gpu_uuid": provenance_of(other).get("gpu_uuid"), "rows": more, "file": Path(path).name})
    for h in hosts:
        h["ratio"] = ratio(h["rows"], np.ones(h["rows"]["chunk"].size, bool))
        h["steps"] = int(h["rows"]["chunk"].size)
    hot = max(0.0, float(np.mean([h["ratio"] for h in hosts])))
    held, by_host = held_out_chunks(rows), held_out_hosts(hosts) if len(hosts) > 1 else None
    target = replace(profile.target, hot_ratio=hot, hot_window_s=WINDOW_S, hot_duty0=1.0 / (1.0 + float(idle)))
    kept = {**profile.held_out, "hot@chunk": as_held_out(held["with"])}
    if by_host is not None:
        kept["hot@host"] = as_held_out(by_host["with"])
    return (replace(profile, target=target, held_out=kept),
            {"hot_ratio": hot, "hot_window_s": WINDOW_S, "hot_duty0": target.hot_duty0, "held_out": held,
             "by_host": by_host, "shapes": int(rows["chunk"].size), "gpu_uuid": prov.get("gpu_uuid"),
             "hosts": [{k: h[k] for k in ("gpu_uuid", "ratio", "steps", "file")} for h in hosts]})


def decode_hot_rows(probe: dict, file=None) -> tuple[tuple[float, ...], tuple[tuple[float, ...], ...], dict]:
    """The decode steps' term from one ``benchmarks/served_steps.py --part after``: the requests timed
    (knots) and, per drafter kind (:attr:`DecodeHot.KINDS`), each one's decode step after a second of
    prompt (or mixed) steps over the same step after a second idle, less 1 (at least 0); and the
    points ``{(kind, reqs): (hot_s, cool_s)}``."""
    points = {}
    for i, p in enumerate(points_of(probe)):
        if not isinstance(p, dict) or p.get("part") != "after":
            continue
        for key in ("hot_s", "cool_s", "reqs"):
            check_positive(p, key, i, file)
        if p.get("kind") not in DecodeHot.KINDS:
            raise InputError(file, f"points[{i}].kind", p.get("kind"), f"must be one of {', '.join(DecodeHot.KINDS)}")
        points[(p["kind"], float(p["reqs"]))] = (float(p["hot_s"]), float(p["cool_s"]))
    knots = tuple(sorted({r for _, r in points}))
    if not knots or any((k, r) not in points for k in DecodeHot.KINDS for r in knots):
        raise InputError(file, "points", len(points), "must time every drafter kind (none, chain, block) at the same requests")
    rows = tuple(tuple(max(0.0, points[(k, r)][0] / points[(k, r)][1] - 1.0) for r in knots) for k in DecodeHot.KINDS)
    return knots, rows, points


def pooled(probes: list[tuple]) -> tuple[tuple[float, ...], tuple[tuple[float, ...], ...]]:
    """The knots of ``probes`` (:func:`decode_hot_rows` each) together and, per drafter kind, the
    mean over the probes of each one's ratio there (interpolated between its knots, clamped)."""
    knots = tuple(sorted({r for kn, _, _ in probes for r in kn}))
    return knots, tuple(tuple(float(np.mean([np.interp(r, kn, rows[k]) for kn, rows, _ in probes])) for r in knots)
                        for k in range(len(DecodeHot.KINDS)))


def _held(probes: list[tuple], ratio_of) -> dict:
    """Each probe's hot steps priced from its cool ones at ``ratio_of(probe index, kind index, reqs)``,
    and the cool price (no term) beside."""
    pred, real, cool = [], [], []
    for p, (_, _, points) in enumerate(probes):
        for (kind, reqs), (hot_s, cool_s) in sorted(points.items()):
            pred.append(cool_s * (1.0 + ratio_of(p, DecodeHot.KINDS.index(kind), reqs)))
            real.append(hot_s)
            cool.append(cool_s)
    pred, real, cool = np.array(pred), np.array(real), np.array(cool)
    return {"with": signed_summary(pred / real - 1.0), "without": signed_summary(cool / real - 1.0)}


def held_out_reqs(probes: list[tuple]) -> dict:
    """Each request count held out in turn: its hot steps priced with the ratio the pooled rows
    (:func:`pooled`) of the other counts interpolate (clamped)."""
    knots, rows = pooled(probes)

    def ratio_of(_, k, reqs):
        others = [j for j, r in enumerate(knots) if r != reqs]
        return float(np.interp(reqs, [knots[j] for j in others], [rows[k][j] for j in others]))
    return _held(probes, ratio_of)


def held_out_probes(probes: list[tuple]) -> dict:
    """Each probe (a GPU) held out in turn: its hot steps priced with the other probes' pooled rows."""
    def ratio_of(p, k, reqs):
        knots, rows = pooled([q for j, q in enumerate(probes) if j != p])
        return float(np.interp(reqs, knots, rows[k]))
    return _held(probes, ratio_of)


def decode_probes(profile: Profile, paths) -> list[tuple]:
    """The probes at ``paths`` that timed ``profile``'s model at two request counts or more, each
    ``(knots, rows, points, provenance, file name)``."""
    out = []
    for path in paths:
        probe = read_probe(path)
        prov = provenance_of(probe)
        if prov.get("model") != profile.model:
            continue
        knots, rows, points = decode_hot_rows(probe, path)
        if len(knots) >= 2:
            out.append((knots, rows, points, prov, Path(path).name))
    return out


def with_decode_hot_term(profile: Profile, paths) -> tuple[Profile, dict | None]:
    """``profile`` with the decode steps' power-limit term (:class:`~dspark_sim.cost.hot.DecodeHot`)
    pooled over the probes at ``paths`` (a path or several; those of the profile's model at two
    request counts or more), its held-out errors (``hot_decode@reqs``, and ``hot_decode@host``
    with two probes or more), and the report; unchanged (and None) without such a probe."""
    found = decode_probes(profile, [paths] if isinstance(paths, (str, Path)) else paths)
    if not found:
        return profile, None
    probes = [f[:3] for f in found]
    knots, rows = pooled(probes)
    held, by_host = held_out_reqs(probes), held_out_probes(probes) if len(probes) > 1 else None
    kept = {**profile.held_out, "hot_decode@reqs": as_held_out(held["with"])}
    if by_host is not None:
        kept["hot_decode@host"] = as_held_out(by_host["with"])
    target = replace(profile.target, hot_decode_reqs=knots, hot_decode=rows)
    return (replace(profile, target=target, held_out=kept),
            {"knots": knots, "ratios": dict(zip(DecodeHot.KINDS, rows)), "held_out": held, "by_host": by_host,
             "probes": [{"gpu_uuid": prov.get("gpu_uuid"), "date": prov.get("date"), "file": name,
                         "ratios": dict(zip(DecodeHot.KINDS, r))} for _, r, _, prov, name in found]})
