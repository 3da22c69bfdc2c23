"""``docs/dspark_frontier.md`` from the committed sweep of DSpark against its baselines over
concurrency (``benchmarks/dspark_frontier.py`` makes ``docs/bench/dspark_frontier.json``)."""
from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
JSON = ROOT / "docs" / "bench" / "dspark_frontier.json"


def crossovers(rows: list[dict]) -> list[str]:
    """Sentences on where DSpark stops beating each baseline, from the rows."""
    by = {(r["method"], r["concurrency"]): r for r in rows}
    conc = list(dict.fromkeys(r["concurrency"] for r in rows))
    out = []
    for other in ("none", "mtp1", "mtp3", "dspark-full"):
        gains = [by["dspark", c]["output_throughput_per_gpu"] / by[other, c]["output_throughput_per_gpu"] - 1
                 for c in conc]
        worse = [(c, g) for c, g in zip(conc, gains) if g < 0]
        if worse:
            out.append(f"DSpark's throughput per GPU falls below {other} from concurrency {worse[0][0]} "
                       f"({worse[0][1]:+.1%} there).")
        else:
            out.append(f"DSpark stays at or above {other} at every concurrency "
                       f"(gain {min(gains):+.1%} to {max(gains):+.1%}).")
    return out


def _header(data: dict) -> str:
    wl = data["scenario"]["workload"]["synthetic"]
    requests = ", ".join(f"{c}: {n:,}" for c, n in data["requests_by_concurrency"].items())
    cost = data["cost_model"]
    measured = cost.get("measured") or {}
    basis = cost["source"] + (f", decoder commit {measured['decoder_commit'][:7]}, {measured['weights']} weights"
                              if measured.get("decoder_commit") else "")
    acceptance = "; ".join(f"`{m}`: {p['acceptance']['kind']}"
                           + (f", {p['acceptance']['detail']}" if p["acceptance"]["kind"] != "none" else "")
                           for m, p in data["methods"].items())
    caveats = list(dict.fromkeys(c for p in data["methods"].values() for c in p["caveats"]))
    return "\n".join([
        f"# DSpark over concurrency: {data['model']} on {data['gpu']}", "",
        (f"Made by `{data['command']}` at commit {data['commit']} on {data['date']} ({data['machine']}), from "
        f"`{data['file']}`; simulated, not measured. Closed loop at each concurrency (every request arrives at "
        f"once, at most C running; requests by concurrency {requests}), lognormal lengths (prompt mean "
        f"{wl['prompt_tokens']['mean']}, sigma {wl['prompt_tokens']['sigma']}; output mean "
        f"{wl['output_tokens']['mean']}, sigma {wl['output_tokens']['sigma']}). Cost model: {cost['name']}, "
        f"{basis}. Acceptance, drawn from the simulator's generative model: {acceptance}."),
        *([] if not caveats else ["", "Caveats: " + "; ".join(caveats) + "."]), "",
        ("Methods: `mtpK` verifies K chain drafts every step; `dspark` is the production scheduler over a "
        "7-token block; `dspark-full` is the same drafter verifying its whole block every step. DSpark's gain "
        "over MTP rests on the MTP acceptance named above."), ""])


def markdown(data: dict) -> str:
    """docs/dspark_frontier.md from the committed JSON: the header, then per domain the table, the
    crossovers and the plot."""
    from dspark_sim.sweep import format_table

    parts = [_header(data)]
    for domain, rows in data["domains"].items():
        parts += [f"## {domain}", "", "```", format_table(rows), "```", "",
                  *[f"- {s}" for s in crossovers(rows)], "",
                  f"![{domain} frontier](img/frontier_{data['model']}_{data['gpu']}_{domain}.png)", ""]
    return "\n".join(parts)
