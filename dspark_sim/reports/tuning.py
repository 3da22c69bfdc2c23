"""``dspark-tune``'s timed studies (``benchmarks/bench_tune.py``): where their figures are
kept, and ``docs/tuning.md``'s blocks made from them."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def json_path(tag: str) -> Path:
    """Where the figures of the block ``tag`` are committed."""
    return ROOT / "docs" / "bench" / f"tune_{tag}.json"


def block_text(data: dict) -> str:
    """The results as a Markdown block: command, machine, load, commit and date, then per SLO the
    tuner's command, its wall time and the comparison over repeats (with ``--slices``: the pruned
    study against the unpruned one, :func:`pruning_lines`)."""
    from dspark_sim.tuner.repeats import table

    lines = [f"Made by `{data['command']}` at commit {data['commit']} on {data['machine']}, 1-minute load "
             f"average {data['load_end']:.1f} at the end, {data['date']} (`{data['file']}`)."]
    for key in ("converted", "note"):  # how the figures were obtained, where it matters
        if data.get(key):
            lines[0] += f" {data[key]}"
    if "pruning" in data:
        return "\n".join(lines + pruning_lines(data["pruning"]))
    for r in data["results"]:
        n = r["repeats"]
        lines += ["", f"`{r['command']}`: {r['wall_s']:.0f} s wall ({'within' if r['within_limit'] else 'over'} "
                  f"{LIMIT_S} s per repeat), {r['cpu_s']:.0f} CPU-s.", "",
                  *table(r["comparison"], f"{r['unit']} (confirmed)", {}), "",
                  "One repeat: the spread over sampler seeds is not measured, so no difference is called a gain."
                  if n == 1 else f"Over {n} repeats a difference is a gain only above the combined spread "
                                 "(standard deviations over repeats in quadrature)."]
    return "\n".join(lines)


def pruning_lines(data: dict) -> list[str]:
    """The pruned DSpark study beside the unpruned one: trials, time, confirmed winners over the
    repeats and the difference of their means against the combined spread."""
    from dspark_sim.tuner.repeats import describe

    runs, spreads = data["variants"], data["spreads"]
    unit = runs["unpruned"]["unit"]
    lines = ["", *(f"- {v}: `{r['command']}`" for v, r in runs.items()), "",
             f"| study | trials per repeat: complete + pruned | trial-seconds | last run wall s, CPU-s | repeats meeting "
             f"the SLO | mean {unit} (confirmed) | sd over repeats | min - max | difference to unpruned |",
             "|---|---|---|---|---|---|---|---|---|"]
    for variant, r in runs.items():
        s = spreads[variant]
        dspark = [n for n in r["states"] if re.fullmatch(re.escape(r["study"]) + r"(\.r\d+)?", n)]
        done = ", ".join(f"{r['states'][n]['COMPLETE']} + {r['states'][n]['PRUNED']}" for n in sorted(dspark))
        trial_s = sum(r["states"][n]["trial_s"] for n in dspark)
        label = variant if not r["slices"] else f"pruned at {', '.join(f'{m:g}' for m in r['slices'])} min"
        mean = "-" if s["mean"] is None else f"{s['mean']:,.1f}"
        sd = "-" if s["sd"] is None else f"{s['sd']:,.1f}"
        rng = "-" if s["min"] is None else f"{s['min']:,.1f} - {s['max']:,.1f}"
        diff = "-" if variant == "unpruned" else describe(data["vs_unpruned"])
        lines.append(f"| {label} | {done} | {trial_s:,.0f} | {r['wall_s']:.0f}, {r['cpu_s']:.0f} | {s['slo_met']} of "
                     f"{r['repeats']} | {mean} | {sd} | {rng} | {diff} |")
    lines += ["", "Winners (the best confirmed configuration of each repeat):", ""]
    for variant, r in runs.items():
        w = r["winners"].get("dspark")
        lines.append(f"- {variant}: best over the repeats {w['value']:,.1f} {unit}, study {w['study']} trial "
                     f"{w['trial']}: {knobs(w['config'])}" if w else f"- {variant}: no winner")
    return lines


def knobs(config: dict) -> str:
    from dspark_sim.tuner.report import knobs as line

    return line(config)


LIMIT_S = 600  # the brief: 200 trials on the shipped trace in 10 minutes on 2 cores (per repeat)
