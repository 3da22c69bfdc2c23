"""docs/profiles.md's blocks on the power-limit terms: the prompt steps timed back to back against
timed as the profiler times them, the decode steps and mixed steps timed after a second of prompt
or mixed steps against after a second idle, and the terms fitted on them over the GPUs
(:mod:`dspark_sim.profiling.hot`)."""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path


def _gpus(hosts: list[dict], key: str) -> str:
    return "; ".join(f"{h['gpu_uuid']} (`{h['file']}`, {h['steps']} steps) {h[key]:.4f}" for h in hosts)


def block_text(probe_path: Path, profile_path: Path, mixed: tuple[Path, ...] = ()) -> str:
    """Provenance, the fitted term (over the GPUs: ``probe_path``'s and the mixed steps held by the
    probes ``mixed``) and its held-out errors against none, and the cells by shape."""
    from dspark_sim.cost.profile import load_profile
    from dspark_sim.profiling.heldout import summary_text
    from dspark_sim.profiling.hot import shape_rows, with_hot_term

    data = json.loads(Path(probe_path).read_text())
    profile = load_profile(profile_path)
    bare = replace(profile, target=replace(profile.target, hot_ratio=0.0))
    fitted, fit = with_hot_term(bare, Path(probe_path), tuple(Path(m) for m in mixed))
    p, t, held, summary = data["provenance"], fitted.target, fit["held_out"], summary_text
    kept = "the profile's" if t.hot_ratio == profile.target.hot_ratio else "NOT the profile's (refit it)"
    idle = float(profile.provenance["prefill_idle"])
    rows = shape_rows(data["cells"], idle, profile.target)
    head = (f"Measured {p['date']} on {p['gpu']} ({p['gpu_uuid']}, the GPU that timed the profile's prompt steps; "
            f"driver {p['driver']}, torch {p['torch']}, triton {p['triton']}); {p['model']}, {p['weights']} weights. "
            f"Made by `python benchmarks/prefill_clocks.py --run`, `{Path(probe_path).name}` under profiles/h200/. "
            f"`hot_ratio` {t.hot_ratio:.4f} ({kept}; `python benchmarks/fit_profiles.py --post-only`), past a duty of "
            f"{t.hot_duty0:g} (the profiler's `prefill_idle` {idle:g}), over `hot_window_s` {t.hot_window_s:g} s: the mean "
            f"over the GPUs of each one's median ratio ({_gpus(fit['hosts'], 'ratio')}; boards differ in "
            f"how far their clock falls at the power limit). On this GPU it prices the back-to-back steps, each chunk size "
            f"held out in turn with this GPU's ratio, at {summary(held['with'])}; taking each at its step timed as the "
            f"profiler times it (no term) is {summary(held['without'])} over the same {fit['shapes']} shapes. Steps idled "
            f"longer than the profiler's, which the term leaves at their price as profiled: {summary(held['cooler'])}."
            + (f" Each GPU held out in turn, its hot steps priced with the other GPUs' ratio: {summary(fit['by_host']['with'])}"
               f" (no term: {summary(fit['by_host']['without'])})." if fit["by_host"] else ""))
    lines = ["| chunk | back to back ms | as profiled ms | slower | linear share of the price |", "|---|---|---|---|---|"]
    for chunk, hot, base, share in zip(rows["chunk"], rows["hot_s"], rows["base_s"], rows["share"]):
        lines.append(f"| {chunk:.0f} | {1e3 * hot:.2f} | {1e3 * base:.2f} | {hot / base - 1:+.1%} | {share:.2f} |")
    return "\n".join([head, ""] + lines)


def decode_block_text(probe_paths: list[Path], profile_path: Path) -> str:
    """The decode steps' term: each probe's provenance, the ratios the profile keeps (the mean over
    the probes), their held-out errors against none, and the steps timed on the first probe's GPU
    (``benchmarks/served_steps.py --part after``; the others' in the hot-mixed block)."""
    from dspark_sim.cost.profile import load_profile
    from dspark_sim.profiling.heldout import summary_text
    from dspark_sim.profiling.hot import with_decode_hot_term

    profile = load_profile(profile_path)
    t = profile.target
    fitted, fit = with_decode_hot_term(profile, probe_paths)
    kept = "the profile's" if (t.hot_decode_reqs, t.hot_decode) == (fitted.target.hot_decode_reqs, fitted.target.hot_decode) \
        else "NOT the profile's (refit it)"
    data = [json.loads(Path(q).read_text()) for q in probe_paths]
    gpus = "; ".join(
        f"{d['provenance']['gpu_uuid']} on {d['provenance']['date']} (`{Path(q).name}`, after a second of "
        f"{d['points'][0].get('hold', 'prompt')} steps of a {d['points'][0]['chunk']}-token chunk; tree {d['provenance']['tree']})"
        for q, d in zip(probe_paths, data))
    p = data[0]["provenance"]
    head = (f"Measured on {p['gpu']}s neither the profile nor the load sweeps were timed on (driver {p['driver']}, torch "
            f"{p['torch']}, triton {p['triton']}): {gpus}; {p['model']}, {p['weights']} weights, decode steps over "
            f"long-tailed contexts. Made by `bash benchmarks/served_visit.sh after` and `after_mixed` (`python "
            f"benchmarks/served_steps.py --part after [--hold-mixed]`), under profiles/h200/raw/. The ratios ({kept}; "
            f"`python benchmarks/fit_profiles.py --post-only`), the mean over the GPUs at each drafter and request count, "
            f"price the steps after a second of prompt (or mixed) steps from the same steps after a second idle, each request count "
            f"held out in turn, at {summary_text(fit['held_out']['with'])}; taking each at its cool price (no term) is "
            f"{summary_text(fit['held_out']['without'])}."
            + (f" Each GPU held out in turn, priced with the other GPUs' ratios: {summary_text(fit['by_host']['with'])}."
               if fit["by_host"] else ""))
    lines = ["| drafter | requests | after a second idle ms | after a second of prompt steps ms | slower | right after "
             "one prompt step ms | right after a decode step ms |", "|---|---|---|---|---|---|---|"]
    for q in sorted(data[0]["points"], key=lambda q: (q["kind"], q["reqs"])):
        lines.append(f"| {q['kind']} | {q['reqs']} | {1e3 * q['cool_s']:.2f} | {1e3 * q['hot_s']:.2f} | "
                     f"{q['hot_s'] / q['cool_s'] - 1:+.1%} | {1e3 * q['after_prompt_s']:.2f} | {1e3 * q['after_decode_s']:.2f} |")
    return "\n".join([head, ""] + lines)


def mixed_block_text(probe_path: Path) -> str:
    """The decode steps and the mixed steps after a second of served-like mixed steps against
    after a second idle (``benchmarks/served_steps.py --part after --hold-mixed``), which both
    power-limit terms take as another GPU's."""
    data = json.loads(Path(probe_path).read_text())
    p = data["provenance"]
    head = (f"Measured {p['date']} on {p['gpu']} ({p['gpu_uuid']}, a GPU neither the profile nor the load sweeps were "
            f"timed on; driver {p['driver']}, torch {p['torch']}, triton {p['triton']}; tree {p['tree']}); {p['model']}, "
            f"{p['weights']} weights. Made by `bash benchmarks/served_visit.sh after_mixed`, `{Path(probe_path).name}` "
            "under profiles/h200/raw/: the held steps are mixed steps, the same decode rows beside a "
            f"{data['points'][0]['chunk']}-token chunk, as a saturated server under mixed batching runs them. Both "
            "power-limit terms take it as another GPU's: the mixed steps' ratio joins the prompt steps' term (the "
            "hot-prefill block), the decode steps' ratios the decode steps' term (the hot-decode block).")
    lines = ["| drafter | requests | decode step: after a second idle ms | after a second of mixed steps ms | slower | "
             "mixed step: cool ms | after a second of its kind ms | slower |", "|---|---|---|---|---|---|---|---|"]
    for q in sorted(data["points"], key=lambda q: (q["kind"], q["reqs"])):
        lines.append(f"| {q['kind']} | {q['reqs']} | {1e3 * q['cool_s']:.2f} | {1e3 * q['hot_s']:.2f} | "
                     f"{q['hot_s'] / q['cool_s'] - 1:+.1%} | {1e3 * q['held_cool_s']:.1f} | {1e3 * q['held_hot_s']:.1f} | "
                     f"{q['held_hot_s'] / q['held_cool_s'] - 1:+.1%} |")
    return "\n".join([head, ""] + lines)
