"""``docs/acceptance.md``'s blocks from the fitted presets file (``benchmarks/fit_acceptance.py``
writes it): the presets against the paper's Table 1, Fig. 2's shapes, and the model's limits."""
from __future__ import annotations

from dspark_sim.acceptance.builtin import format_table


def _made(doc: dict) -> str:
    h = doc["header"]
    return (f"Made from `dspark_sim/acceptance/presets.json` (`python {h['generated_by']}` on {h['date']}, seed "
            f"{h['seed']}, {h['num_requests']} requests x {h['steps_per_request']} steps of fitting draws).")


def table_block(doc: dict) -> str:
    """Target vs fit vs replay for every preset, as the fit printed it."""
    presets = doc["presets"]
    todo = [{"drafter": p["drafter"], "target": p["target"], "domain": p["domain"], "dataset": p.get("dataset")}
            for p in presets]
    return _made(doc) + "\n\n" + format_table(todo, [p["fit"] for p in presets], markdown=True)


def fig2_block(doc: dict, target: str = "qwen3-4b") -> str:
    """Fig. 2's conditional acceptance at positions 1 and 7 beside the fitted target curve's
    conditional acceptance by position (each preset's mu is solved so its simulation gives that curve)."""
    from dspark_sim.acceptance.paper import FIG2_SHAPES

    lines = [_made(doc), "", "| drafter | domain | Fig. 2 (pos 1 -> 7) | fitted target curve, positions 1.. |",
             "|---|---|---|---|"]
    for p in doc["presets"]:
        if p["target"] != target or p.get("dataset") or p["drafter"] not in FIG2_SHAPES:
            continue
        a = p["fit"]["target_accept"]
        cond = [a[0]] + [a[k] / a[k - 1] for k in range(1, len(a))]
        first, last = FIG2_SHAPES[p["drafter"]][p["domain"]]
        lines.append(f"| {p['drafter']} | {p['domain']} | {first:.2f} -> {last:.2f} | "
                     f"{' '.join(f'{c:.2f}' for c in cond)} |")
    return "\n".join(lines)


def limits_block(doc: dict) -> str:
    """How close the fits came to their targets, over every preset: accepted length on replay against
    Table 1, AUC at the last position, raw and STS ECE."""
    h, presets = doc["header"], doc["presets"]
    cells = [p["fit"] for p in presets if p.get("dataset")]
    err = [abs(f["check_accept_len"] / f["target_accept_len"] - 1) for f in cells]
    fits = [p["fit"] for p in presets]
    auc_last, target = [f["auc"][-1] for f in fits], h["auc_targets"][-1]
    groups: dict[str, list[float]] = {}
    for p in presets:  # the groups short of the target by more than 0.005
        groups.setdefault(f"{p['drafter']} {p['domain']}", []).append(p["fit"]["auc"][-1])
    short = [f"{g} {min(v):.3f}-{max(v):.3f}" for g, v in sorted(groups.items()) if min(v) < target - 0.005]
    sts = [e for f in fits for e in f["ece_sts"]]
    raw = [e for f in fits for e in f["ece_raw"]]
    return "\n".join([
        _made(doc), "",
        f"* Table 1: all {len(cells)} cells within {100 * max(err):.1f} % on replay (the test allows 3 %).",
        (f"* ROC-AUC at position {len(fits[0]['auc'])}: {min(auc_last):.3f}-{max(auc_last):.3f} against "
        f"{target:.3f}; more than 0.005 short in {', '.join(short) or 'none'}."),
        (f"* STS ECE: at most {100 * max(sts):.1f} % at any position of any preset, {100 * sum(sts) / len(sts):.1f} % "
        "on average over positions and presets."),
        (f"* Raw ECE: {100 * min(raw):.1f}-{100 * max(raw):.1f} % over positions and presets (target "
        f"{100 * h['raw_ece_target']:.1f} %).")])
