"""docs/profiles.md's block on the served-step probe (``benchmarks/served_steps.py``): decode
steps of requests sharing prefix pages beside the same steps unshared, the shared-prefix term
fitted on them (:mod:`dspark_sim.profiling.shared`) and its held-out error, and eager steps
behind a spin of a share of their own launch time."""
from __future__ import annotations

import json
from pathlib import Path

SPINS = (0.0, 0.5, 1.0, 2.0)  # the spin ahead of an eager step, in its own launch times


def table(data: dict) -> list[str]:
    """The shared-prefix steps against each R's unshared one, and the eager steps by spin."""
    pts = data["points"]
    lines = ["| kind | R | groups | shared tokens | distinct pages | step ms | target ms | target vs unshared |",
             "|---|---|---|---|---|---|---|---|"]
    for p in (p for p in pts if p["part"] == "shared"):
        base = next((b for b in pts if b["part"] == "shared" and b["kind"] == p["kind"] and b["reqs"] == p["reqs"]
                     and b["groups"] == 0), None)
        rel = f"{p['verify_s'] / base['verify_s'] - 1:+.1%}" if base else "-"
        lines.append(f"| {p['kind']} | {p['reqs']} | {p['groups'] or '-'} | {p['shared_tokens']:,} | "
                     f"{p['distinct_pages']:,} | {p['step_s'] * 1e3:.3f} | {p['verify_s'] * 1e3:.3f} | {rel} |")
    eager = [p for p in pts if p["part"] == "eager"]
    if eager:
        lines += ["", "| R | chunk | launch ms | " + " | ".join(f"GPU ms behind {f:g}x launch" for f in SPINS) + " |",
                  "|---|---|---|" + "---|" * len(SPINS)]
        for p in eager:
            lines.append(f"| {p['reqs']} | {p['chunk']} | {p['launch_s'] * 1e3:.1f} | "
                         + " | ".join(f"{p['gpu_s'][str(f)] * 1e3:.3f}" for f in SPINS) + " |")
    return lines


def block_text(probe_path: Path, profile_path: Path) -> str:
    """The block: provenance, the fitted ratios and their held-out error against none, the table."""
    from dspark_sim.cost.profile import load_profile
    from dspark_sim.profiling.shared import with_shared_term

    data = json.loads(Path(probe_path).read_text())
    profile = load_profile(profile_path)
    _, fit = with_shared_term(profile, Path(probe_path))
    p = data["provenance"]
    t = profile.target
    held = fit["held_out"]
    ratios = ", ".join(f"{r:.3f} at width {w:g}" for w, r in zip(t.shared_widths, t.shared_ratio))
    summary = lambda s: f"median {100 * s['median']:.1f} %, p90 {100 * s['p90']:.1f} %, max {100 * s['max']:.1f} %, " \
                        f"mean signed {100 * s['mean_signed']:+.1f} %"  # noqa: E731
    head = (f"Measured {p['date']} on {p['gpu']} ({p['gpu_uuid']}; driver {p['driver']}, torch {p['torch']}, triton "
            f"{p['triton']}; tree {p['tree']}); {p['model']}, {p['weights']} weights, median of {p['steps']} decode steps "
            f"(shared prefixes) and of {p['reps']} eager steps. Made by `python benchmarks/served_steps.py --run` (the "
            f"command in its docstring), `{Path(probe_path).as_posix().split('profiles/', 1)[-1]}` under profiles/. "
            f"The profile's `shared_ratio` ({ratios}; `python benchmarks/fit_profiles.py --post-only`) prices the "
            f"target's step on the shared points, each whole level of R held out in turn, at {summary(held['with'])}; "
            f"taking each shared step at its unshared one (no term) is {summary(held['without'])} over the same "
            f"{fit['points']} points.")
    return "\n".join([head, ""] + table(data))
