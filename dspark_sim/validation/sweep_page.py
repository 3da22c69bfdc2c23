"""docs/validation_sweeps.md from ``sweep_errors.json`` (:mod:`.sweep_report`)."""
from __future__ import annotations

from dspark_sim.validation import reads, spread, step_prices
from dspark_sim.validation.report import case_table, host_line, replay_cell, run_notes
from dspark_sim.validation.sweep_report import LEVEL_GOALS, MARGIN, SHOWN, SIGNED_GOAL

LEVEL_KEYS = ("output_throughput", "p50_tpot_ms", "mean_ttft_ms", "p99_tpot_ms", "p99_ttft_ms")


def markdown(data: dict, made_by: str, real_root=None) -> str:
    """The page: how the sweeps were made, each level against the goals, the best method at each
    load, every case, and each served step priced by the profile."""
    prov = data.get("provenance", {})
    lines = ["# Simulator against the real decoder at every load: the sweeps (H200)", "",
             f"Made by `{made_by}` from the decoder runs of `python benchmarks/fidelity.py run --sweeps` "
             f"(`bash benchmarks/h200_sweep_visit.sh sweepA|sweepB`). Real: {prov.get('gpu')}, driver "
             f"{prov.get('driver')}, torch {prov.get('torch')}, triton {prov.get('triton')}, "
             f"{str(prov.get('date'))[:10]}, decoder commit {prov.get('decoder_commit')}; Qwen3-8B shape, random "
             "bf16 weights, synthetic acceptance. Simulated: the same scenarios "
             "(`profiles/h200/validation/sweeps/`), the shipped profile, the requests each run served. "
             "A level is a multiple of the family's saturation rate as the simulator estimated it before the "
             "runs (`python benchmarks/fidelity.py saturation`): chat traffic (`sw-chat`), long prompts "
             "(`sw-long`), multi-turn sessions over shared prefixes with the prefix cache on (`sw-sess`), each "
             "under `mixed` and `prefill_first`, for no speculation, MTP-3 and DSpark; the methods and "
             "batchings of a level serve the same arrivals. err = (sim - real) / real.", "",
             host_line(data["cases"], real_root), "",
             "Goals at every level, over its points: " + ", ".join(
                 f"{k} median <= {g[0]:.0%}, p90 <= {g[1]:.0%}" for k, g in LEVEL_GOALS.items())
             + f"; the mean signed error of each within +-{SIGNED_GOAL:.0%}.", ""]
    lines += _levels(data["levels"]) + [""] + spread.markdown(data) + _best(data["best"]) + ["", "## Each case", ""] \
        + case_table(data["cases"], SHOWN)
    hits = [r for r in data["cases"] + (data.get("replicate") or {}).get("cases", []) if r.get("prefix_hit")]
    if hits:
        lines += ["", "## Prompt tokens read from the prefix cache", "",
                  "The shared-prefix cases (prefix cache on both sides), each visit's runs: the share of prompt "
                  "tokens each side read from its cache.", "", "| case | visit | real / sim |", "|---|---|---|"]
        lines += [f"| {r['case']} | {r['real_run']} | {r['prefix_hit']['real']:.1%} / {r['prefix_hit']['sim']:.1%} |"
                  for r in hits]
    lines += ["", "## What went into the steps past saturation", "",
              "The levels past saturation, real against simulated (`steps.csv`, each side's own run): steps, "
              "prompt-only / mixed / decode-only steps, mean decoding requests, verify and prompt tokens a step, "
              "busy seconds.", "", "| case | real | simulated |", "|---|---|---|"]
    lines += [_composition(r) for r in data["cases"] if r["level"] > 1 and r.get("composition")]
    lines += ["", "## Each served step priced by the profile", "",
              "Median of (model - real) / real over the steps of each kind, by running requests "
              "(`steps.csv`'s work priced by the shipped profile; the gap before each step apart).", "",
              "| case | decode steps | mixed steps | prefill steps | gap before the step |", "|---|---|---|---|---|"]
    lines += [_replay(r) for r in data["cases"] if r.get("step_replay")]
    lines += [""] + step_prices.markdown(data["cases"] + (data.get("replicate") or {}).get("cases", []), 0.9)
    lines += ["", "## When a first token is read", "",
              "The decoder reads step n's tokens after it has launched step n+1 (the overlapped loop); the "
              "simulator takes a token's time as its step's end (`dspark_sim/validation/reads.py`). From the end "
              "of the step that prefilled a request's prompt alone to the request's first token, by the step "
              "after it: replayed from a CUDA graph, or eager (prompt chunks past the graphs' tokens, launched "
              "kernel by kernel by the host). Medians over the requests that can be placed so, every case of "
              "the unseen host; the decoder's records before its `read_s` column do not name the step.", ""]
    lines += reads.table(data["cases"])
    rep = data.get("replicate")
    for label, rows in (("", data["cases"]), (" (the replicate's runs)", (rep or {}).get("cases", []))):
        if any(r.get("step_reads") for r in rows):
            lines += ["", f"Every step, where the decoder's records time when its host read the step's tokens "
                      f"(`read_s`){label}: from the step's end to that read, by the step after it. The simulator "
                      "records a step's end as its read.", ""]
            lines += reads.table(rows, "step_reads", "steps")
    if rep:
        lines += ["", f"## Replicate: {', '.join(rep['visits'])}", ""] + _levels(rep["levels"]) + [""] \
            + _best(rep["best"])
    lines += ["", "Decoder runs (`profiles/h200/validation/real/`):", ""] + run_notes(
        data["cases"], ("", rep["cases"]) if rep else None, real_root, command=True)
    return "\n".join(lines) + "\n"


def _levels(levels: dict) -> list[str]:
    head = "| level | points | " + " | ".join(f"{k} median / p90 / mean signed" for k in LEVEL_KEYS) + " | goals |"
    lines = ["## Each level", "", head, "|---|---|" + "---|" * len(LEVEL_KEYS) + "---|"]
    for level, s in levels.items():
        cells = []
        for k in LEVEL_KEYS:
            m = s["metrics"].get(k)
            cells.append("-" if m is None else f"{m['median']:.1%} / {m['p90']:.1%} / {m['mean_signed']:+.1%}")
        lines.append(f"| {float(level):.1f}x | {s['points']} | " + " | ".join(cells)
                     + f" | {'met' if s['met'] else '**missed**'} |")
    return lines


def _best(best: list[dict]) -> list[str]:
    decided = [b for b in best if b["decides"]]
    agree = sum(b["agree"] for b in decided)
    lines = ["## The best method at each load", "",
             f"Lowest mean end-to-end latency, and highest output throughput: real against simulated. Where the "
             f"real margin of the best over the next exceeds {MARGIN:.0%}, they must agree: {agree} of "
             f"{len(decided)} do.", "", "| family | batching | level | by | real best (margin) | simulated best | agree |",
             "|---|---|---|---|---|---|---|"]
    for b in best:
        mark = ("yes" if b["agree"] else "**no**") if b["decides"] else ("yes" if b["agree"] else "no (margin small)")
        lines.append(f"| {b['family']} | {b['batching']} | {b['level']:.1f}x | {b['by']} | {b['real']} "
                     f"({b['margin']:.1%}) | {b['sim']} | {mark} |")
    return lines


def _composition(r: dict) -> str:
    def cell(c):
        return (f"{c['steps']} ({c['prefill_only']} / {c['mixed']} / {c['decode_only']}), {c['mean_decode_reqs']:.1f} "
                f"/ {c['mean_verify_tokens']:.1f} / {c['mean_prefill_tokens']:.0f}, {c['busy_s']:.2f} s")
    return f"| {r['case']} | {cell(r['composition']['real'])} | {cell(r['composition']['sim'])} |"


def _replay(r: dict) -> str:
    d, fmt = r["step_replay"], replay_cell
    return f"| {r['case']} | {fmt(d['decode'])} | {fmt(d.get('mixed'))} | {fmt(d['prefill'])} | {fmt(d['sched'])} |"
