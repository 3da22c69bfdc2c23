"""docs/profiles.md's block on the served-step probe (``benchmarks/served_steps.py``): decode
steps of requests sharing prefix pages beside the same steps unshared, the shared-prefix term
fitted on them (:mod:`dspark_sim.profiling.shared`) and its held-out error, and eager steps
behind a spin of a share of their own launch time."""
from __future__ import annotations

import json
from pathlib import Path

SPINS = (0.0, 0.5, 1.0, 2.0)  # the spin ahead of an eager step, in its own launch times


def table(data: dict) -> list[str]:
    """One table per part the probe timed: shared prefixes against each R's unshared step, pages
    scattered against in order (whole decode steps, and eager steps), the decode step after a
    prompt step against the one after a decode step, the drafter after an L2 flush against back
    to back, and eager steps by spin."""
    pts, lines = data["points"], []
    for part, head, row in _SECTIONS:
        got = [p for p in pts if p["part"] == part]
        if got or part == "shared":
            lines += ([""] if lines else []) + ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
            lines += ["| " + " | ".join(row(got, p)) + " |" for p in got]
    return lines


def _ms(x: float) -> str:
    return f"{x * 1e3:.3f}"


_SECTIONS = (
    ("shared", ("kind", "R", "groups", "shared tokens", "distinct pages", "step ms", "target ms", "target vs unshared"),
     lambda ps, p: (p["kind"], str(p["reqs"]), str(p["groups"] or "-"), f"{p['shared_tokens']:,}", f"{p['distinct_pages']:,}",
                    _ms(p["step_s"]), _ms(p["verify_s"]), _against(ps, p, "verify_s", ("kind", "reqs"), groups=0))),
    ("layout", ("kind", "R", "pages", "step ms", "drafter ms", "target ms", "step vs ordered"),
     lambda ps, p: (p["kind"], str(p["reqs"]), p["layout"], _ms(p["step_s"]), _ms(p["draft_s"]), _ms(p["verify_s"]),
                    _against(ps, p, "step_s", ("kind", "reqs"), layout="ordered"))),
    ("layout_mixed", ("R", "chunk", "pages", "GPU ms (launch hidden)", "vs ordered"),
     lambda ps, p: (str(p["reqs"]), str(p["chunk"]), p["layout"], _ms(p["gpu_s"]),
                    _against(ps, p, "gpu_s", ("reqs",), layout="ordered"))),
    ("after", ("kind", "R", "decode ms after a prompt step", "after a decode step", "difference",
               "after a second of prompt steps", "after a second idle", "hot vs cool"),
     lambda ps, p: (p["kind"], str(p["reqs"]), _ms(p["after_prompt_s"]), _ms(p["after_decode_s"]),
                    f"{p['after_prompt_s'] / p['after_decode_s'] - 1:+.1%}")
     + ((_ms(p["hot_s"]), _ms(p["cool_s"]), f"{p['hot_s'] / p['cool_s'] - 1:+.1%}") if "hot_s" in p else ("-",) * 3)),
    ("draft", ("kind", "R", "context", "drafter ms back to back", "after an L2 flush", "flushed vs back to back"),
     lambda ps, p: (p["kind"], str(p["reqs"]), str(p["context"]), _ms(p["warm_s"]), _ms(p["flushed_s"]),
                    f"{p['flushed_s'] / p['warm_s'] - 1:+.1%}")),
    ("eager", ("R", "chunk", "launch ms") + tuple(f"GPU ms behind {f:g}x launch" for f in SPINS),
     lambda ps, p: (str(p["reqs"]), str(p["chunk"]), f"{p['launch_s'] * 1e3:.1f}")
     + tuple(_ms(p["gpu_s"][str(f)]) for f in SPINS)),
)


def _against(points: list[dict], p: dict, key: str, same: tuple, **base) -> str:
    """``p[key]`` against the point that shares ``same`` with it and has ``base``, signed; '-' without one."""
    ref = next((b for b in points if all(b[k] == p[k] for k in same) and all(b[k] == v for k, v in base.items())), None)
    return f"{p[key] / ref[key] - 1:+.1%}" if ref else "-"


def block_text(probe_path: Path, profile_path: Path) -> str:
    """The block: provenance, the fitted ratios and their held-out error against none, the table."""
    from dspark_sim.cost.profile import load_profile
    from dspark_sim.profiling.heldout import summary_text
    from dspark_sim.profiling.shared import with_shared_term

    data = json.loads(Path(probe_path).read_text())
    profile = load_profile(profile_path)
    _, fit = with_shared_term(profile, Path(probe_path))
    p = data["provenance"]
    t = profile.target
    held = fit["held_out"]
    ratios = ", ".join(f"{r:.3f} at width {w:g}" for w, r in zip(t.shared_widths, t.shared_ratio))
    summary = summary_text
    head = (f"Measured {p['date']} on {p['gpu']} ({p['gpu_uuid']}; driver {p['driver']}, torch {p['torch']}, triton "
            f"{p['triton']}; tree {p['tree']}); {p['model']}, {p['weights']} weights, median of {p['steps']} decode steps "
            f"(shared prefixes) and of {p['reps']} eager steps. Made by `python benchmarks/served_steps.py --run` (the "
            f"command in its docstring), `{Path(probe_path).as_posix().split('profiles/', 1)[-1]}` under profiles/. "
            f"The profile's `shared_ratio` ({ratios}; `python benchmarks/fit_profiles.py --post-only`) prices the "
            f"target's step on the shared points, each whole level of R held out in turn, at {summary(held['with'])}; "
            f"taking each shared step at its unshared one (no term) is {summary(held['without'])} over the same "
            f"{fit['points']} points.")
    return "\n".join([head, ""] + table(data))
