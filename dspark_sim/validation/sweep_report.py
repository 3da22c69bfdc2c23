"""The load sweeps against the decoder: errors at every load level, which way they lean, and
whether the simulator picks the decoder's best method at each load (docs/validation_sweeps.md).

Every sweep case the decoder served is simulated on exactly its requests
(:func:`~.fidelity.compare_cases`); the rows are grouped by load level (all families,
batchings and methods at that multiple of saturation) and each level's median, p90 and mean
signed error are held against :data:`LEVEL_GOALS` and :data:`SIGNED_GOAL`. At each (family,
batching, level) the best method, real and simulated, is the one with the lowest mean
end-to-end latency (and, apart, the highest output throughput); they must agree wherever the
real margin exceeds :data:`MARGIN`. Decoder runs come as directories or as the ``.tgz``
archives a device call returns (``fidelity.py run --archive``), unpacked into a temporary copy
of their visit (notes and SPS table beside them).
"""
from __future__ import annotations

import shutil
import tarfile
import tempfile
from pathlib import Path

import numpy as np

from dspark_sim.catalog import get_gpu
from dspark_sim.cost import get_cost_model
from dspark_sim.metrics.record import read_steps
from dspark_sim.validation.cases import GPU, MODEL, case_speculation
from dspark_sim.validation.fidelity import compare_cases
from dspark_sim.validation.lockstep import STEP_COLUMNS, composition
from dspark_sim.validation.reads import first_reads, step_reads
from dspark_sim.validation.spread import KEYS as CARRIED, STEP, carry, host_to_host, uniform_scale
from dspark_sim.validation.step_prices import attribution
from dspark_sim.validation.sweeps import LEVELS, level_of

LEVEL_GOALS = {"output_throughput": (0.03, 0.06), "p50_tpot_ms": (0.05, 0.10), "mean_ttft_ms": (0.10, 0.20)}
SIGNED_GOAL = 0.02
MARGIN = 0.03
SHOWN = ("output_throughput", "p50_tpot_ms", "p99_tpot_ms", "mean_ttft_ms", "p99_ttft_ms", "mean_accept_length")
BEST_BY = {"mean_e2el_ms": min, "output_throughput": max}


def unpack(visit: Path, into: Path) -> Path:
    """A visit's decoder runs as one directory under ``into``: its case directories, and those
    of every ``*.tgz`` in it (archives of ``fidelity.py run``: one top folder of cases), beside
    its ``notes.json`` and ``sps_dspark.json``."""
    out = into / visit.name
    out.mkdir(parents=True)
    for item in sorted(visit.iterdir()):
        if item.is_dir() or item.name in ("notes.json", "sps_dspark.json"):
            (shutil.copytree if item.is_dir() else shutil.copy)(item, out / item.name)
        elif item.name.startswith("sweep") and item.name.endswith(".tgz"):
            with tarfile.open(item) as tar:
                tar.extractall(into / "unpacked", filter="data")
            for top in (into / "unpacked").iterdir():
                for case in top.iterdir():
                    if case.is_dir() and not (out / case.name).exists():
                        shutil.move(str(case), out / case.name)
                    elif case.name == "sps_dspark.json" and not (out / case.name).exists():
                        shutil.move(str(case), out / case.name)
            shutil.rmtree(into / "unpacked")
    return out


def sweep_rows(cases_dir: Path, visits: list[Path], scaled: bool = False) -> tuple[list[dict], dict]:
    """Every sweep case of ``visits`` (the first holding it wins) compared with the simulator,
    each row with its family, level and batching; and the provenance of the first run.
    ``scaled``: each case simulated again with every step time ``x (1 + STEP)``, its metrics
    in ``r["scaled"]`` (:func:`.spread.carry`)."""
    import json

    with tempfile.TemporaryDirectory() as tmp:
        roots = [unpack(Path(v), Path(tmp) / f"v{i}") for i, v in enumerate(visits)]
        rows = compare_cases(cases_dir, roots, Path(tmp) / "out", quiet=True, plots=False)
        if scaled:
            again = {r["case"]: r for r in compare_cases(cases_dir, roots, Path(tmp) / "scaled", quiet=True,
                                                         plots=False, cost_scale=1.0 + STEP)}
            for r in rows:
                r["scaled"] = {k: m["sim"] for k, m in again[r["case"]]["metrics"].items() if k in CARRIED}
        cost = get_cost_model(get_gpu(GPU).name, MODEL, warn=False)
        for r in rows:
            runs = Path(tmp) / "out" / "runs" / r["case"]
            r["composition"] = {side: composition(read_steps(runs / side / "steps.csv", STEP_COLUMNS))
                                for side in ("real", "sim")}
            spec = case_speculation(r["method"])
            r["step_prices"] = attribution(runs / "real" / "steps.csv", runs / "sim" / "steps.csv", spec, cost)
            graph = int(cost.profile.target.prefill_graph_tokens)
            r["first_reads"] = {side: first_reads(runs / side, graph) for side in ("real", "sim")}
            if (every := step_reads(runs / "real", graph)) is not None:  # the decoder timed every read
                r["step_reads"] = {"real": every, "sim": step_reads(runs / "sim", graph)}
        metas = sorted(roots[0].glob("*/meta.json"))
        prov = json.loads(metas[0].read_text())["provenance"] if metas else {}
    for r in rows:
        r["family"], r["level"], r["batching"] = level_of(r["trace"])
    return rows, prov


def level_summary(rows: list[dict]) -> dict:
    """Per level: for every metric shown, the median, p90 and max absolute error and the mean
    signed error over its points; and whether the level meets the goals."""
    out = {}
    for level in LEVELS:
        at = [r for r in rows if r["level"] == level]
        if not at:
            continue
        metrics = {}
        for key in SHOWN + ("mean_e2el_ms",):
            signed = np.array([r["metrics"][key]["rel_error"] for r in at if key in r["metrics"]], dtype=float)
            signed = signed[~np.isnan(signed)]
            if signed.size:
                metrics[key] = {"median": float(np.median(np.abs(signed))), "p90": float(np.percentile(np.abs(signed), 90)),
                                "max": float(np.abs(signed).max()), "mean_signed": float(signed.mean()),
                                "points": int(signed.size)}
        met = all(k in metrics and metrics[k]["median"] <= g[0] and metrics[k]["p90"] <= g[1]
                  and abs(metrics[k]["mean_signed"]) <= SIGNED_GOAL for k, g in LEVEL_GOALS.items())
        out[str(level)] = {"points": len(at), "metrics": metrics, "met": met}
    return out


def best_methods(rows: list[dict]) -> list[dict]:
    """At each (family, batching, level): the best method real and simulated by each of
    :data:`BEST_BY`, the real margin of the best over the next, and whether they agree."""
    groups: dict = {}
    for r in rows:
        groups.setdefault((r["family"], r["batching"], r["level"]), []).append(r)
    out = []
    for (fam, batching, level), group in sorted(groups.items()):
        for key, pick in BEST_BY.items():
            have = [r for r in group if key in r["metrics"]]
            if len(have) < 2:
                continue
            real = sorted(have, key=lambda r: r["metrics"][key]["real"], reverse=pick is max)
            sim = pick(have, key=lambda r: r["metrics"][key]["sim"])
            a, b = real[0]["metrics"][key]["real"], real[1]["metrics"][key]["real"]
            margin = abs(a - b) / min(a, b) if min(a, b) > 0 else float("nan")
            out.append({"family": fam, "batching": batching, "level": level, "by": key, "real": real[0]["method"],
                        "sim": sim["method"], "margin": margin, "agree": real[0]["method"] == sim["method"],
                        "decides": bool(margin > MARGIN)})
    return out


def report(cases_dir: Path, visits: list[Path], replicate: list[Path] | None = None) -> dict:
    """What ``sweep_errors.json`` holds: provenance, the level summaries, the best methods and
    every case (and the same for a replicate's visits)."""
    def part(paths, scaled=False):
        rows, prov = sweep_rows(cases_dir, paths, scaled)
        return {"visits": [Path(v).name for v in paths], "provenance": prov, "levels": level_summary(rows),
                "best": best_methods(rows), "cases": rows}
    out = {"goals": {"levels": LEVEL_GOALS, "mean_signed": SIGNED_GOAL, "best_margin": MARGIN},
           **part(visits, scaled=True)}
    out["carry"] = carry(out["cases"])
    if replicate:
        out["replicate"] = part(replicate)
        out["host_to_host"] = host_to_host(out["cases"], out["replicate"]["cases"])
        out["uniform_scale"] = uniform_scale(out["cases"], out["replicate"]["cases"], SIGNED_GOAL)
    return out
