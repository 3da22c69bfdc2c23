"""What the sweeps' goals ask of step prices: how much the decoder itself moves between two H200
hosts serving the same requests, and how far a step-time error carries into each metric at
each load.

Past saturation a queue grows for the whole run, at the arrival rate less the service rate, so
the mean TTFT follows a small error in step time many times over. :func:`carry` measures that
on the simulator itself: every case simulated again with every profiled step time ``x (1 +
d)`` (the scenario's ``cost_scale``), and each metric's change divided by ``d``.
:func:`host_to_host` sets the decoder's runs of one visit beside another visit's runs of the
same cases (the same requests, another GPU and host): the spread no cost model fitted on one
board can be expected to beat on another. :func:`uniform_scale` puts the two together: the
changes of every step time, the same for all steps, that would bring each host's mean signed
errors within the goal, and whether one change does it for both.
"""
from __future__ import annotations

import numpy as np

KEYS = ("output_throughput", "p50_tpot_ms", "mean_ttft_ms")
STEP = 0.01  # the step-time change the carry is measured over


def carry(rows: list[dict]) -> dict:
    """Per level, per metric of :data:`KEYS`: the median, p90 (of the absolute) and max-magnitude
    change of the simulated metric per unit change of every step time, over the cases that were
    simulated again (``r["scaled"]``, the metric's value at ``1 + STEP``)."""
    out: dict = {}
    for level in sorted({r["level"] for r in rows if r.get("scaled")}):
        at = [r for r in rows if r["level"] == level and r.get("scaled")]
        cells = {}
        for key in KEYS:
            x = np.array([(r["scaled"][key] / r["metrics"][key]["sim"] - 1.0) / STEP for r in at
                          if key in r["scaled"] and r["metrics"].get(key, {}).get("sim")], dtype=float)
            if x.size:
                cells[key] = {"median": float(np.median(x)), "p90": float(np.percentile(np.abs(x), 90)),
                              "points": int(x.size)}
        out[str(level)] = cells
    return out


def host_to_host(rows: list[dict], other: list[dict]) -> dict:
    """Per level, per metric of :data:`KEYS`: the decoder's runs in ``other`` against its runs of the
    same cases in ``rows`` (other / rows - 1): median and p90 absolute, and mean signed. A case both
    took from the same visit is left out."""
    mine = {r["case"]: r for r in rows}
    pairs = [(mine[o["case"]], o) for o in other if o["case"] in mine and mine[o["case"]]["real_run"] != o["real_run"]]
    out: dict = {}
    for level in sorted({a["level"] for a, _ in pairs}):
        cells = {}
        for key in KEYS:
            d = np.array([b["metrics"][key]["real"] / a["metrics"][key]["real"] - 1.0 for a, b in pairs
                          if a["level"] == level and key in a["metrics"] and key in b["metrics"]
                          and a["metrics"][key]["real"]], dtype=float)
            if d.size:
                cells[key] = {"median": float(np.median(np.abs(d))), "p90": float(np.percentile(np.abs(d), 90)),
                              "mean_signed": float(d.mean()), "points": int(d.size)}
        out[str(level)] = cells
    return out


def uniform_scale(rows: list[dict], other: list[dict], goal: float) -> dict:
    """Per level: the interval of a change ``x`` of every step time (a fraction, the same for every
    step) within which the mean signed error of every metric of :data:`KEYS` is within ``goal``, on
    ``rows``' host, on ``other``'s (the same cases), and on both. A case's error after the change
    is ``(1 + e) (1 + c x) - 1``, ``c`` its own carry (``rows``' ``scaled``, the same requests on
    either host), so a level's mean signed error is linear in ``x``; an empty interval is None."""
    carried = {r["case"]: r for r in rows if r.get("scaled")}
    out: dict = {}
    for level in sorted({r["level"] for r in carried.values()}):
        hosts = {}
        for name, part in (("headline", rows), ("replicate", other)):
            lo, hi = -np.inf, np.inf
            for key in KEYS:
                e, c = [], []
                for r in part:
                    a = carried.get(r["case"])
                    if r["level"] == level and a and key in r["metrics"] and key in a["scaled"]:
                        e.append(r["metrics"][key]["rel_error"])
                        c.append((a["scaled"][key] / a["metrics"][key]["sim"] - 1.0) / STEP)
                if not e:
                    continue
                mean, slope = float(np.mean(e)), float(np.mean((1.0 + np.array(e)) * np.array(c)))
                if abs(slope) < 1e-9:  # the change cannot move it
                    lo, hi = (lo, hi) if abs(mean) <= goal else (np.inf, -np.inf)
                    continue
                ends = sorted(((-goal - mean) / slope, (goal - mean) / slope))
                lo, hi = max(lo, ends[0]), min(hi, ends[1])
            hosts[name] = [float(lo), float(hi)] if lo <= hi and np.isfinite(lo) and np.isfinite(hi) else None
        a, b = hosts.get("headline"), hosts.get("replicate")
        both = [max(a[0], b[0]), min(a[1], b[1])] if a and b else None
        hosts["both"] = both if both and both[0] <= both[1] else None
        out[str(level)] = hosts
    return out


def markdown(data: dict) -> list[str]:
    """The page's section: the carry table, and the host-to-host table where a replicate served
    cases of the headline visits."""
    carried, hosts = data.get("carry") or {}, data.get("host_to_host") or {}
    if not carried and not hosts:
        return []
    lines = ["## What the goals ask of step prices", ""]
    if carried:
        lines += [f"Each case simulated again with every profiled step time {1 + STEP:g} times the profile's "
                  "(`cost_scale`), on the same requests: the change of each metric per 1 % of step time, "
                  "median over the level's cases (p90 of its magnitude). A signed-error goal of "
                  "+-2 % at a level asks the step prices to be right within 2 % divided by that change.",
                  "", "| level | " + " | ".join(f"{k}: change per 1 % (p90)" for k in KEYS) + " |",
                  "|---|" + "---|" * len(KEYS)]
        for level, cells in carried.items():
            lines.append(f"| {float(level):.1f}x | " + " | ".join(
                f"{c['median']:+.2f} % ({c['p90']:.2f} %)" if (c := cells.get(k)) else "-" for k in KEYS) + " |")
        lines.append("")
    if hosts:
        lines += [f"The decoder against itself: the replicate's runs ({', '.join(data['replicate']['visits'])}) "
                  "of the cases the headline visits served too, the same requests on another H200 and host "
                  "(replicate / headline - 1): median / p90 of the magnitude / mean signed.", "",
                  "| level | points | " + " | ".join(KEYS) + " |", "|---|---|" + "---|" * len(KEYS)]
        for level, cells in hosts.items():
            n = max((c["points"] for c in cells.values()), default=0)
            lines.append(f"| {float(level):.1f}x | {n} | " + " | ".join(
                f"{c['median']:.1%} / {c['p90']:.1%} / {c['mean_signed']:+.1%}" if (c := cells.get(k)) else "-"
                for k in KEYS) + " |")
        lines.append("")
    if scale := data.get("uniform_scale"):
        cell = lambda v: f"{100 * v[0]:+.1f} % to {100 * v[1]:+.1f} %" if v else "none"  # noqa: E731
        lines += ["One change of every step time, the same for every step and case: the changes that would bring "
                  f"the mean signed error of {', '.join(KEYS)} within +-{100 * data['goals']['mean_signed']:g} % "
                  "at each level, on each host and on both (each case's error moved by its own carry above, "
                  "linear in the change). Where no change does it for both, no step price fitted on one board "
                  "meets the signed goals on these two hosts at once.", "",
                  "| level | headline | replicate | both |", "|---|---|---|---|"]
        for level, hosts in scale.items():
            lines.append(f"| {float(level):.1f}x | {cell(hosts.get('headline'))} | {cell(hosts.get('replicate'))} | "
                         f"{cell(hosts.get('both'))} |")
        lines.append("")
    return lines
