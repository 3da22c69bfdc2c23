"""Replay published measurements of production engines and tabulate the simulator's errors.

    python benchmarks/external.py calibrate   # fit each engine's host terms on the 'calibrate' cases
                                              #   -> dspark_sim/engine_terms.json
    python benchmarks/external.py check       # replay every case with the shipped terms
                                              #   -> docs/external.md, docs/external.json
    python benchmarks/external.py             # both
    python benchmarks/external.py report      # docs/external.md again from docs/external.json
                                              #   (after editing a case's gap)
    python benchmarks/external.py diagnose    # every case replayed again with one kind of host term
                                              #   left out at a time, and where its GPU time goes
                                              #   -> docs/external_diagnose.md, .json

``diagnose`` backs the gap texts: a case whose error moves within the target when a term is
left out is bound by that term; a case whose replay spends most of the engine's time in
prefill steps is bound by the GPU's prefill rate.

The cases, their sources and the approximations of each replay are in
``benchmarks/external_cases.yaml``. One set of host terms per engine serves every case;
the 'check' cases are never fitted on. GPU work comes from what the simulator has for
each GPU and model (a shipped profile, measured or projected, else the roofline); the
table names it per case.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from external_replay import (CASES, METRICS, case_scenario, load_cases, measured_keys,  # noqa: E402,F401
                             metric_key)

TERMS = ROOT / "dspark_sim" / "engine_terms.json"
DOC, DOC_JSON = ROOT / "docs" / "external.md", ROOT / "docs" / "external.json"
DEFAULTS_DOC = ROOT / "docs" / "engine_defaults.md"
DIAG_DOC, DIAG_JSON = ROOT / "docs" / "external_diagnose.md", ROOT / "docs" / "external_diagnose.json"
TARGETS = {"tpot": (0.10, 0.20), "throughput": (0.10, 0.20), "ttft": (0.20, 0.35)}  # median, p90 of |error|
SEEDS = (0, 1, 2)


def calibrate(cases: list[dict]) -> dict:
    """Each engine's host terms fitted on its 'calibrate' cases (none: no terms)."""
    from dspark_sim.engines import ENGINES, EngineTerms
    from dspark_sim.profiling.engine_fit import fit_replay_terms

    out = {}
    for engine in ENGINES[1:]:
        chosen = [c for c in cases if c["engine"] == engine and c["role"] == "calibrate" and not fits_gpu_work(c)]
        if not chosen:
            continue
        print(f"calibrating {engine} on {', '.join(c['id'] for c in chosen)}", file=sys.stderr)
        scenarios = [case_scenario(c) for c in chosen]
        def progress(done: int, most: int) -> None:
            print(f"\r  replayed {done} times (at most {most})", end="", file=sys.stderr, flush=True)

        fitted = [{k: v for k, v in c["measured"].items() if k in c.get("fit", c["measured"])} for c in chosen]
        terms = fit_replay_terms(scenarios, fitted, EngineTerms(), fit_step=True,
                                 progress=progress)
        print(file=sys.stderr)
        terms = terms.__class__(**{**terms.to_json_dict(), "source": (
            f"fitted by benchmarks/external.py calibrate on {', '.join(c['id'] for c in chosen)} "
            f"(benchmarks/external_cases.yaml)")})
        out[engine] = {"terms": terms.to_json_dict(), "fitted_from": [c["id"] for c in chosen]}
    doc = {"generated_by": "python benchmarks/external.py calibrate", "engines": out}
    work = calibrate_gpu_work(cases, out)
    if work is not None:
        doc["gpu_work"] = work.to_json_dict()
    return doc


def fits_gpu_work(case: dict) -> bool:
    """Whether ``case``'s source calibrates the engines' MoE roofline (``fits: gpu_work``)."""
    return load_cases()[0][case["source"]].get("fits") == "gpu_work"


def calibrate_gpu_work(cases: list[dict], engines: dict):
    """The engines' MoE roofline fitted on the 'calibrate' cases whose source calibrates it, each
    replayed under its engine's host terms just fitted (``engines``); None without such cases."""
    from dspark_sim.engines import EngineTerms, GpuWork
    from dspark_sim.profiling.engine_fit import with_terms
    from dspark_sim.profiling.gpu_work_fit import KINDS, fit_gpu_work

    chosen = [c for c in cases if c["role"] == "calibrate" and fits_gpu_work(c)]
    if not chosen:
        return None
    print(f"fitting the engines' MoE roofline on {len(chosen)} cases", file=sys.stderr)
    scenarios = []
    for c in chosen:
        scenario = case_scenario(c)
        terms = engines.get(c["engine"], {}).get("terms")
        scenarios.append(with_terms(scenario, EngineTerms.from_json_dict(terms) if terms else EngineTerms()))
    start = GpuWork(tuple((k, 1e-4) for k in KINDS), tuple((k, 1e-3) for k in KINDS), 0.8)
    calls = [0]

    def progress(_work) -> None:
        calls[0] += 1
        print(f"\r  replayed the cases {calls[0]} times", end="", file=sys.stderr, flush=True)

    work = fit_gpu_work(scenarios, [c["measured"] for c in chosen], start, progress)
    print(file=sys.stderr)
    return work


def check_case(case: dict, seeds=SEEDS) -> dict:
    """One case replayed under the shipped terms: measured, predicted (median over seeds), errors."""
    from dspark_sim.cost import scenario_cost
    from dspark_sim.profiling.engine_fit import replay

    warnings.simplefilter("ignore", UserWarning)
    started = time.perf_counter()
    preds = [replay(case_scenario(case, seed)) for seed in seeds]
    scenario = case_scenario(case)
    engine = scenario.engine
    flags = ["overlap" if engine.overlapped else "no overlap"] + \
        ([f"{engine.multi_step} steps a schedule"] if engine.multi_step > 1 else [])
    row = {"id": case["id"], "source": case["source"], "engine": f"{engine.label} ({', '.join(flags)})",
           "role": case["role"],
           "model": case["model"], "gpu": case["gpu"], "tp": case["tp"],
           "cost": gpu_work_label(scenario_cost(scenario, warn=False).source, case["tp"]),
           "rejected": max(p["num_rejected"] for p in preds), "gap": case.get("gap", ""),
           "measured": {}, "predicted": {}, "error": {}, "seed_spread": {}}
    for name in METRICS:
        key = metric_key(case, name)
        values = np.array([p[key] for p in preds], dtype=float)
        row["predicted"][name] = float(np.median(values))
        row["seed_spread"][name] = float(np.ptp(values) / np.median(values)) if np.median(values) else None
        row.setdefault("stat", {})[name] = key.split("_")[0] if name != "throughput" else "total"
        measured = case["measured"].get(key)
        if measured is not None:
            row["measured"][name] = measured
            row["error"][name] = row["predicted"][name] / measured - 1.0
    print(f"{case['id']}: " + ", ".join(f"{k} {v * 100:+.1f} %" for k, v in row["error"].items())
          + f" ({time.perf_counter() - started:.1f} s)", file=sys.stderr, flush=True)
    return row


def gpu_work_label(source: str, tp: int) -> str:
    """The table's "GPU work from": where a cost model's kernel time comes from and, at tp > 1, how
    one GPU's share was had (measured per rank or scaled) and that the all-reduces are the link
    model's with an assumed latency."""
    parts = source.split("; ")
    label = parts[0]
    if tp > 1:
        label += "".join(f"; {p}" for p in parts[1:] if p.startswith(("measured per rank", "scaled from")))
        latency = re.search(r"all-reduce latency [\d.]+ us \(assumed\)", source)
        if latency:
            label += f"; all-reduces by the NVLink link model, {latency.group(0)}"
    return label


def over_cases(fn, cases: list[dict], seeds=SEEDS, jobs: int = 1) -> list[dict]:
    """``fn(case, seeds)`` of every case (``jobs`` processes; each case is its own, so the rows do
    not depend on it)."""
    if jobs <= 1:
        return [fn(case, seeds) for case in cases]
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(max_workers=jobs) as pool:
        return list(pool.map(fn, cases, [seeds] * len(cases)))


def check(cases: list[dict], seeds=SEEDS, jobs: int = 1) -> list[dict]:
    """Every case replayed with the shipped terms."""
    return over_cases(check_case, cases, seeds, jobs)


def summary(rows: list[dict], role: str | None, source_fits: str | None = None) -> dict:
    """Median, p90 and max |error| and the mean signed error per metric over the cases of ``role``
    (None: all); ``source_fits``: only the cases of sources that calibrate it (``gpu_work``)."""
    out = {}
    sources = load_cases()[0]
    for name in METRICS:
        signed = np.array([r["error"][name] for r in rows if name in r["error"] and role in (None, r["role"])
                           and (source_fits is None or sources[r["source"]].get("fits") == source_fits)])
        if signed.size:
            errs = np.abs(signed)
            med, p90 = float(np.median(errs)), float(np.percentile(errs, 90))
            want = TARGETS[name]
            out[name] = {"cases": int(errs.size), "median": med, "p90": p90, "max": float(errs.max()),
                         "signed_mean": float(signed.mean()),
                         "target_median": want[0], "target_p90": want[1],
                         "met": bool(med <= want[0] and p90 <= want[1])}
    return out


SUMMARY_GROUPS = (("calibrate", "calibrate", None), ("check", "check", None),
                  ("calibrate, large MoE", "calibrate", "gpu_work"), ("check, large MoE", "check", "gpu_work"),
                  ("all", None, None))


def _pct(v) -> str:
    return "" if v is None else f"{v * 100:+.1f} %"


def _num(v) -> str:
    if v is None:
        return ""
    return f"{v:,.1f}" if v < 1e4 else f"{v:,.0f}"


def write_doc(rows: list[dict], sources: dict, terms: dict, command: str, seeds=SEEDS) -> None:
    from dspark_sim.cost.jsonio import write_json_atomic

    summaries = {label: summary(rows, role, fits) for label, role, fits in SUMMARY_GROUPS}
    write_json_atomic(DOC_JSON, {"generated_by": command, "cases": rows, "summary": summaries, "terms": terms,
                                 "seeds": list(seeds)})
    lines = ["# External check: published engine measurements replayed",
             "",
             f"Generated by `{command}` from `benchmarks/external_cases.yaml` (sources, setups and the",
             "approximations of each replay are listed there and below); do not edit by hand. Errors are",
             "predicted / measured - 1; predictions are the median over seeds "
             f"{', '.join(map(str, seeds))} (the seed spread column is (max - min) / median of the",
             "TTFT / TPOT / throughput predictions over them). 'calibrate' cases are the ones the engine's",
             "host terms were fitted on; 'check' cases were never fitted on. The engine column says whether",
             "the replay overlaps host and GPU and, for vLLM 0.6, how many steps a schedule runs (a case's",
             "`engine_options` set what the measured release did where the modelled release differs).", "",
             "## Summary", "",
             "| cases | metric | n | median abs err | p90 abs err | max abs err | mean signed err | target (median / "
             "p90) | met |",
             "|---|---|---|---|---|---|---|---|---|"]
    for role, s in summaries.items():
        for name, v in s.items():
            lines.append(f"| {role} | {name} | {v['cases']} | {v['median'] * 100:.1f} % | {v['p90'] * 100:.1f} % | "
                         f"{v['max'] * 100:.1f} % | {v['signed_mean'] * 100:+.1f} % | {v['target_median'] * 100:.0f} % / "
                         f"{v['target_p90'] * 100:.0f} % | {'yes' if v['met'] else 'no'} |")
    lines += ["", "## Every case", "",
              "| case | role | engine (modelled) | model / GPU / tp | GPU work from | TTFT ms meas / pred / err | "
              "TPOT ms meas / pred / err | out tok/s meas / pred / err | seed spread TTFT / TPOT / tok/s | rejected |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        cells = []
        for name in METRICS:
            m, p, e = r["measured"].get(name), r["predicted"][name], r["error"].get(name)
            cells.append(f"{_num(m) or '-'} / {_num(p)} / {_pct(e) or '-'}")
        spread = " / ".join(_pct(r["seed_spread"][name]).lstrip("+") or "-" for name in METRICS)
        lines.append(f"| {r['id']} | {r['role']} | {r['engine']} | {r['model']} / {r['gpu']} / {r['tp']} | "
                     f"{r['cost']} | {' | '.join(cells)} | {spread} | {r['rejected']} |")
    lines += ["", "## Where a case misses", "",
              "Each case's errors beyond the targets' median bounds (TPOT and throughput "
              f"{TARGETS['tpot'][0] * 100:.0f} %, TTFT {TARGETS['ttft'][0] * 100:.0f} %), from the table above, "
              "and why (the case's `gap` in `benchmarks/external_cases.yaml`). The replays with a host term",
              "left out and the prefill shares the texts cite are in [the diagnostic replays](external_diagnose.md)",
              "(`python benchmarks/external.py diagnose`).", "",
              "| case | misses | why |", "|---|---|---|"]
    for r in rows:
        misses = [f"{name} {_pct(e)}" for name, e in r["error"].items() if abs(e) > TARGETS[name][0]]
        why = (r.get("gap") or "not yet explained") if misses else ""
        lines.append(f"| {r['id']} | {', '.join(misses) or 'none'} | {why} |")
    lines += ["", "## Host terms per engine", "",
              "| engine | step host ms | per request us | front end ms | streamed message us | fitted from |",
              "|---|---|---|---|---|---|"]
    for name, entry in terms.get("engines", {}).items():
        t = entry["terms"]
        lines.append(f"| {name} | {t['step_host_s'] * 1e3:.3f} | {t['step_host_s_per_req'] * 1e6:.2f} | "
                     f"{t['frontend_s'] * 1e3:.1f} | {t.get('stream_s', 0.0) * 1e6:.1f} | "
                     f"{', '.join(entry['fitted_from'])} |")
    lines += ["", "Engines without a row run with no host terms (none of their cases is a calibration case).", ""]
    lines += gpu_work_lines(terms.get("gpu_work"))
    lines += ["## Sources and approximations", ""]
    for key, src in sources.items():
        where = f"at {src['commit'][:12]}" if src.get("commit") else f"of {src['date']}"
        lines += [f"### {key}", "", f"- {src['url']} ({src['repo']} `{src['path']}` {where})",
                  f"- setup: {src['setup']}", f"- approximations: {src['approximations']}", ""]
    text = "\n".join(lines) + "\n"
    tmp = DOC.with_suffix(".md.tmp")
    tmp.write_text(text)
    tmp.replace(DOC)


def gpu_work_lines(work: dict | None) -> list[str]:
    """The engines' MoE roofline as fitted (``gpu_work`` of engine_terms.json), for the page."""
    if not work:
        return []
    floors = ", ".join(f"{k} {v * 1e6:.0f} us" for k, v in sorted(work["layer_s"].items()))
    first = ", ".join(f"{k} {v * 1e3:.0f} ms" for k, v in sorted(work["first_token_s"].items()))
    return ["## The engines' MoE roofline", "",
            "GPU work of the MoE models the engines run on kernels the project has not profiled (no profile, or "
            "DeepSeek-V4-Flash's, scaled from layer slices of the project's own decoder): the roofline with a floor "
            "a layer of every forward and a latency of a request's first token beyond its steps (shared by requests "
            "taken in together, not queued), both by attention kind, "
            "and the expert GEMMs' share of HBM bandwidth, fitted by `python benchmarks/external.py calibrate` "
            f"on the {len(work['fitted_from'])} 'calibrate' cases of the sources marked `fits: gpu_work` "
            "(`dspark_sim/profiling/gpu_work_fit.py`); the 'check' cases of those sources were never fitted on.", "",
            "| layer floor by attention kind | first token's latency by attention kind | expert GEMMs' bandwidth share |",
            "|---|---|---|",
            f"| {floors} | {first} | {work['moe_bw_eff']:.2f} |", ""]


def engine_roofline_block(data: dict) -> str:
    """docs/profiles.md's block on the engines' MoE roofline, from docs/external.json: its terms,
    and its errors on the runs fitted on and on those held out by whole levels."""
    lines = [f"Made by `{data['generated_by']}` (docs/external.json).", ""]
    lines += gpu_work_lines(data["terms"].get("gpu_work"))
    lines += ["| runs | metric | n | median abs err | p90 abs err | max abs err | mean signed err |",
              "|---|---|---|---|---|---|---|"]
    for label in ("calibrate, large MoE", "check, large MoE"):
        for name, v in data["summary"].get(label, {}).items():
            lines.append(f"| {label.split(',')[0]} | {name} | {v['cases']} | {v['median'] * 100:.1f} % | "
                         f"{v['p90'] * 100:.1f} % | {v['max'] * 100:.1f} % | {v['signed_mean'] * 100:+.1f} % |")
    return "\n".join(lines)


# the replays of ``diagnose``: the shipped terms, then one kind of host term left out at a time
VARIANTS = ("shipped", "no step host time", "no front end", "no host terms")
ENGINE_BOUND = 0.9  # a replay whose engine is busy this share of it is bound by the engine's steps


def variant_terms(terms, variant: str):
    """``terms`` with the host time ``variant`` names left out (:data:`VARIANTS`)."""
    from dataclasses import replace

    from dspark_sim.engines import EngineTerms

    if variant == "shipped":
        return terms
    if variant == "no step host time":
        return replace(terms, step_host_s=0.0, step_host_s_per_req=0.0, eager_step_s=0.0,
                       source=terms.source + "; step host time left out")
    if variant == "no front end":
        return replace(terms, frontend_s=0.0, stream_s=0.0, source=terms.source + "; front end left out")
    if variant == "no host terms":
        return EngineTerms(source="no host terms (diagnostic)")
    raise ValueError(variant)


def time_split(result) -> dict:
    """Where one replay's engine time goes: the share of its steps' time (GPU work and host time
    together) spent in steps that prefill a chunk of some prompt, and the engine's busy share of
    the run (its steps' time over the last finish)."""
    steps = result.collector.steps
    step_s = steps["step_s"].astype(float)
    total = float(step_s.sum())
    if total <= 0:
        return {"prefill_step_share": None, "busy_share": None}
    prefill = steps["prefill_tokens"] > 0
    finish = result.collector.requests["finish_s"]
    end = float(np.nanmax(finish)) if finish.size else 0.0
    return {"prefill_step_share": float(step_s[prefill].sum() / total),
            "busy_share": float(total / end) if end > 0 else None}


def diagnose_case(case: dict, seeds=SEEDS) -> dict:
    """``case`` replayed under each of :data:`VARIANTS` (median over ``seeds``), with the
    errors of each, and the time split of the shipped replay at the first seed."""
    from dspark_sim.engine.simulator import simulate
    from dspark_sim.metrics.summary import summarize
    from dspark_sim.profiling.engine_fit import with_terms

    warnings.simplefilter("ignore", UserWarning)
    started = time.perf_counter()
    row = {"id": case["id"], "role": case["role"], "measured": {}, "variants": {}, "split": None}
    keys = {name: metric_key(case, name) for name in METRICS}
    for name, key in keys.items():
        if case["measured"].get(key) is not None:
            row["measured"][name] = case["measured"][key]
    for variant in VARIANTS:
        preds = []
        for seed in seeds:
            scenario = case_scenario(case, seed)
            result = simulate(with_terms(scenario, variant_terms(scenario.engine.terms, variant)))
            s = summarize(result)
            preds.append({name: s[key] for name, key in keys.items()})
            if variant == "shipped" and seed == seeds[0]:
                row["split"] = time_split(result)
        predicted = {name: float(np.median([p[name] for p in preds])) for name in METRICS}
        row["variants"][variant] = {
            "predicted": predicted,
            "error": {name: predicted[name] / m - 1.0 for name, m in row["measured"].items()}}
    print(f"{case['id']}: diagnosed ({time.perf_counter() - started:.1f} s)", file=sys.stderr, flush=True)
    return row


def diagnose(cases: list[dict], seeds=SEEDS, jobs: int = 1) -> list[dict]:
    """Every case replayed under each of :data:`VARIANTS`."""
    return over_cases(diagnose_case, cases, seeds, jobs)


def write_diagnose_doc(rows: list[dict], command: str, seeds=SEEDS) -> None:
    from dspark_sim.cost.jsonio import write_json_atomic

    write_json_atomic(DIAG_JSON, {"generated_by": command, "variants": list(VARIANTS), "seeds": list(seeds),
                                  "cases": rows})
    lines = ["# External check: diagnostic replays",
             "",
             f"Generated by `{command}` from `benchmarks/external_cases.yaml` and the shipped host",
             "terms (`dspark_sim/engine_terms.json`); do not edit by hand. Every case of",
             "[the external check](external.md) replayed again with one kind of host term left out at a",
             "time: the per-step host time (`step_host_s`, `step_host_s_per_req`, `eager_step_s`), the",
             "front end (`frontend_s`, `stream_s`), or all of them; GPU work as in the check. Errors are",
             "predicted / measured - 1, the median over seeds " + ", ".join(map(str, seeds)) + ". A case whose",
             "error comes within the target's median bound (TPOT and throughput "
             f"{TARGETS['tpot'][0] * 100:.0f} %, TTFT {TARGETS['ttft'][0] * 100:.0f} %) when a term",
             "is left out is bound by that term; the gap texts of the check cite these replays.", "",
             "`prefill steps` is the share of the shipped replay's engine time (first seed; GPU work and",
             "host time of its steps) spent in steps that prefill a chunk of some prompt; `engine busy` the",
             "share of the run (to its last finish) the engine spent in steps, the rest being the front end's",
             "intake and streaming or waiting for arrivals. `prefill x to match` is how much slower prefill steps would",
             "have to be for the replay's throughput to match the measured one, the rest unchanged",
             "(1 + throughput error / (prefill share x busy share)), given only where the engine is busy",
             f"at least {ENGINE_BOUND * 100:.0f} % of the run (`none`: no prefill rate would do, the rest of the",
             "replay alone being slower than the measurement): an estimate from this replay, not a measurement of",
             "any GPU.", "",
             "| case | role | metric | measured | " + " | ".join(VARIANTS) + " |",
             "|---|---|---|---|" + "---|" * len(VARIANTS)]
    for r in rows:
        for name in METRICS:
            if name not in r["measured"]:
                continue
            cells = [f"{_pct(r['variants'][v]['error'][name])}" for v in VARIANTS]
            lines.append(f"| {r['id']} | {r['role']} | {name} | {_num(r['measured'][name])} | "
                         + " | ".join(cells) + " |")
    lines += ["", "## Where the shipped replay's engine time goes", "",
              "| case | prefill steps | engine busy | throughput error | prefill x to match |", "|---|---|---|---|---|"]
    for r in rows:
        split = r["split"] or {}
        share = split.get("prefill_step_share")
        err = r["variants"]["shipped"]["error"].get("throughput")
        host = split.get("busy_share")
        # an engine-bound run only (busy nearly all of it): elsewhere its prefill does not set its length
        bound = err is not None and share and host is not None and host >= ENGINE_BOUND
        factor = 1 + err / (share * host) if bound else None
        match = "-" if factor is None else f"{factor:.2f}" if factor > 0 else "none"
        lines.append(f"| {r['id']} | {'-' if share is None else f'{share * 100:.0f} %'} | "
                     f"{'-' if host is None else f'{host * 100:.0f} %'} | {_pct(err) or '-'} | {match} |")
    tmp = DIAG_DOC.with_suffix(".md.tmp")
    tmp.write_text("\n".join(lines) + "\n")
    tmp.replace(DIAG_DOC)


def write_defaults_doc() -> None:
    """docs/engine_defaults.md: every engine default the simulator applies, with its source line."""
    from dspark_sim.engines import DEFAULT_SOURCES, VERSIONS

    lines = ["# Engine defaults and where they come from", "",
             "Generated by `python benchmarks/external.py` from `dspark_sim/engines.py` (`DEFAULT_SOURCES`);",
             "do not edit by hand. A scenario's `engine:` applies these to the `deployment:` keys it leaves",
             "out; keys it gives win.", ""]
    for engine, rows in DEFAULT_SOURCES.items():
        lines += [f"## {engine} {VERSIONS[engine][0]}", "", "| setting | value | source (file:line) |", "|---|---|---|"]
        lines += [f"| {name} | {value} | {source} |" for name, value, source in rows]
        lines.append("")
    tmp = DEFAULTS_DOC.with_suffix(".md.tmp")
    tmp.write_text("\n".join(lines))
    tmp.replace(DEFAULTS_DOC)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", nargs="?", default="all", choices=("all", "calibrate", "check", "report",
                                                                        "diagnose"))
    parser.add_argument("--seeds", type=int, default=len(SEEDS), help=f"seeds a case is replayed with (default "
                        f"{len(SEEDS)})")
    parser.add_argument("--jobs", type=int, default=1, help="processes replaying cases (default 1)")
    parser.add_argument("--cases", nargs="+", metavar="ID", help="diagnose only these cases (default: all)")
    args = parser.parse_args(argv)
    seeds = tuple(range(args.seeds))
    warnings.simplefilter("ignore", UserWarning)  # the roofline's "no measured profile": named in the table
    sources, cases = load_cases()
    known = {c["id"] for c in cases}
    for name in args.cases or ():
        if name not in known:
            print(f"{CASES.relative_to(ROOT)}: cases: unknown case {name!r}", file=sys.stderr)
            return 2
    write_defaults_doc()
    if args.what in ("all", "calibrate"):
        from dspark_sim.cost.jsonio import write_json_atomic

        write_json_atomic(TERMS, calibrate(cases))
        print(f"wrote {TERMS.relative_to(ROOT)}", file=sys.stderr)
    if args.what == "report":  # the simulated numbers as they are, the gaps as the YAML has them now
        data = json.loads(DOC_JSON.read_text())
        gaps = {c["id"]: c.get("gap", "") for c in cases}
        rows = [{**r, "gap": gaps.get(r["id"], "")} for r in data["cases"]]
        write_doc(rows, sources, data["terms"], data["generated_by"], tuple(data["seeds"]))
        print(f"wrote {DOC.relative_to(ROOT)}, {DOC_JSON.relative_to(ROOT)}")
    if args.what == "diagnose":
        chosen = [c for c in cases if not args.cases or c["id"] in args.cases]
        rows = diagnose(chosen, seeds, args.jobs)
        command = "python benchmarks/external.py diagnose" + (f" --seeds {args.seeds}" if args.seeds != len(SEEDS)
                                                              else "") + \
            (f" --cases {' '.join(args.cases)}" if args.cases else "")
        write_diagnose_doc(rows, command, seeds)
        print(f"wrote {DIAG_DOC.relative_to(ROOT)}, {DIAG_JSON.relative_to(ROOT)}")
    if args.what in ("all", "check"):
        terms = json.loads(TERMS.read_text()) if TERMS.is_file() else {"engines": {}}
        rows = check(cases, seeds, args.jobs)
        command = "python benchmarks/external.py" + (f" --seeds {args.seeds}" if args.seeds != len(SEEDS) else "")
        write_doc(rows, sources, terms, command, seeds)
        for role, s in ((label, summary(rows, r, fits)) for label, r, fits in SUMMARY_GROUPS):
            for name, v in s.items():
                print(f"{role:20s} {name:10s} n={v['cases']:2d} median {v['median'] * 100:5.1f} % "
                      f"p90 {v['p90'] * 100:5.1f} % max {v['max'] * 100:5.1f} %  target "
                      f"{'met' if v['met'] else 'NOT met'}")
        print(f"wrote {DOC.relative_to(ROOT)}, {DOC_JSON.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
