"""``report.md``: the winner, the baselines beside it with DSpark's gains, the Pareto plot
of throughput per GPU against tok/s/user (the paper's Fig. 7) and parameter importances."""
from __future__ import annotations

import warnings
from pathlib import Path

import optuna
from optuna.trial import TrialState

from dspark_sim.catalog.drafters import PLACEHOLDER
from dspark_sim.provenance import basis, provenance_line
from dspark_sim.engines import knobs as engine_knobs
from dspark_sim.tuner import pruning, repeats
from dspark_sim.tuner.objective import THROUGHPUT, USER_SPEED, feasible, pareto_front
from dspark_sim.tuner.runner import Job
from dspark_sim.tuner.scenarios import current_config

LABELS = {"dspark": "DSpark (tuned)", "none": "no speculation", "static": "static chain (EAGLE-3 / MTP)",
          "dflash": "DFlash (whole block verified)", "schedule": "block_size per batch size",
          "threshold": "static confidence threshold"}
COLORS = {"dspark": "tab:red", "none": "tab:gray", "static": "tab:blue", "dflash": "tab:orange",
          "schedule": "tab:green", "threshold": "tab:purple"}
UNITS = {"throughput": "tok/s/GPU", "goodput": "good req/s/GPU", "pareto": "tok/s/GPU"}


def knobs(config: dict) -> str:
    """A one-line summary of a trial's configuration."""
    config = current_config(config)
    spec, dep = config.get("speculation", {}), config.get("deployment", {})
    parts = [f"R<={dep.get('max_running_requests')}", f"chunk={dep.get('chunked_prefill_tokens')}"]
    parts += [f"{k}={dep[k]}" for k in ("max_batched_tokens", "batching") if k in dep]
    method = spec.get("method")
    if method in ("dspark", "threshold"):
        top = spec.get("max_verify_len", spec["block_size"] + 1)
        parts += [f"block_size={spec['block_size']}", f"verify={spec.get('min_verify_len', 1)}..{top}"]
    if method == "dspark":
        parts += [spec["scheduler"], f"lag={spec.get('lag_steps', '-')}", f"eps={spec['survival_eps']:.0e}",
                  f"tiers={spec.get('graph_tiers', 'none')}"]
    if method == "threshold":
        parts.append(f"t={spec['threshold']:.2f}")
    if method == "static":
        parts.append(f"{spec.get('drafter')} block_size={spec['block_size']}")
    if method == "schedule":
        parts.append("block_size=" + "/".join(f"{r['block_size']}@{r['max_batch_size'] or 'inf'}"
                                     for r in spec["schedule"]))
    return " ".join(parts)


def _trials(job: Job) -> list[optuna.trial.FrozenTrial]:
    return job.open().get_trials(deepcopy=False, states=(TrialState.COMPLETE,))


def matched_throughput(job: Job, speed: float) -> float | None:
    """A Pareto baseline's best throughput/GPU at a tok/s/user of at least ``speed`` (search seeds)."""
    ok = [t.user_attrs["metrics"] for t in _trials(job) if feasible(t.constraints)]
    return max((m[THROUGHPUT] for m in ok if (m[USER_SPEED] or 0.0) >= speed), default=None)


def rows(winners: dict[str, dict], jobs: list[Job]) -> list[dict]:
    """One row per study, DSpark first, with its confirmed objective.

    For a Pareto study a baseline's value is its best throughput/GPU at DSpark's tok/s/user
    (matched speed)."""
    main = jobs[0]
    ours = winners.get(main.study)
    out = []
    for job in jobs:
        w = winners.get(job.study)
        if w is None:
            continue
        value = w["values"][0]
        if job is not main and ours is not None and main.target.objective == "pareto":
            value = matched_throughput(job, ours["mean"][USER_SPEED] or 0.0)
        out.append({"job": job, "winner": w, "value": value})
    return out


def comparison(jobs: list[Job], winners: dict[str, dict], n_repeats: int) -> dict:
    """Every method's confirmed winners over its repeats and DSpark's difference to each
    (:mod:`dspark_sim.tuner.repeats`)."""
    completed = {job.study: len(job.open().get_trials(deepcopy=False, states=job.counted)) for job in jobs}
    matched = matched_throughput if jobs[0].target.objective == "pareto" else None
    return repeats.summary(repeats.spreads(jobs, winners, completed, matched), n_repeats)


def pareto_plot(jobs: list[Job], winners: dict[str, dict], path: Path, min_speed: float | None) -> None:
    """Throughput per GPU against mean tok/s/user for every trial, each study's front joined."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 5))
    for job in jobs:
        trials = [t for t in _trials(job) if t.user_attrs["metrics"].get(USER_SPEED) is not None]
        if not trials:
            continue
        color, metrics = COLORS.get(job.method, "black"), [t.user_attrs["metrics"] for t in trials]
        ax.scatter([m[USER_SPEED] for m in metrics], [m[THROUGHPUT] for m in metrics], s=8, alpha=0.35,
                   color=color)
        front = sorted((t.user_attrs["metrics"] for t in pareto_front(trials)), key=lambda m: m[USER_SPEED])
        ax.plot([m[USER_SPEED] for m in front], [m[THROUGHPUT] for m in front], "-o", ms=3, color=color,
                label=LABELS.get(job.method, job.method))
        if job.study in winners:
            m = winners[job.study]["mean"]
            ax.scatter([m[USER_SPEED]], [m[THROUGHPUT]], marker="*", s=160, color=color, edgecolor="black",
                       zorder=5)
    if min_speed is not None:
        ax.axvline(min_speed, color="black", ls="--", lw=1, label=f"SLO {min_speed:g} tok/s/user")
    ax.set(xlabel="mean tok/s per user", ylabel="output tok/s per GPU",
           title="Every trial; lines: each method's Pareto front; stars: confirmed winners")
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def importances(job: Job) -> dict[str, float]:
    """PED-ANOVA importances (Optuna's; scipy only, unlike fANOVA) of the knobs every complete trial has."""
    study = job.open()
    if len(_trials(job)) < 4:
        return {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return optuna.importance.get_param_importances(
                study, evaluator=optuna.importance.PedAnovaImportanceEvaluator(), target=lambda t: t.values[0])
        except (RuntimeError, ValueError):  # too few distinct values
            return {}


def nearest_slo(job: Job) -> str | None:
    """When no trial of ``job`` meets the SLO: which constraint binds and the nearest SLO a trial meets.

    The nearest trial is the one whose worst relative violation is smallest (constraints are
    relative to their bounds); the SLO it meets is its worst-seed metrics."""
    trials = [t for t in _trials(job) if t.constraints]
    if not trials or any(feasible(t.constraints) for t in trials):
        return None
    best = min(trials, key=lambda t: max(t.constraints.values()))
    worst, target = best.user_attrs["worst"], job.target
    bounds = {"p99_tpot": ("p99 TPOT", "<=", worst.get("p99_tpot_ms"), target.slo.tpot_ms, " ms"),
              "p99_ttft": ("p99 TTFT", "<=", worst.get("p99_ttft_ms"), target.slo.ttft_ms, " ms"),
              "tok_per_s_user": ("mean tok/s/user", ">=", worst.get(USER_SPEED), target.slo.tok_per_s_user, "")}
    shown = {n: bounds[n] for n in best.constraints if n in bounds}
    binding = "; ".join(f"{label} (the nearest trial reaches {value:,.2f}{unit}, the SLO asks {op} {bound:g}{unit})"
                        for n, (label, op, value, bound, unit) in shown.items() if best.constraints[n] > 0)
    met = ", ".join(f"{label} {op} {value:,.2f}{unit}" for label, op, value, _, unit in shown.values())
    return (f"No {LABELS.get(job.method, job.method)} trial meets the SLO. Binding: {binding}. "
            f"Nearest SLO a trial meets (trial {best.number}, worst seed): {met}.")


def headline(table: list[dict], unit: str, compared: dict | None = None) -> str:
    """The report's verdict line: the tuned DSpark value, its interval and how DSpark compares
    over the repeats (a gain only above the spread)."""
    ours = next((r for r in table if r["job"].method == "dspark"), None)
    if ours is None:
        return "No DSpark trial completed."
    met = "meets" if ours["winner"]["feasible"] else "does NOT meet"
    text = f"**Tuned DSpark: {ours['value']:,.1f} {unit}** ({met} the SLO)." + _interval(ours["winner"], unit)
    methods = (compared or {}).get("methods", {})
    others = {m: e for m, e in methods.items() if m != "dspark" and e.get("mean") is not None}
    if not others:
        studies = [e for m, e in methods.items() if m != "dspark"]
        if any(sum(e.get("completed", ())) for e in studies):
            return text + " No baseline meets the SLO."
        if studies:
            return text + " No baseline was compared: no baseline trial completed (--baseline-trials 0?)."
        return text + " No baseline was compared (--baselines '')."
    best = max(others, key=lambda m: others[m]["mean"])
    n = compared["repeats"]
    return (text + f" Over {n} repeat{'s' if n > 1 else ''} of every study, the best baseline is "
            f"{LABELS.get(best, best)} (mean {others[best]['mean']:,.1f} {unit}); DSpark's mean is "
            f"{repeats.describe(others[best]['vs_dspark'])}.")


def _interval(winner: dict, unit: str) -> str:
    """The winner's interval over its measured error sources (``dspark_sim.intervals``)."""
    iv = winner.get("interval")
    if not iv:
        return " No interval: the cost model is the roofline (no measured error sources)."
    lo, hi = iv["value_interval"]
    text = (f" Interval over the measured error sources (step time x (1 +- {iv['sources']['cost_rel']:.1%}), "
            f"acceptance {iv['sources']['acceptance']}): {lo:,.1f} to {hi:,.1f} {unit}")
    if iv["margin_interval"]:
        m_lo, m_hi = iv["margin_interval"]
        text += f"; SLO margin {m_lo:+.1%} to {m_hi:+.1%}"
    return text + (". The SLO is missed at the pessimistic corner." if not iv["pessimistic"]["feasible"] else ".")


def _table(table: list[dict], unit: str, pareto: bool) -> list[str]:
    value_head = f"{unit} at DSpark's tok/s/user" if pareto else unit
    lines = [f"| method | study | trial | knobs | {value_head} (mean +- sd over seeds) | tok/s/user | p99 TPOT ms | "
             "p99 TTFT ms | SLO met |", "|---|---|---|---|---|---|---|---|---|"]
    for r in table:
        w, m = r["winner"], r["winner"]["mean"]
        value = "-" if r["value"] is None else f"{r['value']:,.1f} +- {w.get('spread', 0.0):,.1f}"
        speed, tpot, ttft = (m.get(k) for k in (USER_SPEED, "p99_tpot_ms", "p99_ttft_ms"))
        lines.append(f"| {LABELS.get(r['job'].method, r['job'].method)} | {r['job'].study} | {w['trial']} | "
                     f"{knobs(w['config'])} | {value} | {speed or 0:.1f} | {tpot or 0:.1f} | {ttft or 0:,.0f} | "
                     f"{'yes' if w['feasible'] else 'no'} |")
    return lines


def _provenance_head(provenance: dict) -> list[str]:
    """The line saying what is not measured, under the settings (none when all is measured)."""
    line = provenance_line(list(provenance.values()))
    return [f"- {line}", ""] if line else []


def _provenance_table(jobs: list[Job], provenance: dict) -> list[str]:
    """Per study: its cost model's basis and its acceptance (``provenance.json`` has the rest)."""
    if not provenance:
        return []
    lines = ["## Where the numbers come from", "", "| method | cost model | acceptance | not measured |",
             "|---|---|---|---|"]
    for job in jobs:
        block = provenance.get(job.study)
        if block is not None:
            acc = block["acceptance"]
            lines.append(f"| {LABELS.get(job.method, job.method)} | {basis(block)} | {acc['kind']}: {acc['detail']} "
                         f"| {'; '.join(block['caveats']) or 'nothing'} |")
    return lines + [""]


def _drafter_lines(drafter) -> list[str]:
    """The DSpark drafter the exports name, and a loud line when it is the placeholder."""
    lines = [f"DSpark drafter: `{drafter.checkpoint}`, trained block {drafter.trained_block} "
             f"(source: {drafter.source}); the search never exceeds the trained block."]
    if drafter.checkpoint == PLACEHOLDER:
        lines.append(f"**The engine configs name the placeholder `{PLACEHOLDER}`: every engine refuses "
                     "them until it is replaced by the drafter's checkpoint** (`dspark-tune --drafter PATH`, "
                     "or `speculation.drafter_checkpoint` in the scenario).")
    return lines


def write(out: Path, jobs: list[Job], winners: dict[str, dict], info: dict) -> str:
    """Write ``report.md``, ``report.json`` and ``pareto.png`` into ``out``; returns the report text.

    ``jobs``: every study of every repeat. Each method is shown by its best confirmed winner
    over its repeats (DSpark's is the one exported); the comparison is over all repeats."""
    picks = repeats.chosen(jobs, winners)
    main = picks["dspark"][0] if "dspark" in picks else jobs[0]
    shown = [main] + [job for method, (job, _) in picks.items() if method != "dspark"]
    table = rows({job.study: record for job, record in picks.values()}, shown)
    unit = UNITS[main.target.objective]
    compared = comparison(jobs, winners, info.get("repeats", 1))
    _write_json(out / "report.json", jobs, picks, compared, info, unit)
    pareto_plot(shown, {job.study: record for job, record in picks.values()}, out / "pareto.png",
                main.target.slo.tok_per_s_user)
    imp = importances(main)
    n = info.get("repeats", 1)
    lines = [f"# dspark-tune report: {jobs[0].study}", "",
             f"- scenario: `{info['scenario']}` ({info['model']} on {info['num_gpus']} x {info['gpu']})",
             f"- objective: {main.target.objective}; SLO: {main.target.describe()}",
             f"- trials: {info['trials']} DSpark, {info.get('baseline_trials', '?')} per baseline"
             f"{'' if info.get('baseline_trials') == info['trials'] else ' (UNEQUAL budgets: not like for like)'}; "
             f"seeds per trial: {list(main.seeds)}; "
             f"finalists re-run on seeds {info['confirm_seeds']}",
             f"- repeats: {n} of every study, TPE sampler seeds {jobs[0].sampler_seed}"
             f"{'' if n == 1 else f'..{jobs[0].sampler_seed + n - 1}'}; the winner (and exports) is the best "
             f"confirmed DSpark winner over them: study `{main.study}`",
             f"- storage: `{info['storage']}`; wall time {info['wall_s']:.0f} s on {info['workers']} worker(s)"
             + (f" (search {info['search_s']:.0f} s, confirmation and interval {info['confirm_s']:.0f} s)"
                if "search_s" in info else ""), "",
             *_provenance_head(info.get("provenance", {})),
             headline(table, unit, compared), "",
             *([nearest, ""] if (nearest := nearest_slo(main)) else []),
             f"## Comparison over {n} repeat{'s' if n > 1 else ''} (same trace, simulation seeds and SLO; budgets in the table)", "",
             *repeats.table(compared, unit, LABELS), "",
             ("One repeat: the spread over sampler seeds is not measured, so no difference is called a gain; "
              "`--repeats 3` (or more) measures it." if n == 1 else
              "A difference is a gain (or a loss) only when it exceeds the combined spread: the standard "
              "deviations over repeats in quadrature, relative to the baseline's mean."), "",
             *pruning.pruned_lines({job.study: job.open().get_trials(deepcopy=False) for job in jobs},
                                   main.slices, len(main.seeds)),
             "## Winners (each method's best over its repeats, confirmed on fresh seeds)", "",
             *_table(table, unit, main.target.objective == "pareto"), "",
             "![Pareto front](pareto.png)", "",
             "## Parameter importances (DSpark study; PED-ANOVA over the knobs every trial has)", "",
             *(["| knob | importance |", "|---|---|", *(f"| {k} | {v:.3f} |" for k, v in imp.items())]
               if imp else ["(not enough complete trials)"]), "",
             *_provenance_table(shown, info.get("provenance", {})),
             "## Engines", "",
             f"Tuned for **{engine_knobs.NAMES[info['engine']]}**: a knob it has no field for is held at its "
             "behaviour, not searched. Which tuned knob each engine honours:", "",
             *engine_knobs.table(), "",
             *_drafter_lines(info["drafter"]), "",
             "## Files", "",
             "- `dspark.yaml`: the winner as a scenario: `dspark-sim run dspark.yaml` replays it",
             "- `provenance.json`: what each study's numbers rest on (cost model terms, acceptance)",
             "- `report.json`: the comparison over repeats and each method's winner, as data",
             "- `sglang.yaml` (+ `sps_table.json`, `sts.json`), `vllm.yaml`, `trtllm.yaml`: engine configs "
             "(docs/tuning.md shows the command that starts each engine with them)",
             *(f"- {note}" for note in info.get("notes", [])),
             f"- the study: `optuna-dashboard {info['storage']}`; other trials: "
             f"`dspark-tune export --study {jobs[0].study} --trial N --format sglang`", ""]
    text = "\n".join(lines)
    (out / "report.md").write_text(text)
    return text


def _write_json(path: Path, jobs: list[Job], picks: dict, compared: dict, info: dict, unit: str) -> None:
    """``report.json``: the settings that define the comparison, each method's winner and the
    comparison over repeats (what ``report.md`` shows, as data)."""
    import json

    first = jobs[0]
    data = {"study": first.study, "objective": first.target.objective, "unit": unit,
            "slo": first.target.describe(), "trials": info["trials"], "baseline_trials": info.get("baseline_trials"),
            "seeds": list(first.seeds), "confirm_seeds": info["confirm_seeds"],
            "sampler_seeds": [first.sampler_seed + r for r in range(info.get("repeats", 1))],
            "winners": {method: {"study": job.study, "trial": rec["trial"], "value": rec["values"][0],
                                 "feasible": rec["feasible"], "config": rec["config"]}
                        for method, (job, rec) in picks.items()},
            "comparison": compared,
            "slices": list(first.slices),
            "pruned": {job.study: pruning.pruned(job.open().get_trials(deepcopy=False), job.slices, len(job.seeds))
                       for job in jobs if job.slices}}
    path.write_text(json.dumps(data, indent=2) + "\n")
