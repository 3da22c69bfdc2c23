"""A projected profile against the profiler's own points on the GPU it was projected to.

A profile of a GPU no one here measured is the measured GPU's carried over by spec-sheet
ratios (:func:`~dspark_sim.cost.projection.project_profile`). Where the profiler did run on
that GPU, its raw points say how far the projection lands: every verify and prefill point
priced by the projected target fit, every whole decode step by the target, drafter and host
terms, every serving-loop host time by the schedule term, each against its measured time.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from dspark_sim.catalog import get_gpu
from dspark_sim.cost.jsonio import read_json
from dspark_sim.cost.profile_format import Profile, check_grids, load_profile
from dspark_sim.cost.projection import project_profile
from dspark_sim.errors import InputError
from dspark_sim.profiling.fit import TargetModel
from dspark_sim.profiling.host import predict_steps
from dspark_sim.profiling.rows import canonical_rows, target_rows

SECTIONS = ("verify", "prefill", "step", "sched")


def priced_points(raw: dict, profile: Profile) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per section of ``raw`` it holds: (measured seconds, ``profile``'s price) of every point."""
    grids = check_grids(canonical_rows(raw))
    out: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    rows = target_rows(grids)
    priced = TargetModel(profile.target).predict(rows)
    for section in ("verify", "prefill"):
        at = rows.section == section
        if at.any():
            out[section] = (rows.step_s[at], np.asarray(priced)[at])
    steps = [r for r in grids.get("step", []) if r["kind"] in profile.host or r["kind"] == "none"]
    if steps:
        out["step"] = (np.array([r["step_s"] for r in steps]),
                       predict_steps(steps, profile.target, profile.draft, profile.host))
    sched = grids.get("sched", [])
    if sched and profile.schedule is not None:
        out["sched"] = (np.array([r["step_s"] for r in sched]),
                        np.array([profile.schedule.seconds(r["reqs"]) for r in sched]))
    return out


def summary(priced: dict[str, tuple[np.ndarray, np.ndarray]]) -> dict[str, dict]:
    """Per section: points, the median and p90 of |price / measured - 1|, and the median signed."""
    out = {}
    for section in SECTIONS:
        if section not in priced:
            continue
        measured, price = priced[section]
        err = price / measured - 1.0
        out[section] = {"points": int(err.size), "median": float(np.median(np.abs(err))),
                        "p90": float(np.percentile(np.abs(err), 90)), "median_signed": float(np.median(err))}
    return out


def table(results: list[dict]) -> list[str]:
    """Markdown rows: per model and GPU, each section's median / p90 / median signed error."""
    lines = ["| model | GPU (measured on) | projected from | " + " | ".join(
        f"{s}: median / p90 / median signed (points)" for s in SECTIONS) + " |", "|---|---|---|" + "---|" * len(SECTIONS)]
    for r in results:
        cells = [f"{c['median']:.1%} / {c['p90']:.1%} / {c['median_signed']:+.1%} ({c['points']})"
                 if (c := r["sections"].get(s)) else "-" for s in SECTIONS]
        lines.append(f"| {r['model']} | {r['gpu']} ({r['measured']}) | {r['source']} | " + " | ".join(cells) + " |")
    return lines


def check_all(profiles_dir, base: str = "h200") -> list[dict]:
    """Every raw file measured on a GPU other than ``base`` (``profiles/<gpu>/raw/raw_<model>.json``)
    against ``base``'s measured profile of the model projected to that GPU."""
    out = []
    for raw_path in sorted(Path(profiles_dir).glob("*/raw/raw_*.json")):
        gpu = raw_path.parent.parent.name
        source = Path(profiles_dir) / base / f"{raw_path.stem.removeprefix('raw_')}.json"
        if gpu == base or not source.is_file():
            continue
        raw = read_json(raw_path)  # (a file that cannot be read: one line naming it)
        if not isinstance(raw, dict):
            raise InputError(raw_path, "(top level)", type(raw).__name__, "must be an object of the profiler's grids")
        base_profile = load_profile(source)
        projected = project_profile(base_profile, get_gpu(gpu))
        prov = raw.get("provenance", {})
        out.append({"model": base_profile.model, "gpu": gpu, "source": projected.source,
                    "measured": f"{prov.get('gpu')}, {str(prov.get('date'))[:10]}, GPU " + " and ".join(dict.fromkeys(
                        str(p.get("gpu_uuid"))[:12] for p in [prov, *prov.get("merged_from", [])])),
                    "raw": str(raw_path.relative_to(profiles_dir)),
                    "sections": summary(priced_points(raw, projected))})
    return out


def block_text(profiles_dir) -> str:
    """docs/profiles.md's projection-check block."""
    results = check_all(profiles_dir)
    if not results:
        return ("Not measured yet: no profiler run on a GPU other than the H200 (`GPU=h100 bash "
                "benchmarks/h200_rank_visit.sh ...` writes `profiles/h100/raw/raw_<model>.json`).")
    return "\n".join(["Made from `profiles/<gpu>/raw/raw_<model>.json` (measured there) and "
                      "`profiles/h200/<model>.json` projected to that GPU. err = projected / measured - 1.", ""]
                     + table(results))
