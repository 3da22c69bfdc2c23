"""Capacity against the real decoder: the highest Poisson rate at which it meets an SLO, beside
``dspark-sim capacity``'s answer for the same scenario.

Two kinds of traffic (:data:`TRACES`: chat-like prompts and long prompts, the load sweeps'
request mixes, ``mixed`` batching as the engines default), each with its SLO (p99 TPOT and
p99 TTFT, and the capacity command's queue bound) and a probe length: a probe serves the
scenario's ``num_requests`` requests, Poisson at a multiple of its rate, exactly as
``dspark-sim capacity`` probes it (:func:`~dspark_sim.capacity.search.probe_scenario`, the
same seeded draws), so both sides judge the same probes by the same rule
(:func:`~dspark_sim.capacity.search.judge_requests`).

:func:`write_cases` writes one scenario per (trace, method) and :data:`PLAN`: the simulator's
answer (:func:`predict`: ``capacity()``, one H200 at TP 1, with its interval) and the bracket
the decoder's search starts from. The search on the GPU is :mod:`.capacity_serve`;
:func:`page` sets both answers side by side.
"""
from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import yaml

from dspark_sim.validation.cases import CASE_METHODS, DEPLOYMENT, GPU, MODEL, case_speculation

PLAN = "plan.json"
RULE, MAX_QUEUE_MS = "p99", 5000.0  # the capacity command's --rule p99 and its default queue bound
PRECISION = 0.02


@dataclass(frozen=True, slots=True)
class CapTrace:
    """One kind of traffic and its SLO: prompts lognormal of mean ``prompt_mean`` (at most
    ``prompt_max``), outputs uniform 64..320, ``num_requests`` per probe at ``rate_per_s``
    (the search scales it), p99 TPOT within ``tpot_ms`` and p99 TTFT within ``ttft_ms``."""

    name: str
    prompt_mean: int
    prompt_max: int
    rate_per_s: float
    num_requests: int
    tpot_ms: float
    ttft_ms: float

    def scenario(self, method: str) -> dict:
        return {"name": f"{self.name}__{method}", "model": MODEL, "gpu": GPU, "seed": 0,
                "workload": {"synthetic": {
                    "num_requests": self.num_requests, "rate_per_s": self.rate_per_s,
                    "prompt_tokens": {"dist": "lognormal", "mean": self.prompt_mean, "sigma": 0.6, "min_tokens": 32,
                                      "max_tokens": self.prompt_max},
                    "output_tokens": {"dist": "uniform", "min_tokens": 64, "max_tokens": 320}}, "domain": "math"},
                "deployment": {**DEPLOYMENT, "batching": "mixed"},
                "speculation": CASE_METHODS[method],
                "slo": {"tpot_ms": self.tpot_ms, "ttft_ms": self.ttft_ms}}


# rates: the load sweeps' saturation estimates (sweeps.FAMILIES); probe lengths sized so that six
# searches of about five probes fit about 400 s of H200 time
TRACES = (CapTrace("cap-chat", 768, 6000, 38.0, 240, 25.0, 1000.0),
          CapTrace("cap-long", 4000, 8192, 8.8, 60, 40.0, 3000.0))


def slo_of(trace: CapTrace):
    from dspark_sim.slo import Slo

    return Slo(ttft_ms=trace.ttft_ms, tpot_ms=trace.tpot_ms, max_queue_ms=MAX_QUEUE_MS, rule=RULE)


def command(trace: CapTrace, cases_dir: Path, gpu: str = GPU) -> str:
    """The ``dspark-sim capacity`` command whose answer :func:`predict` gives (the scenario's path
    from the repository's root when it lies inside)."""
    root, path = Path(__file__).resolve().parents[2], (cases_dir / f"{trace.name}__dspark.yaml").resolve()
    shown = path.relative_to(root) if path.is_relative_to(root) else path
    return (f"dspark-sim capacity {shown} --gpus {gpu} --tp 1 "
            f"--methods {','.join(reversed(CASE_METHODS))} --rule {RULE} --slo-tpot-ms {trace.tpot_ms:g} "
            f"--slo-ttft-ms {trace.ttft_ms:g} --max-queue-ms {MAX_QUEUE_MS:g} "
            f"--max-requests {trace.num_requests} --precision {PRECISION:g}")


def write_cases(cases_dir: Path, sps_table: Path) -> dict:
    """One scenario per (trace, method) and the SPS table into ``cases_dir``, and :data:`PLAN`
    (:func:`predict` for every trace); returns the plan."""
    cases_dir.mkdir(parents=True, exist_ok=True)
    shutil.copy(sps_table, cases_dir / "sps_dspark.json")
    for trace in TRACES:
        for method in CASE_METHODS:
            (cases_dir / f"{trace.name}__{method}.yaml").write_text(
                yaml.safe_dump(trace.scenario(method), sort_keys=False))
    plan = {"what": "the simulator's capacity answer per trace and method (dspark-sim capacity), and where "
                    "the decoder's search starts (benchmarks/decoder_capacity.py)",
            "traces": {t.name: predict(t, cases_dir) for t in TRACES}}
    (cases_dir / PLAN).write_text(json.dumps(plan, indent=1) + "\n")
    return plan


def predict(trace: CapTrace, cases_dir: Path, gpu: str = GPU) -> dict:
    """``dspark-sim capacity``'s answer for ``trace`` (one ``gpu`` at TP 1; :func:`command`): the
    sustained rate and its interval per method, with the SLO, the probe length and the cost
    model's basis (measured or projected)."""
    from dspark_sim.capacity.plan import CapacitySettings, capacity
    from dspark_sim.scenario import load_scenario

    cfg = CapacitySettings(slo=slo_of(trace), gpus=(gpu,), methods=tuple(reversed(CASE_METHODS)), tps=(1,),
                           max_requests=trace.num_requests, precision=PRECISION)
    report = capacity(load_scenario(cases_dir / f"{trace.name}__dspark.yaml"), cfg)
    rows = {r["method"]: {"rate_rps": r["rate_per_replica_rps"], "interval_rps": r["rate_per_replica_rps_interval"],
                          "p99_tpot_ms": r["p99_tpot_ms"], "p99_ttft_ms": r["p99_ttft_ms"], "basis": r["basis"],
                          "caveats": (r.get("provenance") or {}).get("caveats", [])}
            for r in report["rows"]}
    return {"slo": report["slo"], "rule": report["rule"], "num_requests": trace.num_requests,
            "rate_per_s_at_x1": report["search_rate_rps_at_x1"], "command": command(trace, cases_dir, gpu), "sim": rows}


# -- the page: both answers side by side --------------------------------------------------
WITHIN = 0.05  # the goal: the predicted capacity within 5 % of the decoder's


def merge_runs(runs: list[dict]) -> dict:
    """Several processes' capacity JSONs (``run --out``) as one: every search keeps the
    provenance of the process that made it (later runs win per trace and method), and ``parts``
    says what each process was given and took."""
    results: dict = {}
    for run in runs:
        for trace, methods in run["results"].items():
            for method, res in methods.items():
                results.setdefault(trace, {})[method] = {**res, "provenance": _searched_by(res, run)}
    return {"what": runs[0]["what"], "provenance": runs[0]["provenance"], "precision": runs[0]["precision"],
            "parts": [part for run in runs for part in run.get("parts", [_part(run)])], "results": results}


def _part(run: dict) -> dict:
    return {**{k: run[k] for k in ("provenance", "budget_s", "wall_s") if k in run},
            "methods": sorted({m for methods in run["results"].values() for m in methods})}


def _searched_by(res: dict, run: dict) -> dict:
    """The provenance of the process that searched ``res`` (a merged run's entries carry theirs)."""
    return res.get("provenance", run["provenance"])


def _measured(runs: list[dict]) -> dict:
    """``{trace: {method: search}}`` of the runs' finished searches (later runs win), each with the
    provenance of the process that made it."""
    measured: dict = {}
    for run in runs:
        for trace, methods in run["results"].items():
            for method, res in methods.items():
                if "rate_rps" in res:
                    measured.setdefault(trace, {})[method] = {**res, "provenance": _searched_by(res, run)}
    return measured


def write_page(real: list[Path], cases_dir: Path, data_path: Path, page_path: Path, commit: str,
               replicate: list[Path] | None = None, replicate_gpu: str = GPU) -> dict:
    """``data_path`` (JSON) and ``page_path`` (Markdown, :func:`page_text`): the decoder's capacity
    from the runs in ``real`` (later files win per trace and method) beside the simulator's,
    re-made now (:func:`predict`) at ``commit``; and, from ``replicate``, the decoder's capacity on
    another host, a ``replicate_gpu`` (the catalog's name; the runs' GPU must be one), beside the
    simulator's answer for that GPU and beside the first host's."""
    import tempfile

    runs = [json.loads(Path(r).read_text()) for r in real]
    measured = _measured(runs)
    sims = {t.name: predict(t, cases_dir) for t in TRACES if t.name in measured}
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        records: dict[str, Path] = {}
        for i, r in enumerate(real):  # later files win, as for the searches
            records |= probe_records(Path(r).parent / "capacity_runs.tgz", Path(tmp) / str(i))
        for trace, methods in measured.items():
            for method in CASE_METHODS:
                if method in methods:
                    rows.append(capacity_row(trace, method, methods[method], sims[trace]["sim"][method]))
                    rows[-1]["probe_pairs"] = probe_pairs(trace, method, methods[method], cases_dir, records)
    made_by = "python benchmarks/decoder_capacity.py page --real " + " ".join(str(r) for r in real)
    data = {"made_by": made_by, "simulator_commit": commit, "traces": sims, "rows": rows,
            "real": [part for run in runs for part in run.get("parts", [_part(run)])]}
    if replicate:
        data["made_by"] += " --replicate " + " ".join(str(r) for r in replicate) + \
            (f" --replicate-gpu {replicate_gpu}" if replicate_gpu != GPU else "")
        data["replicate"] = replicate_section(replicate, replicate_gpu, cases_dir, rows, sims)
    data_path.write_text(json.dumps(data, indent=1, default=float) + "\n")
    page_path.write_text(page_text(data))
    return data


def replicate_section(paths: list[Path], gpu: str, cases_dir: Path, rows: list[dict], sims: dict) -> dict:
    """The page's second host: its searches beside the simulator's answers for ``gpu`` (the first
    host's when it is the same GPU) and the first host's capacity of each trace and method."""
    from dspark_sim.errors import InputError

    other = [json.loads(Path(p).read_text()) for p in paths]
    for path, run in zip(paths, other):
        name = str(run["provenance"].get("gpu"))
        if gpu.lower() not in name.lower():
            raise InputError(path, "provenance.gpu", name, f"was not served on the --replicate-gpu {gpu}")
    measured = _measured(other)
    if gpu != GPU:
        sims = {t.name: predict(t, cases_dir, gpu) for t in TRACES if t.name in measured}
    first = {(r["trace"], r["method"]): r["real_rps"] for r in rows}
    out = {"gpu": gpu, "traces": {t: {k: v for k, v in s.items() if k != "sim"} | {"caveats": list(dict.fromkeys(
               c for r in s["sim"].values() for c in r.get("caveats", [])))} for t, s in sims.items()},
           "rows": [], "real": [part for run in other for part in run.get("parts", [_part(run)])]}
    for trace, methods in measured.items():
        for method in CASE_METHODS:
            if method in methods and trace in sims:
                row = capacity_row(trace, method, methods[method], sims[trace]["sim"][method])
                base = first.get((trace, method))
                row["host_to_host"] = row["real_rps"] / base - 1.0 if base else None
                out["rows"].append(row)
    return out


def probe_pairs(trace: str, method: str, real: dict, cases_dir: Path,
                records: dict[str, Path] | None = None) -> list[dict]:
    """Each of the decoder's probes of ``trace`` under ``method`` beside the simulator's probe at
    the same multiplier (the same seeded requests): p99 TPOT and TTFT and the verdict of each; and,
    where ``records`` (run directory by name, :func:`probe_records`) holds the probe's run record,
    its steps priced by the profile against their measured busy time (``replay_busy_error``)."""
    from dspark_sim.capacity.search import Evaluator
    from dspark_sim.scenario import load_scenario

    cap = next(t for t in TRACES if t.name == trace)
    evaluate = Evaluator(load_scenario(cases_dir / f"{trace}__{method}.yaml"), slo_of(cap), real["rate_per_s_at_x1"])
    out = []
    for p in sorted(real.get("probes", ()), key=lambda p: p["multiplier"]):
        sim = evaluate(p["multiplier"])
        out.append({"rate_rps": p["rate_rps"],
                    "real": {k: p[k] for k in ("passed", "p99_tpot_ms", "p99_ttft_ms")},
                    "sim": {"passed": sim.passed, "p99_tpot_ms": sim.p99_tpot_ms, "p99_ttft_ms": sim.p99_ttft_ms}})
        run = (records or {}).get(f"{trace}__{method}__x{p['multiplier']:.4f}")
        if run is not None:
            out[-1]["replay_busy_error"] = replay_busy_error(run / "steps.csv", method)
    return out


def probe_records(archive: Path, into: Path) -> dict[str, Path]:
    """The probes' run records in ``archive`` (the visit's ``capacity_runs.tgz``, one directory a
    probe, at any depth) unpacked under ``into``: directory by name; empty without the archive."""
    import tarfile

    if not archive.is_file():
        return {}
    with tarfile.open(archive) as tar:
        tar.extractall(into, filter="data")
    return {steps.parent.name: steps.parent for steps in sorted(into.rglob("steps.csv"))}


def replay_busy_error(steps: Path, method: str, gpu: str = GPU) -> float:
    """The decoder's steps of one run priced by the shipped profile (their work as recorded, at
    their prefill duty) over their measured busy seconds, less 1."""
    from dspark_sim.catalog import get_gpu
    from dspark_sim.cost import get_cost_model
    from dspark_sim.validation.step_prices import priced_steps

    spec = case_speculation(method)
    real, priced, _, _ = priced_steps(steps, spec, get_cost_model(get_gpu(gpu).name, MODEL, warn=False))
    busy = float(real.step_s.sum())
    return float(priced.sum() / busy - 1.0) if busy > 0 else float("nan")


def capacity_row(trace: str, method: str, real: dict, sim: dict) -> dict:
    rate, fail, interval = real["rate_rps"], real.get("failed_rate_rps"), sim["interval_rps"]
    err = (sim["rate_rps"] - rate) / rate if rate else None
    return {"trace": trace, "method": method, "real_rps": rate, "real_failed_rps": fail,
            "resolution": real.get("resolution"), "probes": len(real.get("probes", ())),
            "sim_rps": sim["rate_rps"], "sim_interval_rps": interval, "rel_error": err,
            "within": err is not None and abs(err) <= WITHIN,
            "covered": bool(interval) and rate > 0 and interval[0] <= rate <= interval[1],
            "gpu": real["provenance"].get("gpu"), "gpu_uuid": real["provenance"].get("gpu_uuid"),
            "decoder_commit": real["provenance"].get("decoder_commit")}


def page_text(data: dict) -> str:
    """docs/bench/decoder_capacity.md from its data (:func:`write_page`)."""
    prov = data["real"][0]["provenance"] if data["real"] else {}
    lines = ["# The decoder's capacity against `dspark-sim capacity` (H200)", "",
             f"Made by `{data['made_by']}` (simulator at {data['simulator_commit']}). Real: the decoder "
             f"(Qwen3-8B shape, random bf16 weights, synthetic acceptance) on {prov.get('gpu')} "
             f"({prov.get('gpu_uuid')}), driver {prov.get('driver')}, torch {prov.get('torch')}, triton "
             f"{prov.get('triton')}, {str(prov.get('date'))[:10]}, decoder commit {prov.get('decoder_commit')}; "
             "`benchmarks/decoder_capacity.py run` (`bash benchmarks/h200_sweep_visit.sh capacity`). Capacity: "
             "the highest Poisson arrival rate whose probe (the scenario's requests at that rate, the same "
             "seeded draws on both sides) meets the SLO by the capacity command's p99 rule; the decoder's is "
             "found by bisection from the simulator's answer, and the first failing rate above it bounds it "
             "(resolution = failing / passing - 1). Simulated: the command each trace names, one H200 at TP 1, "
             f"with its interval (the profile's error sources at their corners). Goal: within {WITHIN:.0%}, "
             "and the interval covers the decoder's.", ""]
    for name, t in data["traces"].items():
        lines.append(f"- `{name}`: {t['rule']}, {t['num_requests']} requests a probe; `{t['command']}`")
    lines += [""] + _table(data["rows"])
    lines += ["", "Each of the decoder's probes beside the simulator's at the same rate (the same seeded requests): "
              "p99 TPOT and p99 TTFT in ms, and whether the probe meets the SLO. Near the SLO a probe's p99 of a "
              "few hundred requests is a handful of requests' latencies: it need not grow with the rate from one "
              "probe to the next, on either side, and the bisection stops wherever it first crosses. The last "
              "column prices the decoder's own steps of the probe (their work as its run record has it, "
              "`capacity_runs.tgz`) by the shipped profile against the seconds they took: where it is "
              "negative, the profile prices this host's steps under their time, and the simulator's capacity "
              "comes out high by as much again as the queue near capacity carries it.", "",
              "| trace | method | req/s | decoder p99 TPOT / TTFT (meets) | simulator p99 TPOT / TTFT (meets) | "
              "p99 TPOT err | decoder's steps priced by the profile: busy time err |", "|---|---|---|---|---|---|---|"]
    for r in data["rows"]:
        for pp in r.get("probe_pairs", ()):
            real, sim = pp["real"], pp["sim"]
            err = f"{sim['p99_tpot_ms'] / real['p99_tpot_ms'] - 1:+.1%}" \
                if sim["p99_tpot_ms"] and real["p99_tpot_ms"] else "-"
            lines.append(f"| {r['trace']} | {r['method']} | {pp['rate_rps']:.2f} | " + " | ".join(
                f"{_ms(side['p99_tpot_ms'])} / {_ms(side['p99_ttft_ms'])} ({'yes' if side['passed'] else 'no'})"
                for side in (real, sim)) + f" | {err} | " + (
                f"{pp['replay_busy_error']:+.1%}" if "replay_busy_error" in pp else "-") + " |")
    if rep := data.get("replicate"):
        rp = rep["real"][0]["provenance"] if rep["real"] else {}
        same = rep.get("gpu", GPU) == GPU
        lines += ["", f"## The same on {'a second H200' if same else 'another GPU'}: {rp.get('gpu')} "
                  f"({rp.get('gpu_uuid')})", "",
                  f"The decoder's capacity searched the same way on another host, {str(rp.get('date'))[:10]}, decoder "
                  f"commit {rp.get('decoder_commit')}, beside "
                  + ("the same simulated answers" if same else
                     f"the simulator's answers for the {rep['gpu']} (" + "; ".join(
                         f"`{t['command']}`" for t in rep["traces"].values()) + "; provenance: " + "; ".join(
                         dict.fromkeys(c for t in rep["traces"].values() for c in t["caveats"])) + ")")
                  + "; the last column is this host's capacity over the first host's.", ""] \
            + _table(rep["rows"], host_to_host=True)
    return "\n".join(lines) + "\n"


def _table(rows: list[dict], host_to_host: bool = False) -> list[str]:
    """The capacity table's lines: each trace and method's decoder and simulated capacity."""
    lines = ["| trace | method | decoder req/s (fails at, resolution, probes) | simulator req/s | interval | "
             "error | within 5 % | covered |" + (" host / first host |" if host_to_host else ""),
             "|---|---|---|---|---|---|---|---|" + ("---|" if host_to_host else "")]
    for r in rows:
        fail = f"{r['real_failed_rps']:.2f}" if r["real_failed_rps"] else "-"
        res = f"{r['resolution']:.1%}" if r["resolution"] is not None else "-"
        iv = f"{r['sim_interval_rps'][0]:.2f}-{r['sim_interval_rps'][1]:.2f}" if r["sim_interval_rps"] else "-"
        err = f"{r['rel_error']:+.1%}" if r["rel_error"] is not None else "-"
        hh = "" if not host_to_host else \
            f" {r['host_to_host']:+.1%} |" if r.get("host_to_host") is not None else " - |"
        lines.append(f"| {r['trace']} | {r['method']} | {r['real_rps']:.2f} ({fail}, {res}, {r['probes']}) | "
                     f"{r['sim_rps']:.2f} | {iv} | {err} | {'yes' if r['within'] else 'no'} | "
                     f"{'yes' if r['covered'] else 'no'} |" + hh)
    return lines


def _ms(x) -> str:
    return "-" if x is None else f"{x:,.1f}"
