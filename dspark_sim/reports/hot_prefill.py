"""docs/profiles.md's block on the power-limit term: the prompt steps timed back to back
against timed as the profiler times them, and the term fitted on them (:mod:`dspark_sim.profiling.hot`)."""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path


def block_text(probe_path: Path, profile_path: Path) -> str:
    """Provenance, the fitted term and its held-out error against none, and the cells by shape."""
    from dspark_sim.cost.profile import load_profile
    from dspark_sim.profiling.hot import shape_rows, with_hot_term

    data = json.loads(Path(probe_path).read_text())
    profile = load_profile(profile_path)
    bare = replace(profile, target=replace(profile.target, hot_ratio=0.0))
    fitted, fit = with_hot_term(bare, Path(probe_path))
    p, t, held = data["provenance"], fitted.target, fit["held_out"]
    summary = lambda s: f"median {100 * s['median']:.1f} %, p90 {100 * s['p90']:.1f} %, max {100 * s['max']:.1f} %, " \
                        f"mean signed {100 * s['mean_signed']:+.1f} %"  # noqa: E731
    idle = float(profile.provenance["prefill_idle"])
    rows = shape_rows(data["cells"], idle, profile.target)
    head = (f"Measured {p['date']} on {p['gpu']} ({p['gpu_uuid']}, the GPU that timed the profile's prompt steps; "
            f"driver {p['driver']}, torch {p['torch']}, triton {p['triton']}); {p['model']}, {p['weights']} weights. "
            f"Made by `python benchmarks/prefill_clocks.py --run`, `{Path(probe_path).name}` under profiles/h200/. "
            f"The profile's `hot_ratio` {t.hot_ratio:.4f} past a duty of {t.hot_duty0:g} (the profiler's "
            f"`prefill_idle` {idle:g}), over `hot_window_s` {t.hot_window_s:g} s (`python benchmarks/fit_profiles.py "
            f"--post-only`), prices the back-to-back steps, each chunk size held out in turn, at "
            f"{summary(held['with'])}; taking each at its step timed as the profiler times it (no term) is {summary(held['without'])} "
            f"over the same {fit['shapes']} shapes. Steps idled longer than the profiler's, which the term leaves at "
            f"their price as profiled: {summary(held['cooler'])}.")
    lines = ["| chunk | back to back ms | as profiled ms | slower | linear share of the price |", "|---|---|---|---|---|"]
    for chunk, hot, base, share in zip(rows["chunk"], rows["hot_s"], rows["base_s"], rows["share"]):
        lines.append(f"| {chunk:.0f} | {1e3 * hot:.2f} | {1e3 * base:.2f} | {hot / base - 1:+.1%} | {share:.2f} |")
    return "\n".join([head, ""] + lines)


def decode_block_text(probe_path: Path, profile_path: Path) -> str:
    """The decode steps' term: provenance, the ratios the profile keeps, their held-out error
    against none, and the steps timed (``benchmarks/served_steps.py --part after``)."""
    from dspark_sim.cost.profile import load_profile
    from dspark_sim.profiling.hot import decode_hot_rows, held_out_reqs

    data = json.loads(Path(probe_path).read_text())
    knots, rows, points = decode_hot_rows(data, probe_path)
    held = held_out_reqs(knots, rows, points)
    t, p = load_profile(profile_path).target, data["provenance"]
    summary = lambda s: f"median {100 * s['median']:.1f} %, p90 {100 * s['p90']:.1f} %, max {100 * s['max']:.1f} %, " \
                        f"mean signed {100 * s['mean_signed']:+.1f} %"  # noqa: E731
    kept = "the profile's" if (t.hot_decode_reqs, t.hot_decode) == (knots, rows) else "NOT the profile's (refit it)"
    head = (f"Measured {p['date']} on {p['gpu']} ({p['gpu_uuid']}, a GPU neither the profile nor the load sweeps were "
            f"timed on; driver {p['driver']}, torch {p['torch']}, triton {p['triton']}; tree {p['tree']}); {p['model']}, "
            f"{p['weights']} weights, decode steps over long-tailed contexts, the prompt steps {data['points'][0]['chunk']} "
            f"tokens. Made by `bash benchmarks/served_visit.sh after` (`python benchmarks/served_steps.py --part after`), "
            f"`{Path(probe_path).name}` under profiles/h200/raw/. The ratios ({kept}; `python benchmarks/fit_profiles.py "
            f"--post-only`) price the steps after a second of prompt steps from the same steps after a second idle, "
            f"each request count held out in turn, at {summary(held['with'])}; taking each at its cool price (no term) "
            f"is {summary(held['without'])}.")
    lines = ["| drafter | requests | after a second idle ms | after a second of prompt steps ms | slower | right after "
             "one prompt step ms | right after a decode step ms |", "|---|---|---|---|---|---|---|"]
    for q in sorted(data["points"], key=lambda q: (q["kind"], q["reqs"])):
        lines.append(f"| {q['kind']} | {q['reqs']} | {1e3 * q['cool_s']:.2f} | {1e3 * q['hot_s']:.2f} | "
                     f"{q['hot_s'] / q['cool_s'] - 1:+.1%} | {1e3 * q['after_prompt_s']:.2f} | {1e3 * q['after_decode_s']:.2f} |")
    return "\n".join([head, ""] + lines)


def mixed_block_text(probe_path: Path) -> str:
    """The decode steps and the mixed steps after a second of served-like mixed steps against
    after a second idle (``benchmarks/served_steps.py --part after --hold-mixed``); not fitted."""
    data = json.loads(Path(probe_path).read_text())
    p = data["provenance"]
    head = (f"Measured {p['date']} on {p['gpu']} ({p['gpu_uuid']}, a GPU neither the profile nor the load sweeps were "
            f"timed on; driver {p['driver']}, torch {p['torch']}, triton {p['triton']}; tree {p['tree']}); {p['model']}, "
            f"{p['weights']} weights. Made by `bash benchmarks/served_visit.sh after_mixed`, `{Path(probe_path).name}` "
            "under profiles/h200/raw/: the held steps are mixed steps, the same decode rows beside a "
            f"{data['points'][0]['chunk']}-token chunk, as a saturated server under mixed batching runs them. No term is "
            "fitted on it yet.")
    lines = ["| drafter | requests | decode step: after a second idle ms | after a second of mixed steps ms | slower | "
             "mixed step: cool ms | after a second of its kind ms | slower |", "|---|---|---|---|---|---|---|---|"]
    for q in sorted(data["points"], key=lambda q: (q["kind"], q["reqs"])):
        lines.append(f"| {q['kind']} | {q['reqs']} | {1e3 * q['cool_s']:.2f} | {1e3 * q['hot_s']:.2f} | "
                     f"{q['hot_s'] / q['cool_s'] - 1:+.1%} | {1e3 * q['held_cool_s']:.1f} | {1e3 * q['held_hot_s']:.1f} | "
                     f"{q['held_hot_s'] / q['held_cool_s'] - 1:+.1%} |")
    return "\n".join([head, ""] + lines)
