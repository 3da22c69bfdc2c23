"""DSpark against its baselines over concurrency, per traffic domain: docs/bench/dspark_frontier.json.

For Qwen3-8B on an H200 (the shipped measured profile, or the roofline where
none ships) and math, code and chat traffic, it sweeps concurrency for no
speculation, MTP-1, MTP-3, DSpark (production scheduler) and the DSpark
drafter verifying its whole block, and writes the rows with the command, commit,
date, machine and each method's provenance (cost model, acceptance) to
``docs/bench/dspark_frontier.json``, and the frontier plots to ``docs/img/``.
``docs/dspark_frontier.md`` is made from that file by :func:`dspark_sim.reports.frontier.markdown`
(``python benchmarks/doc_blocks.py write``; ``tests/test_doc_blocks.py`` re-derives it). The
sweep is a simulation (no wall-clock times in the file): the same commit gives the same rows.

    python benchmarks/dspark_frontier.py [--model qwen3-8b] [--gpu h200]
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import yaml
from outputs import code_commit, machine, write_result

from dspark_sim.reports.frontier import JSON

REPO = Path(__file__).resolve().parents[1]
SWEEP_METHODS = ["none", "mtp1", "mtp3", "dspark", "dspark-full"]
CONCURRENCY = [1, 8, 32, 64, 128, 256]
DOMAINS = ("math", "code", "chat")
LENGTHS = {"prompt_tokens": {"dist": "lognormal", "mean": 800, "sigma": 0.5},
           "output_tokens": {"dist": "lognormal", "mean": 400, "sigma": 0.5}}


def scenario_dict(domain: str, model: str, gpu: str) -> dict:
    """The scenario each domain's sweep starts from (the sweep makes it a closed loop per concurrency)."""
    return {"name": f"{domain}-{model}-{gpu}", "model": model, "gpu": gpu,
            "workload": {"synthetic": {"num_requests": 1000, "rate_per_s": 10, "arrival": "poisson", **LENGTHS},
                         "domain": domain},
            "speculation": {"method": "dspark"}, "seed": 0}


def scenario(domain: str, model: str, gpu: str, tmp: Path):
    from dspark_sim.scenario import load_scenario

    path = tmp / f"{domain}.yaml"
    path.write_text(yaml.safe_dump(scenario_dict(domain, model, gpu)))
    return load_scenario(path)


def run(model: str, gpu: str, img: Path) -> dict:
    """Sweep every domain, write the plots, and return the figures with their provenance."""
    import warnings

    from dspark_sim.sweep import closed_loop, plot, provenance_by_method, sweep

    domains = {}
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the borrowed MTP preset is recorded in the provenance instead
        for domain in DOMAINS:
            sc = scenario(domain, model, gpu, Path(tmp))
            domains[domain] = sweep(sc, SWEEP_METHODS, CONCURRENCY)
            (png,) = plot(domains[domain], f"{model} on {gpu}, {domain} traffic", Path(tmp))
            (img / f"frontier_{model}_{gpu}_{domain}.png").write_bytes(png.read_bytes())
            print(domain, "done", flush=True)
        prov = provenance_by_method(sc, SWEEP_METHODS)
        requests = {str(c): closed_loop(sc, c).workload.max_requests for c in CONCURRENCY}
    cost = prov[SWEEP_METHODS[-1]]["cost_model"]
    return {"model": model, "gpu": gpu, "scenario": scenario_dict("<domain>", model, gpu),
            "requests_by_concurrency": requests, "cost_model": {k: v for k, v in cost.items() if k != "held_out"},
            "methods": {m: {k: p[k] for k in ("acceptance", "uses", "caveats")} for m, p in prov.items()},
            "domains": domains}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="qwen3-8b")
    p.add_argument("--gpu", default="h200")
    p.add_argument("--json", type=Path, default=JSON, help="where the figures go")
    args = p.parse_args(argv)
    img = REPO / "docs" / "img"
    img.mkdir(parents=True, exist_ok=True)
    data = {"command": " ".join(["python benchmarks/dspark_frontier.py", *(sys.argv[1:] if argv is None else argv)]),
            "commit": code_commit("dspark_sim", "profiles"), "date": time.strftime("%Y-%m-%d", time.gmtime()),
            "machine": machine(), "file": str(args.json.resolve().relative_to(REPO)) if args.json.resolve()
            .is_relative_to(REPO) else str(args.json), **run(args.model, args.gpu, img)}
    write_result(args.json, data)
    print(f"wrote {args.json}; `python benchmarks/doc_blocks.py write` makes docs/dspark_frontier.md from it")
    return 0


if __name__ == "__main__":
    sys.exit(main())
