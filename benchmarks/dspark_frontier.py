"""DSpark against its baselines over concurrency, per traffic domain: writes docs/dspark_frontier.md.

For Qwen3-8B on an H200 (the shipped measured profile, or the roofline where
none ships) and math, code and chat traffic, it sweeps concurrency for no
speculation, MTP-1, MTP-3, DSpark (production scheduler) and the DSpark
drafter verifying its whole block, then writes the tables, the frontier
plots and the crossover points it finds. Every number in the page comes
from this run.

    python benchmarks/dspark_frontier.py [--model qwen3-8b] [--gpu h200]
"""
from __future__ import annotations

import argparse
import datetime
import tempfile
from pathlib import Path

import yaml

from dspark_sim.sweep import format_table, plot, sweep
from dspark_sim.scenario import load_scenario

REPO = Path(__file__).resolve().parents[1]
SWEEP_METHODS = ["none", "mtp1", "mtp3", "dspark", "dspark-full"]
CONCURRENCY = [1, 8, 32, 64, 128, 256]


def scenario(domain: str, model: str, gpu: str, tmp: Path):
    data = {"name": f"{domain}-{model}-{gpu}", "model": model, "gpu": gpu,
            "workload": {"synthetic": {"num_requests": 1000, "rate_per_s": 10, "arrival": "poisson",
                                       "prompt_tokens": {"dist": "lognormal", "mean": 800, "sigma": 0.5},
                                       "output_tokens": {"dist": "lognormal", "mean": 400, "sigma": 0.5}},
                         "domain": domain},
            "speculation": {"method": "dspark"}, "seed": 0}
    path = tmp / f"{domain}.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_scenario(path)


def crossovers(rows: list[dict]) -> list[str]:
    """Sentences on where DSpark stops beating each baseline, from the rows."""
    by = {(r["method"], r["concurrency"]): r for r in rows}
    out = []
    for other in ("none", "mtp1", "mtp3", "dspark-full"):
        worse = [c for c in CONCURRENCY
                 if by["dspark", c]["output_throughput_per_gpu"] < by[other, c]["output_throughput_per_gpu"]]
        if worse:
            c = worse[0]
            gap = by["dspark", c]["output_throughput_per_gpu"] / by[other, c]["output_throughput_per_gpu"] - 1
            out.append(f"DSpark's throughput per GPU falls below {other} from concurrency {c} ({gap:+.1%} there).")
        else:
            gains = [by["dspark", c]["output_throughput_per_gpu"] / by[other, c]["output_throughput_per_gpu"] - 1
                     for c in CONCURRENCY]
            out.append(f"DSpark stays at or above {other} at every concurrency "
                       f"(gain {min(gains):+.1%} to {max(gains):+.1%}).")
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="qwen3-8b")
    p.add_argument("--gpu", default="h200")
    p.add_argument("--out", default=str(REPO / "docs" / "dspark_frontier.md"))
    args = p.parse_args()
    out = Path(args.out)
    img = out.parent / "img"
    img.mkdir(parents=True, exist_ok=True)
    parts = [f"# DSpark over concurrency: {args.model} on {args.gpu}\n",
             f"Made by `python benchmarks/dspark_frontier.py --model {args.model} --gpu {args.gpu}` on "
             f"{datetime.date.today().isoformat()}. Closed loop at each concurrency (every request "
             "arrives at once, at most C running), 1,000-request lognormal lengths (prompt mean 800, "
             "output mean 400), DSpark's acceptance from the Table 1 presets of the domain; the MTP rows' "
             "acceptance is DeepSeek-V3's MTP preset, borrowed for Qwen3 (no Qwen3 MTP preset exists), so "
             "DSpark's gain over MTP rests on that borrowed preset. Methods: `mtpK` "
             "verifies K chain drafts every step; `dspark` is the production scheduler over a "
             "7-token block; `dspark-full` is the same drafter verifying its whole block every step.\n"]
    with tempfile.TemporaryDirectory() as tmp:
        for domain in ("math", "code", "chat"):
            sc = scenario(domain, args.model, args.gpu, Path(tmp))
            rows = sweep(sc, SWEEP_METHODS, CONCURRENCY)
            (png,) = plot(rows, f"{args.model} on {args.gpu}, {domain} traffic", Path(tmp))
            target = img / f"frontier_{args.model}_{args.gpu}_{domain}.png"
            target.write_bytes(png.read_bytes())
            parts += [f"## {domain}\n", "```", format_table(rows), "```\n",
                      *[f"- {s}" for s in crossovers(rows)], "",
                      f"![{domain} frontier](img/{target.name})\n"]
            print(domain, "done", flush=True)
    out.write_text("\n".join(parts) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
