"""The fidelity report: docs/validation.md and its plot of the errors by case (:mod:`.fidelity`'s rows)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from dspark_sim.metrics.plots import pyplot
from dspark_sim.validation.fidelity import summarise


def plot_errors(rows: list[dict], path: Path) -> None:
    """Relative error of the headline metrics, one group of bars per case (a cross marks a
    run of an earlier decoder)."""
    plt = pyplot()
    keys = ("output_throughput", "p50_tpot_ms", "p99_tpot_ms", "mean_ttft_ms", "p99_ttft_ms")
    fig, ax = plt.subplots(figsize=(max(6, 1.3 * len(rows)), 4.5))
    width = 0.8 / len(keys)
    for j, key in enumerate(keys):
        err = [100 * r["metrics"][key]["rel_error"] if key in r["metrics"] else np.nan for r in rows]
        ax.bar(np.arange(len(rows)) + (j - len(keys) / 2 + 0.5) * width, np.clip(err, -100, 200), width,
               label=key)
    for i, r in enumerate(rows):
        if not r["current_decoder"]:
            ax.plot(i, -95, "kx")
    for y in (-10, -5, 5, 10):
        ax.axhline(y, color="grey", lw=0.6, ls="--")
    ax.set_xticks(np.arange(len(rows)), [r["case"] for r in rows], rotation=30, ha="right", fontsize=8)
    ax.set(ylabel="(sim - real) / real, % (clipped to -100..200)",
           title="simulator against the real decoder on the H200 (x: an earlier decoder)")
    ax.legend(fontsize=7, ncol=3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def summary_lines(summary: dict) -> list[str]:
    """The error summary as a markdown table."""
    lines = ["| metric | median abs err | p90 | max | points | goal |", "|---|---|---|---|---|---|"]
    for key, s in summary.items():
        goal = f"<= {s['goal']:.0%}" if s["goal"] else "-"
        ok = "" if not s["goal"] else (" (met)" if s["median"] <= s["goal"] else " (**missed**)")
        lines.append(f"| {key} | {s['median']:.1%}{ok} | {s['p90']:.1%} | {s['max']:.1%} | {s['cases']} | {goal} |")
    return lines


def markdown(rows: list[dict], summary: dict, prov: dict, real: str = "DIR",
             replicate: tuple[str, list[dict]] | None = None, real_root: Path | None = None) -> str:
    """docs/validation.md: what the comparison found, the error summaries and every case.
    ``real_root`` holds the decoder runs (their ``notes.json``)."""
    head = ("# Simulator against the real decoder on traces (H200)\n\n"
            f"Made by `python benchmarks/fidelity.py compare --real {real}` from the decoder runs of "
            "`python benchmarks/fidelity.py run` (`bash benchmarks/h200_call.sh fidelity` through the "
            f"device tool). Real: {prov.get('gpu')}, driver {prov.get('driver')}, CUDA "
            f"{prov.get('cuda')}, torch {prov.get('torch')}, triton {prov.get('triton')}, "
            f"{str(prov.get('date'))[:10]}; Qwen3-8B shape, random bf16 weights, synthetic acceptance, "
            "temperature 1. Simulated: the same scenario files (`profiles/h200/validation/cases/`), "
            "shipped profile `profiles/h200/qwen3-8b.json`, replaying exactly the requests the decoder "
            "served (rebuilt from its `requests.csv`). err = (sim - real) / real; both runs, the "
            "scenario and per-case plots are in `profiles/h200/validation/runs/<case>/`.\n\n"
            "What the comparison found:\n\n"
            "- **Stalls in the engine, not the model.** Every large error of the first runs was a "
            "step that compiled a Triton kernel or captured a CUDA graph while serving: the prefill "
            "attention took the chunk count as a compile-time constant (`visit2`); `schedule_verify` "
            "compiled one binary per pair of request and lagged-request row blocks, and another for "
            "the first steps without a lag, 7-19 s each (`visit5`); the step metadata's int32 parts "
            "started at offsets that moved with the token and request counts, and Triton specialises "
            "on pointer alignment (`visit6`); the attention kernel specialised on a prefill's token "
            "and chunk counts (two ~1 s steps in `visit7`'s Azure 1x DSpark case). All fixed in the "
            "decoder; `Decoder.warmup` compiles and captures every step shape before serving, and "
            "each run's `meta.json` lists the steps that still compiled or captured (kernel and "
            "specialisation), the `compiles` column below.\n"
            "- **Decode attention with mixed lengths** (model fix). One request of 8,192 tokens "
            "among requests of 256 makes a verify step up to 9 ms slower at 64 requests: the "
            "decoder's attention streams each request's keys with at most 16 programs per KV head, "
            "one when the batch is large. The profiler now times such steps (`mixed` part) and the "
            "profile floors decode attention by the longest request over its splits; before, the "
            "simulator's decode steps of 17-128 requests ran 10-40 % fast on the synthetic traces.\n"
            "- **Host time per step** (model fix): fitted to what the graph fits leave of whole "
            "steps; the profiler's draft and verify timers include the host's preparation of their "
            "inputs (0.8 ms for an MTP-3 chain's three passes), so wall - draft - verify missed it. "
            "The profiler's MTP chain now reads the target's last layer, as the served one does.\n"
            "- **The serving loop's time between steps** (decoder fix, then model fix). Each "
            "`steps.csv` row now covers the engine's whole cycle and names its work, so every "
            "served step can be priced by the profile (last table). The gaps between steps "
            "(`sched_s`) were about 1 ms at 256 running requests and grew with output length: the "
            "loop's checks copied every request's output tokens two to three times a step "
            "(`visit9`, 1.1 ms); they now read counts, and at 129-256 requests the gap fell to "
            "0.18-0.26 ms without speculation (`visit11`, `visit10`). What is left (retire, admit, "
            "schedule) is measured by the profiler on bursts served by the real loop (`sched` "
            "part) and is a profile term (`schedule`, 17 us + 0.7 us per running request); "
            "steps that retire or admit many requests take longer than the bursts (the gap "
            "column), a few hundred microseconds on 20-80 ms steps. The loop also freezes the garbage collector's view of start-up "
            "objects while serving (`gc.freeze`, as vLLM does).\n"
            "- **Host speed differs between machines.** The same decoder's steps at one running "
            "request took 5.97 ms (no speculation) on `visit11`'s machine and 6.83 ms on "
            "`visit10`'s (`crosscheck.json`): at light load a step is mostly host time, so TPOT "
            "moves 10-15 %. The profile pools its whole-step timings over five processes on two "
            "machines, two of them in `visit11`'s call: the main table is a host the profile has "
            "seen, the replicate (`visit10`) one it has not.\n"
            "- **What remains.** Decode steps of 65-256 served requests run 3-12 % slower than "
            "the profile on the synthetic traces (up to 19 % on Azure 8x's few such steps; last "
            "table). The profiler's `spread` part shows the same gap in isolation: verify steps "
            "over lognormal contexts cost 1-31 % more than at their mean context, and the fit, "
            "which now takes those points, still puts them up to 8 % under at 128-256 requests. "
            "The floor under the longest request does not capture many long requests sharing the "
            "attention's programs; a term for how those programs fill the SMs is the next model "
            "change. Prefill is eager and, under about 1,000 tokens, host-bound (15-25 ms that "
            "move 2x between runs and machines), which moves TTFT at light load. The Azure 1x "
            "slice has 40 requests of 6-90 output tokens and long prompts: a request's TPOT depends on whether a 100 ms prefill fell inside its few "
            "steps, so its p50 sits between two clusters and swings between runs; its mean TPOT "
            "moves less.\n\n")
    current = [r for r in rows if r["current_decoder"]]
    lines = ["## The current decoder", "", f"{len(current)} points: " + ", ".join(r["case"] for r in current)
             + ".", ""] + summary_lines(summarise(current))
    if len(current) != len(rows):
        lines += ["", "## Every point, earlier decoder runs included", ""] + summary_lines(summary)
    if replicate:
        name, rep_rows = replicate
        lines += ["", f"## Replicate on another machine (`{name}`)", "",
                  f"{len(rep_rows)} points: " + ", ".join(r["case"] for r in rep_rows) + ".", ""] \
            + summary_lines(summarise(rep_rows)) + ["", _table(rep_rows)]
    replay = _replay_table(rows)
    return head + "![errors by case](img/validation_errors.png)\n\n" + "\n".join(lines) \
        + "\n\n## Each point\n\n" + _table(rows) + replay \
        + "\n\nDecoder runs (`profiles/h200/validation/real/`):\n\n" + "\n".join(_notes(rows, replicate, real_root)) \
        + "\n"


TABLE_COLS = ("output_throughput", "p50_tpot_ms", "mean_tpot_ms", "p99_tpot_ms", "mean_ttft_ms", "p99_ttft_ms",
              "mean_accept_length")


def _table(rows: list[dict]) -> str:
    table = ["| case | decoder run | " + " | ".join(f"{c} real / sim / err" for c in TABLE_COLS) + " |",
             "|---|---|" + "---|" * len(TABLE_COLS)]
    for r in rows:
        cells = []
        for c in TABLE_COLS:
            m = r["metrics"].get(c)
            cells.append("-" if m is None else f"{m['real']:.1f} / {m['sim']:.1f} / {m['rel_error']:+.1%}")
        run = f"{r['real_run']}{'' if r['current_decoder'] else ' (earlier decoder)'}, {r['passes']} pass"
        if r.get("graphs_captured") is not None:
            run += f", {r['graphs_captured']} graphs captured"
        if r.get("compiles") is not None:
            run += f", {r['compiles']} compiles"
        table.append(f"| {r['case']} | {run} | " + " | ".join(cells) + " |")
    return "\n".join(table)


def _replay_table(rows: list[dict]) -> str:
    """The cost model on each served step (``step_replay``), for runs that record their work."""
    rows = [r for r in rows if r.get("step_replay")]
    if not rows:
        return ""
    fmt = lambda d: "-" if not d or not d["steps"] else (  # noqa: E731
        f"{d['median_error']:+.1%} ({d['steps']}; " + ", ".join(f"{k}: {v:+.0%}" for k, v in d["by_running"].items())
        + ")")
    lines = ["", "", "## Each served step priced by the profile", "",
             "The cost model on the work of every step the decoder served (`steps.csv`: requests, "
             "verify tokens, KV tokens and the longest request, prefill chunks): median of "
             "(model - real) / real over the steps (how many; by running requests). The gap before "
             "each step (`sched_s`: retire, admit, schedule) is priced by the profile's `schedule` "
             "term and compared apart.", "",
             "| case | decode steps | prefill steps | gap before the step |", "|---|---|---|---|"]
    for r in rows:
        d = r["step_replay"]
        lines.append(f"| {r['case']} | {fmt(d['decode'])} | {fmt(d['prefill'])} | {fmt(d['sched'])} |")
    return "\n".join(lines)


def _notes(rows: list[dict], replicate, real_root: Path | None) -> list[str]:
    names = {r["real_run"] for r in rows} | ({r["real_run"] for r in replicate[1]} if replicate else set())
    notes = []
    for root in sorted(names) if real_root is not None else ():
        path = real_root / root / "notes.json"
        if path.is_file():
            n = json.loads(path.read_text())
            notes.append(f"- `{root}`: {n.get('decoder', '')}. {n.get('end', '')}".rstrip())
    return notes
