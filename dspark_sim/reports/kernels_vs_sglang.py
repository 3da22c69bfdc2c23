"""Our DSpark kernels beside SGLang's released ones: the tables and doc block of
``benchmarks/bench_vs_sglang.py``'s result files, and several runs joined section by section."""
from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
JSON = ROOT / "profiles" / "h200" / "kernels_vs_sglang.json"

def _us(t: dict | None, key: str = "graph_us") -> str:
    v = None if t is None else t.get(key)
    return "-" if v is None else f"{v:.1f}"


def _ratio(a: dict | None, b: dict | None, key: str = "graph_us") -> str:
    x, y = (None if a is None else a.get(key)), (None if b is None else b.get(key))
    return "-" if not x or not y else f"{x / y:.2f}"


def tables(data: dict) -> str:
    """Markdown: the scheduler (graph and launch times, speed-up over SGLang), then accept.
    ``now``: the path the thresholds in the code pick today (set from these rows), timed in
    the row's own run (each path is timed on its own)."""
    from dspark_sim.kernels.schedule_paths import path_for

    lines = ["| block_size | R | path now | K | SGLang top-K graph us | ours, K given, graph us | x SGLang | ours searching K, "
             "graph us | SGLang launch us | ours launch us | single / pairwise / merge graph us | mismatches |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in data.get("schedule", []):
        if "error" in r:
            lines.append(f"| {r['block_size']} | {r['R']} | error: {r['error'][:80]} |" + " |" * 9)
            continue
        now = path_for(r["R"], r["block_size"])
        ours = r.get(f"ours_{now}") or r["ours"]
        paths = " / ".join(_us(r.get(f"ours_{p}")) for p in ("single", "pairwise", "merge"))
        lines.append(f"| {r['block_size']} | {r['R']} | {now} | {r['budget_k']} | {_us(r['sglang'])} | "
                     f"{_us(ours)} | {_ratio(r['sglang'], ours)} | {_us(r['ours_search'])} | "
                     f"{_us(r['sglang'], 'launch_us')} | {_us(ours, 'launch_us')} | {paths} | {r['mismatches']} |")
    lines += ["", "| R | greedy: SGLang graph us | ours | x SGLang | mismatches | sampling: SGLang graph us | ours | "
              "x SGLang | mean accepted SGLang / ours |", "|---|---|---|---|---|---|---|---|---|"]
    for r in data.get("accept", []):
        if "error" in r:
            lines.append(f"| {r['R']} | error: {r['error'][:80]} |" + " |" * 7)
            continue
        acc = r["sampling_mean_accepted"]
        lines.append(f"| {r['R']} | {_us(r['greedy_sglang'])} | {_us(r['greedy_ours'])} | "
                     f"{_ratio(r['greedy_sglang'], r['greedy_ours'])} | {r['greedy_mismatches']} | "
                     f"{_us(r['sampling_sglang'])} | {_us(r['sampling_ours'])} | "
                     f"{_ratio(r['sampling_sglang'], r['sampling_ours'])} | "
                     f"{acc['sglang']:.2f} / {acc['ours']:.2f} |")
    return "\n".join(lines)


def merge(paths) -> dict:
    """One result from several runs: each section from the last run holding it without
    errors, with that run's provenance (``section_provenance``)."""
    out = {"section_provenance": {}}
    for path in paths:
        data = json.loads(Path(path).read_text())
        out.setdefault("method", data.get("method"))
        for section in ("schedule", "accept"):
            rows = data.get(section) or []
            if rows and not any("error" in r for r in rows):
                out[section] = rows
                out["section_provenance"][section] = {**data["provenance"], "run_file": Path(path).name}
    return out


def header(data: dict) -> str:
    runs = data.get("section_provenance") or {"schedule and accept": data["provenance"]}
    lines = []
    for section, p in runs.items():
        lines.append(f"{section}: measured {p.get('date')} on {p.get('gpu')} (host {p.get('host')}, GPU "
                     f"{p.get('gpu_uuid')}, driver {p.get('driver')}, CUDA {p.get('cuda')}, torch {p.get('torch')}, "
                     f"triton {p.get('triton')}) against SGLang's kernels from `{p.get('sglang_wheel')}`; SM clocks "
                     f"before/after {p.get('sm_clocks_before')} / {p.get('sm_clocks_after')}.")
    return " ".join(lines) + " Full numbers: `profiles/h200/kernels_vs_sglang.json`."


def block_text(data: dict) -> str:
    """The doc block: what was measured where, and the tables."""
    return header(data) + "\n\n" + tables(data)
