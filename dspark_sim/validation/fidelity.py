"""The fidelity comparison: every case a decoder served, simulated on exactly its requests.

For each case (``cases.py``) with a decoder run, the simulator replays the requests the
decoder served (rebuilt from its ``requests.csv``) with the shipped profile; both runs,
the scenario and (``plots``) the per-request plot land under ``out_root/runs/<case>/``,
and :func:`error_report` gives what ``errors.json`` holds: the relative error of every
metric per case, their median, p90 and max, and each served step priced by the profile.
"""
from __future__ import annotations

import json
import math
import shutil
import tempfile
from pathlib import Path

import numpy as np
import yaml

from dspark_sim.catalog import get_gpu
from dspark_sim.errors import InputError
from dspark_sim.cost import get_cost_model
from dspark_sim.metrics.outdir import atomic_dir
from dspark_sim.metrics.record import read_requests
from dspark_sim.run import run_scenario
from dspark_sim.scenario import load_scenario
from dspark_sim.validation.cases import GPU, MODEL, case_speculation, write_trace
from dspark_sim.validation.replay import step_replay
from dspark_sim.validation.validate import compare_metrics, plot, run_metrics
from dspark_sim.workload import read_trace, write_mooncake
from dspark_sim.workload.chunk import RequestChunk

KEYS = ("output_throughput", "p50_tpot_ms", "mean_tpot_ms", "p99_tpot_ms", "mean_ttft_ms", "p50_ttft_ms",
        "p99_ttft_ms",
        "mean_e2el_ms", "mean_itl_ms", "mean_accept_length", "mean_verify_tokens_per_step")
GOALS = {"output_throughput": 0.05, "p50_tpot_ms": 0.05, "p99_tpot_ms": 0.10, "mean_ttft_ms": 0.10,
         "p50_ttft_ms": 0.10, "p99_ttft_ms": 0.10}
# Goals on the p90 over cases: twice the median's, so that no metric meets its goal on the
# median while a tenth of the cases are far off.
P90_GOALS = {key: 2 * goal for key, goal in GOALS.items()}


def trace_of_run(run_dir: Path, path: Path, source: Path | None = None) -> int:
    """The trace a decoder run served, rebuilt from its ``requests.csv`` (arrival, prompt and
    output tokens of every request, in id order); returns the number of requests. With
    ``source`` (the case's Mooncake trace, whose request ``i`` the decoder served as id ``i``)
    it is a Mooncake trace keeping each request's prefix ``hash_ids``."""
    req = read_requests(run_dir / "requests.csv", ("request_id", "arrival_s", "prompt_tokens", "output_tokens"))
    order = np.argsort(req.request_id, kind="stable")
    arrival, prompt = req.arrival_s[order], req.prompt_tokens[order].astype(np.int64)
    output = req.output_tokens[order].astype(np.int64)
    if source is None:
        write_trace(path, arrival, prompt, output)
        return int(order.size)
    ids = [h for c in read_trace(source, fmt="mooncake") for h in c.hash_ids]
    rid = req.request_id[order].astype(np.int64)
    if rid.size and (rid.min() < 0 or rid.max() >= len(ids)):
        raise InputError(run_dir / "requests.csv", "request_id", int(rid.max()), f"past the {len(ids)} requests of {source}")
    write_mooncake(path, [RequestChunk(arrival, prompt, output, [ids[i] for i in rid.tolist()])])
    return int(order.size)


def compare_cases(cases_dir: Path, real_roots: list[Path], out_root: Path, *, quiet: bool = False,
                  plots: bool = True, cost_scale: float = 1.0) -> list[dict]:
    """Simulate every case of ``cases_dir`` that has a decoder run (the first of ``real_roots``
    holding it), on the exact requests that run served; both runs, plots and scenario under
    ``out_root/runs/<case>``. One row per case: its metrics' errors and its step replay.
    ``cost_scale``: every profiled step time times this (a sensitivity, :mod:`.spread`)."""
    cost = get_cost_model(get_gpu(GPU).name, MODEL, warn=False)
    rows = []
    for path in sorted(cases_dir.glob("*__*.yaml")):
        case = path.stem
        real_dir = next((r / case for r in real_roots if (r / case / "requests.csv").is_file()), None)
        if real_dir is None:
            if not quiet:
                print(f"{case}: no real run", flush=True)
            continue
        with atomic_dir(out_root / "runs" / case) as tmp:
            metrics, prefix = _simulate_case(path, real_dir, cases_dir, tmp, plots, cost_scale)
        rows.append(_row(case, real_dir, metrics, cost))
        if prefix is not None:
            rows[-1]["prefix_hit"] = prefix
        if not quiet:
            print(f"{case:<22}" + "".join(f"{k.replace('_ms', '')[:14]:>16}{rows[-1]['metrics'][k]['rel_error']:>+7.1%}"
                                         for k in ("output_throughput", "p50_tpot_ms", "mean_ttft_ms")
                                         if k in rows[-1]["metrics"]), flush=True)
    return rows


def _simulate_case(path: Path, real_dir: Path, cases_dir: Path, tmp: Path, plots: bool, cost_scale: float = 1.0):
    """The case simulated into ``tmp/sim`` beside a copy of the real run: ``(the metrics' errors,
    the share of prompt tokens read from the prefix cache {"real", "sim"} or None for a trace
    without prefixes)``."""
    shutil.copytree(real_dir, tmp / "real")
    scenario = yaml.safe_load(path.read_text())
    if scenario["workload"].get("format") == "mooncake":  # prefixes: the hash ids travel with the requests
        trace_of_run(real_dir, tmp / "trace.jsonl", cases_dir / scenario["workload"]["trace"])
        scenario["workload"]["trace"] = "trace.jsonl"
    else:
        trace_of_run(real_dir, tmp / "trace.csv")
        scenario["workload"]["trace"] = "trace.csv"
    if cost_scale != 1.0:
        scenario["cost_scale"] = cost_scale
    (tmp / "scenario.yaml").write_text(yaml.safe_dump(scenario, sort_keys=False))
    # the table the decoder scheduled from (kept with its runs), else the case's
    table = real_dir.parent / "sps_dspark.json"
    shutil.copy(table if table.is_file() else cases_dir / "sps_dspark.json", tmp / "sps_dspark.json")
    run_scenario(load_scenario(tmp / "scenario.yaml"), tmp / "sim", plots=False, show_progress=False)
    for name in list((tmp / "sim").iterdir()):
        if name.name not in ("requests.csv", "steps.csv", "summary.json"):
            shutil.rmtree(name) if name.is_dir() else name.unlink()
    if plots:
        plot(tmp / "sim", tmp / "real", tmp)
    prefix = None
    if scenario["workload"].get("format") == "mooncake":
        prefix = {side: _hit_rate(tmp / side / "requests.csv") for side in ("real", "sim")}
    return compare_metrics(run_metrics(tmp / "sim"), run_metrics(tmp / "real")), prefix


def _hit_rate(requests: Path) -> float:
    """Prompt tokens read from the prefix cache over all prompt tokens of a run."""
    req = read_requests(requests, ("prompt_tokens", "cached_tokens"))
    return float(req.cached_tokens.sum() / max(req.prompt_tokens.sum(), 1))


def _row(case: str, real_dir: Path, metrics: list[dict], cost) -> dict:
    meta = json.loads((real_dir / "meta.json").read_text()) if (real_dir / "meta.json").is_file() else {}
    notes_path = real_dir.parent / "notes.json"
    notes = json.loads(notes_path.read_text()) if notes_path.is_file() else {}
    trace, method = case.split("__")
    spec = case_speculation(method)
    return {"case": case, "trace": trace, "method": method, "real_run": str(real_dir.parent.name),
            "current_decoder": bool(notes.get("current_decoder", True)),
            "requests": meta.get("requests"), "passes": meta.get("passes", 1),
            "graphs_captured": meta.get("graphs_captured_during_case"),
            "compiles": meta.get("triton_compiles_during_case"),
            "metrics": {m["metric"]: m for m in metrics if m["metric"] in KEYS},
            "step_replay": step_replay(real_dir, spec, cost)}


def summarise(rows: list[dict]) -> dict:
    """Median, p90 and max absolute relative error of every metric over the cases, and the mean
    signed error beside them (whether the simulator leans one way)."""
    out = {}
    for key in KEYS:
        signed = np.array([r["metrics"][key]["rel_error"] for r in rows
                           if key in r["metrics"] and not math.isnan(r["metrics"][key]["rel_error"])])
        if signed.size:
            errs = np.abs(signed)
            out[key] = {"median": float(np.median(errs)), "p90": float(np.percentile(errs, 90)),
                        "max": float(np.max(errs)), "mean_signed": float(signed.mean()), "cases": int(signed.size),
                        "goal": GOALS.get(key)}
    return out


def error_report(cases_dir: Path, real_roots: list[Path], out_root: Path, *, replicate: Path | None = None,
                 plots: bool = True) -> dict:
    """What ``errors.json`` holds: the decoder runs' provenance, the error summary and every case,
    and (``replicate``: a run on another machine) the same for that run."""
    rows = compare_cases(cases_dir, real_roots, out_root, plots=plots)
    metas = sorted(Path(real_roots[0]).glob("*/meta.json"))
    prov = json.loads(metas[0].read_text())["provenance"] if metas else {}
    out = {"provenance": prov, "summary": summarise(rows), "cases": rows}
    if replicate is not None:
        with tempfile.TemporaryDirectory() as tmp:
            rep = compare_cases(cases_dir, [Path(replicate)], Path(tmp), quiet=True, plots=plots)
        out["replicate"] = {"run": Path(replicate).name, "summary": summarise(rep), "cases": rep}
    return out
