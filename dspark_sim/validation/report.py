"""The fidelity report: docs/validation.md and its plot of the errors by case (:mod:`.fidelity`'s rows)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from dspark_sim.metrics.plots import pyplot
from dspark_sim.validation.cases import GPU, MODEL
from dspark_sim.validation.fidelity import GOALS, P90_GOALS, summarise


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
    """The error summary as a markdown table, the median and the p90 over cases each against its goal."""
    lines = ["| metric | median abs err | p90 | max | mean signed err | points | goal median / p90 |",
             "|---|---|---|---|---|---|---|"]
    for key, s in summary.items():
        goal, goal_p90 = GOALS.get(key), P90_GOALS.get(key)
        text = f"<= {goal:.0%} / <= {goal_p90:.0%}" if goal else "-"
        ok = "" if not goal else (" (met)" if s["median"] <= goal else " (**missed**)")
        ok90 = "" if not goal_p90 else (" (met)" if s["p90"] <= goal_p90 else " (**missed**)")
        signed = f"{s['mean_signed']:+.1%}" if "mean_signed" in s else "-"
        lines.append(f"| {key} | {s['median']:.1%}{ok} | {s['p90']:.1%}{ok90} | {s['max']:.1%} | {signed} | "
                     f"{s['cases']} | {text} |")
    return lines


def profile_hosts() -> set[str]:
    """The GPU uuids that timed any part of the shipped profile (its provenance and every file
    merged into it)."""
    from dspark_sim.cost.profile import load_profile, shipped_profile_path

    hosts, todo = set(), [load_profile(shipped_profile_path(GPU, MODEL)).provenance]
    while todo:
        prov = todo.pop()
        hosts |= {prov["gpu_uuid"]} if prov.get("gpu_uuid") else set()
        todo += prov.get("merged_from", [])
    return hosts


def host_groups(rows: list[dict], real_root: Path | None) -> list[tuple[str, list[dict]]]:
    """``(kind, rows)`` for the runs on hosts the profile never saw (``unseen``, the strict
    headline), on hosts that timed part of it (``seen``) and on hosts their notes do not name
    (``unknown``), in that order, the empty ones left out."""
    timed = profile_hosts()
    groups: dict[str, list[dict]] = {"unseen": [], "seen": [], "unknown": []}
    for r in rows:
        uuid = _notes_of(real_root, r["real_run"]).get("gpu_uuid")
        groups["unknown" if uuid is None else "seen" if uuid in timed else "unseen"].append(r)
    return [(kind, group) for kind, group in groups.items() if group]


HOST_LINES = {
    "unseen": "**Host: one the profile never saw** (no part of the profile was timed on its GPU uuid): the "
              "strict headline.",
    "seen": "**Host: one the profile was timed on** (part of the profile was timed on the same GPU uuid, the runs' "
            "notes say which): these errors are in-sample for the host, not the strict headline; the goals are "
            "for a host the profile never saw.",
    "unknown": "**Host:** not recorded for these runs, so whether the profile saw it is unknown: read these errors "
               "as in-sample for the host."}


def host_line(rows: list[dict], real_root: Path | None) -> str:
    """What each host the ``rows`` ran on was to the profile (:data:`HOST_LINES`), one line."""
    return " ".join(HOST_LINES[kind] for kind, _ in host_groups(rows, real_root))


HEADINGS = {"unseen": " on a host the profile never saw", "seen": " on a host the profile saw",
            "unknown": " on a host its notes do not name"}


def _notes_of(real_root: Path | None, run: str) -> dict:
    path = real_root / run / "notes.json" if real_root is not None else None
    return json.loads(path.read_text()) if path is not None and path.is_file() else {}


def _group_lines(kind: str, rows: list[dict], real_root: Path | None, first: bool) -> list[str]:
    """A group of runs' heading, host line and error summary (the first group is the headline)."""
    heading = "## The current decoder" + ("" if first else HEADINGS[kind])
    lines = [heading, "", HOST_LINES[kind], ""]
    if not first:
        lines += [f"- `{run}`: {_notes_of(real_root, run).get('profile_host', '')}".rstrip()
                  for run in sorted({r["real_run"] for r in rows})] + [""]
    return lines + [f"{len(rows)} points: " + ", ".join(r["case"] for r in rows) + ".", ""] \
        + summary_lines(summarise(rows))


def markdown(rows: list[dict], summary: dict, prov: dict, real: str = "DIR",
             replicate: tuple[str, list[dict]] | None = None, real_root: Path | None = None,
             lockstep: tuple[dict, dict] | None = None) -> str:
    """docs/validation.md: what the comparison found, the error summaries and every case.
    ``real_root`` holds the decoder runs (their ``notes.json``); ``lockstep``: the decoder's loop
    beside the simulator before and after the in-flight step (``benchmarks/lockstep.py``'s data)."""
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
            "How to read it:\n\n"
            "- **The decoder overlaps its steps** (as SGLang's overlap scheduler): step n+1 is "
            "planned and launched while step n runs, the verify metadata is built on the GPU, "
            "DSpark's budget is sized on the host from lagged confidences, and prompt steps up "
            "to 512 tokens replay CUDA graphs. The gap column (`sched_s`) is the GPU's idle time "
            "before a step, the host time the overlap did not hide; the profile's host terms are "
            "fitted to whole overlapped steps (`docs/profiles.md`). Where the time to first token "
            "goes, part by part, decoder against simulator, and whether the simulator overlapped "
            "its steps too (`engine: {overlap: ...}`): `docs/validation_ttft.md`.\n"
            "- **Only runs of the current decoder are compared.** Cases whose runs predate it "
            "(the decoder runs listed at the end say which) need serving again; earlier runs "
            "stay under `profiles/h200/validation/real/` with their notes.\n"
            "- **Seen or unseen host.** Each run's notes name the GPU (its uuid) and whether the "
            "profile's whole-step, gap and prefill parts were timed on it; the goals are those "
            "of a host the profile did not see, the main table's or a replicate's on another "
            "machine (`--replicate`).\n"
            "- **What is circular.** The decoder runs random weights with synthetic acceptance drawn "
            "from the simulator's own acceptance model, so the accept-length (and verify-token) error "
            "only tests the sampling, not the acceptance model; the step times, and the latencies and "
            "throughput they make, are the real test.\n"
            "- **At and past saturation.** These cases run at light and moderate loads. The load sweeps "
            "(chat, long-prompt and shared-prefix traffic at 0.3-1.5x of saturation, both batchings, every "
            "method: `python benchmarks/fidelity.py run --sweeps`) are compared in `docs/validation_sweeps.md` "
            "once their decoder runs exist; the decoder's measured capacity beside `dspark-sim capacity`'s is "
            "`docs/bench/decoder_capacity.md`. What the simulator put into its steps at saturation, and what "
            "changed it, is the section below on it. Past saturation the simulator is optimistic, and the "
            "step records say why (`docs/validation_sweeps.md`, \"Step prices or the schedule\"): the "
            "decoder's own steps priced by the profile miss their measured busy time by what the simulator's "
            "own steps miss it by, case by case, so the steps are filled as the decoder fills them (admission, "
            "chunk sizes, preemption and the overlapped loop agree) and the error is the price of a step with "
            "many decoding requests. Two of its parts are priced now: a decode step whose requests' contexts are "
            "long-tailed runs past the smooth maximum of the KV stream and the longest request's latency once its "
            "attention programs outnumber what the GPU runs at once (the spread term, fitted on the profiler's "
            "spread rows; `docs/profiles.md` shows it, and whole served steps of every drafter kind over "
            "long-tailed contexts timed on another H200, priced within a few per cent with the spread term and "
            "under without it), and a step that carries decode rows beside a prompt chunk runs over its two "
            "halves: the decoder plans its attention for the chunk, so every decode row gets the chunk's query "
            "tiles, nearly all empty (the mixed-step term, fitted on what such steps timed on another H200 "
            "(`benchmarks/mixed_steps.py`) cost over their halves; the sweep page's table of these steps by "
            "decoding requests is the step-level evidence). Requests reading the same prefix pages are priced by the "
            "shared-prefix term. Prompt steps served back to back hold the GPU at its power limit and run slower "
            "than the profiler's, which times them half idle, and the decode steps after them run slower too (the "
            "clock stays down): the power-limit terms (`docs/profiles.md`, \"Steps held for seconds\"), the mean "
            "over the H200s they were timed on, price a step by the share of the second before it spent in prompt "
            "steps, in the simulator and in the step replay; the sweep page's table by prefill duty is the "
            "step-level evidence. A drafter runs longer inside a served step than the profiler's replay of it "
            "alone, in the decoder's steps and in whole served-like steps timed apart on two other H200s: the "
            "drafters' in-step ratio (`docs/profiles.md`, \"The drafter inside a served step\"). Not settled: "
            "the decoder's step records lack a step's longest chunk, which sets its decode rows' tiles (the "
            "simulator prices it, the replay of the decoder's steps takes the mean chunk's), so the replay "
            "leaves steps of several chunks beside many decode rows under their price; "
            "`docs/validation_sweeps.md` says what would settle it (the replicate visit22's records carry it). "
            "The overlapped loop's host: the decoder reads a step's tokens only once it has launched the next "
            "step, and an eager next step (prompt chunks past the graphs' tokens) keeps them waiting "
            "milliseconds past their step's end (`docs/validation_sweeps.md`, \"When a first token is read\"; "
            "the decoder's records carry when the host read each step, `read_s`, and the replicate visit22 is "
            "the first served with it: the sweep page tabulates every step's wait). The same loop plans step n+1 only once it has launched step n, "
            "so a request that arrives while the host launches an eager step joins the next step; where the "
            "simulator planned at each step's start, in the shared-prefix sessions at 0.3x one request came a "
            "step later, after the step that caches its prefix, and its prefill missed the prefix the decoder "
            "reads (the sweep page's prefix hits). The simulator now keeps that timeline "
            "(`dspark_sim/serving/launch.py`): a plan once the step before is launched (the profile's eager "
            "launch, the mixed-step probe's median, at most to the step's end: the GPU runs an eager step's "
            "kernels as they are launched, and the decoder's records show no idle GPU after short eager steps; "
            "a graph replay's few milliseconds left out), and a first token read once the next step is "
            "launched. The decoder's loop on virtual time with the same launch gives the simulator's steps and "
            "request times exactly (the lockstep check). Two unseen hosts: the decoder serving the same requests "
            "on the replicate's H200 and on the headline's differs in mean TTFT by more than the signed goal "
            "allows at every level, and no one change of every step time brings the mean signed errors within "
            "the goal on both hosts at any level (`docs/validation_sweeps.md`, \"What the goals ask of step "
            "prices\"): the headline's hosts ask for slower steps, the replicate's for the profile's prices.\n"
            "- **Step rows.** A row ends when the GPU ends the step; requests' times are when "
            "the host reads their tokens, as a client sees them. Runs whose notes say their rows "
            "end when the host read the step attribute a long launch (an eager prefill) to the "
            "step before it: their per-step replay of prompt steps is not a measure of the "
            "profile, their request metrics are.\n\n")
    current = [r for r in rows if r["current_decoder"]]
    lines = []
    for i, (kind, group) in enumerate(host_groups(current, real_root)):
        lines += ([""] if i else []) + _group_lines(kind, group, real_root, first=not i)
    if len(current) != len(rows):
        lines += ["", "## Every point, earlier decoder runs included", ""] + summary_lines(summary)
    if replicate:
        name, rep_rows = replicate
        lines += ["", f"## Replicate on another machine (`{name}`)", "",
                  f"{len(rep_rows)} points: " + ", ".join(r["case"] for r in rep_rows) + ".", ""] \
            + summary_lines(summarise(rep_rows)) + ["", _table(rep_rows)]
    lines += _prefix_lines(current)
    if lockstep is not None:
        from dspark_sim.validation.mechanism import mechanism_lines

        lines += mechanism_lines(*lockstep)
    replay = _replay_table(rows)
    return head + "![errors by case](img/validation_errors.png)\n\n" + "\n".join(lines) \
        + "\n\n## Each point\n\n" + _table(rows) + replay \
        + "\n\nDecoder runs (`profiles/h200/validation/real/`):\n\n" + "\n".join(run_notes(rows, replicate, real_root)) \
        + "\n"


TABLE_COLS = ("output_throughput", "p50_tpot_ms", "mean_tpot_ms", "p99_tpot_ms", "mean_ttft_ms", "p99_ttft_ms",
              "mean_accept_length")


def case_table(rows: list[dict], cols: tuple[str, ...], run_cell=lambda r: r["real_run"]) -> list[str]:
    """One line per case: ``run_cell`` of it, then real / sim / error of each metric in ``cols``."""
    table = ["| case | decoder run | " + " | ".join(f"{c} real / sim / err" for c in cols) + " |",
             "|---|---|" + "---|" * len(cols)]
    for r in rows:
        cells = []
        for c in cols:
            m = r["metrics"].get(c)
            cells.append("-" if m is None else f"{m['real']:.1f} / {m['sim']:.1f} / {m['rel_error']:+.1%}")
        table.append(f"| {r['case']} | {run_cell(r)} | " + " | ".join(cells) + " |")
    return table


def _run_cell(r: dict) -> str:
    run = f"{r['real_run']}{'' if r['current_decoder'] else ' (earlier decoder)'}, {r['passes']} pass"
    if r.get("graphs_captured") is not None:
        run += f", {r['graphs_captured']} graphs captured"
    if r.get("compiles") is not None:
        run += f", {r['compiles']} compiles"
    return run


def _table(rows: list[dict]) -> str:
    table = case_table(rows, TABLE_COLS, _run_cell)
    return "\n".join(table)


def _prefix_lines(rows: list[dict]) -> list[str]:
    """The cases whose prompts share prefixes (prefix cache on both sides): their own error
    summary and the share of prompt tokens each side read from its cache."""
    rows = [r for r in rows if r.get("prefix_hit")]
    if not rows:
        return []
    return ["", "## Shared prefixes (prefix cache on)", "",
            f"{len(rows)} points: " + ", ".join(r["case"] for r in rows) + ". Multi-turn sessions written as "
            "Mooncake traces: the decoder matches cached pages by token ids, the simulator by the "
            "trace's hash ids.", ""] + summary_lines(summarise(rows)) + [
            "", "| case | prompt tokens read from the cache: real / sim |", "|---|---|"] + [
            f"| {r['case']} | {r['prefix_hit']['real']:.1%} / {r['prefix_hit']['sim']:.1%} |" for r in rows]


def replay_cell(d: dict | None) -> str:
    """One part of a step replay (``step_replay``'s decode, mixed, prefill or gap) as a table cell:
    the median error, the steps, and the median by running requests."""
    if not d or not d["steps"]:
        return "-"
    return f"{d['median_error']:+.1%} ({d['steps']}; " + ", ".join(
        f"{k}: {v:+.0%}" for k, v in d["by_running"].items()) + ")"


def _replay_table(rows: list[dict]) -> str:
    """The cost model on each served step (``step_replay``), for runs that record their work."""
    rows = [r for r in rows if r.get("step_replay")]
    if not rows:
        return ""
    fmt = replay_cell
    lines = ["", "", "## Each served step priced by the profile", "",
             "The cost model on the work of every step the decoder served (`steps.csv`: requests, "
             "verify tokens, KV tokens and the longest request, prefill chunks): median of "
             "(model - real) / real over the steps (how many; by running requests). The gap before "
             "each step (`sched_s`: retire, admit, schedule) is priced by the profile's `schedule` "
             "term and compared apart.", "",
             "| case | decode steps | mixed steps (chunks beside decode windows) | prefill steps | gap before the step |",
             "|---|---|---|---|---|"]
    for r in rows:
        d = r["step_replay"]
        lines.append(f"| {r['case']} | {fmt(d['decode'])} | {fmt(d.get('mixed'))} | {fmt(d['prefill'])} | "
                     f"{fmt(d['sched'])} |")
    return "\n".join(lines)


def run_notes(rows: list[dict], replicate, real_root: Path | None, command: bool = False) -> list[str]:
    """One line per decoder run the rows (and a replicate's) come from: its notes' decoder and end
    (and, ``command``, the command it was made by)."""
    names = {r["real_run"] for r in rows} | ({r["real_run"] for r in replicate[1]} if replicate else set())
    notes = []
    for root in sorted(names) if real_root is not None else ():
        path = real_root / root / "notes.json"
        if path.is_file():
            n = json.loads(path.read_text())
            how = f" Made by `{n['command']}`." if command and n.get("command") else ""
            notes.append(f"- `{root}`: {n.get('decoder', '')}. {n.get('end', '')}{how}".rstrip())
    return notes
