"""docs/profiles.md's block on the drafters inside a served step: whole decode steps timed as
served against the profiler's drafter alone, the ratio the profile keeps
(:mod:`dspark_sim.profiling.draft_step`), and the same check on another GPU's whole steps."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np


def check_rows(profile, spread: dict) -> list[dict]:
    """The spread-steps probe's whole steps at every request's context the mean (another GPU):
    per drafter point, its drafter's seconds, the profile's price alone and with the ratio."""
    from dspark_sim.cost.shapes import SCALAR
    from dspark_sim.reports.spread_steps import BLOCK

    out = []
    for q in spread["points"]:
        if q.get("contexts") != "uniform" or q.get("kind") not in profile.draft:
            continue
        fit = profile.draft[q["kind"]]
        args = (q["reqs"], BLOCK[q["kind"]], q["context_sum"], SCALAR)
        out.append({"kind": q["kind"], "reqs": q["reqs"], "draft_s": q["draft_s"],
                    "alone_s": float(fit.alone().seconds(*args)),
                    "with_s": float(fit.seconds(*args))})
    return out


def block_text(probe_path: Path, spread_path: Path, profile_path: Path) -> str:
    """Provenance, the ratios and their held-out error, the check on another GPU, the steps."""
    from dspark_sim.cost.profile import load_profile
    from dspark_sim.profiling.draft_step import alone_s, with_draft_step_term
    from dspark_sim.profiling.heldout import signed_summary, summary_text

    profile = load_profile(profile_path)
    fitted, fit = with_draft_step_term(profile, Path(probe_path))
    kept = "the profile's" if all(fitted.draft[k] == profile.draft[k] for k in fit["ratios"]) else \
        "NOT the profile's (refit it)"
    p = json.loads(Path(probe_path).read_text())["provenance"]
    spread = json.loads(Path(spread_path).read_text())
    rows = check_rows(profile, spread)
    err = lambda key: signed_summary(np.array([r[key] / r["draft_s"] - 1.0 for r in rows]))  # noqa: E731
    ratios = "; ".join(f"{kind} " + ", ".join(f"{100 * r:+.1f} % at {k:g}" for k, r in zip(*v))
                       for kind, v in fit["ratios"].items())
    head = (f"Measured {p['date']} on {p['gpu']} ({p['gpu_uuid']}, a GPU neither the profile nor the load sweeps were "
            f"timed on; driver {p['driver']}, torch {p['torch']}, triton {p['triton']}; tree {p['tree']}); {p['model']}, "
            f"{p['weights']} weights. Made by `bash benchmarks/served_visit.sh layout`, `{Path(probe_path).name}` under "
            f"profiles/h200/raw/: whole decode steps as served, the drafter's part by device events. The profile's "
            f"in-step ratios ({kept}; `python benchmarks/fit_profiles.py --post-only`): {ratios} requests; each request "
            f"count held out in turn they price these drafter steps at {summary_text(fit['held_out']['with'])}, the price "
            f"alone at {summary_text(fit['held_out']['without'])}. Checked on another GPU's whole steps "
            f"({spread['provenance']['gpu_uuid']}, `profiles/h200/validation/steps/spread_steps.json`, every request "
            f"at the context mean, {len(rows)} points, {min(r['reqs'] for r in rows)}-{max(r['reqs'] for r in rows)} "
            f"requests): with the ratio {summary_text(err('with_s'))}; "
            f"alone {summary_text(err('alone_s'))}.")
    lines = ["| drafter | requests | pages | drafter in a whole step ms | priced alone ms | in step / alone |",
             "|---|---|---|---|---|---|"]
    for q in fit["points"]:
        s = alone_s(profile, q)
        lines.append(f"| {q['kind']} | {q['reqs']} | {q['layout']} | {1e3 * q['draft_s']:.3f} | {1e3 * s:.3f} | "
                     f"{q['draft_s'] / s - 1:+.1%} |")
    lines += ["", "| drafter | requests | another GPU's whole step ms | priced alone ms | priced with the ratio ms |",
              "|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['kind']} | {r['reqs']} | {1e3 * r['draft_s']:.3f} | {1e3 * r['alone_s']:.3f} | "
                     f"{1e3 * r['with_s']:.3f} |")
    return "\n".join([head, ""] + lines)
