"""Whole decode steps over long-tailed contexts (``benchmarks/spread_steps.py`` times them on a
GPU for every drafter kind): measured against what the shipped profile prices them at."""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from dspark_sim.cost.base import DraftWork, StepWork

BLOCK = {"block": 7, "chain": 3}  # the block sizes the profiler's whole steps run


def priced_s(cost, point: dict) -> float:
    """The profile's price of one point's step: target, drafter and the host between (the
    serving loop's scheduling gap apart: the whole-step timer does not hold it)."""
    reqs, ctx = point["reqs"], point["context_sum"]
    kind = point["kind"]
    draft = DraftWork(kind, reqs, BLOCK[kind], ctx) if kind in BLOCK else None
    work = StepWork(reqs, round(point["verify_tokens"]), ctx, draft=draft, decode_max_context=point["context_max"],
                    running_reqs=reqs)
    parts = cost.breakdown(work)
    return sum(v for k, v in parts.items() if k != "sched_s")


def table(data: dict, gpu: str | None) -> list[str]:
    """Per kind and R: measured steps over the long-tailed draw and at its mean, and (``gpu``
    given) the shipped profile's price of each, relative to the measured step."""
    cost = None
    if gpu is not None:
        from dspark_sim.cost import ProfileCost
        from dspark_sim.cost.profile import load_profile, shipped_profile_path

        cost = ProfileCost(load_profile(shipped_profile_path(gpu, data["provenance"]["model"])))
    pts = {(p["kind"], p["reqs"], p["contexts"]): p for p in data["points"]}
    lines = ["| kind | R | context mean / longest | step ms (spread / at the mean) | spread over mean | "
             "drafter ms (spread / mean) | priced: spread / at the mean |", "|---|---|---|---|---|---|---|"]
    for kind, reqs in sorted({(k, r) for k, r, _ in pts}, key=lambda x: (x[0], x[1])):
        sp, un = pts.get((kind, reqs, "spread")), pts.get((kind, reqs, "uniform"))
        if sp is None or un is None:
            continue
        priced = "-"
        if cost is not None:
            priced = f"{priced_s(cost, sp) / sp['step_s'] - 1:+.1%} / {priced_s(cost, un) / un['step_s'] - 1:+.1%}"
        lines.append(f"| {kind} | {reqs} | {sp['context_sum'] / reqs:.0f} / {sp['context_max']} | "
                     f"{sp['step_s'] * 1e3:.2f} / {un['step_s'] * 1e3:.2f} | {sp['step_s'] / un['step_s'] - 1:+.1%} | "
                     f"{sp['draft_s'] * 1e3:.2f} / {un['draft_s'] * 1e3:.2f} | {priced} |")
    for f in data.get("failed", []):
        lines.append(f"| {f['kind']} | {f['reqs']} | {f['contexts']}: {f['error']} |||||")
    return lines


def block_text(data: dict, profile) -> str:
    """docs/profiles.md's block: the probe's steps priced by ``profile`` with and without its
    spread term (errors over the long-tailed points and over the rest), then the table."""
    from dspark_sim.cost import ProfileCost

    p = data["provenance"]
    costs = {"with": ProfileCost(profile),
             "without": ProfileCost(replace(profile, target=replace(profile.target, spread_ratio=0.0)))}
    head = (f"Whole decode steps as served (target, drafter and the host between, overlapped), measured "
            f"{p['date']} on {p['gpu']} ({p['gpu_uuid']}, a host the profile never saw; driver {p['driver']}, torch "
            f"{p['torch']}, triton {p['triton']}; tree {p['tree']}); {p['model']}, {p['weights']} weights, contexts "
            f"{p['contexts']}; median of {p['steps']} steps. Made by `python benchmarks/spread_steps.py --run` (the "
            "command in its docstring), `profiles/h200/validation/steps/spread_steps.json`; none of it is fitted on.")
    lines = ["| steps | spread term | points | median | p90 | max | mean signed |", "|---|---|---|---|---|---|---|"]
    for label in ("spread", "uniform"):
        pts = [q for q in data["points"] if q["contexts"] == label]
        for name, cost in costs.items():
            err = np.array([priced_s(cost, q) / q["step_s"] - 1.0 for q in pts])
            if err.size:
                a = np.abs(err)
                lines.append(f"| {'long-tailed' if label == 'spread' else 'at the mean'} | {name} | {err.size} | "
                             f"{np.median(a):.1%} | {np.percentile(a, 90):.1%} | {a.max():.1%} | {err.mean():+.1%} |")
    return "\n".join([head, "", *lines, "", *table(data, "h200")])
