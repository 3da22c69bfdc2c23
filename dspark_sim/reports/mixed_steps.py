"""The mixed-step probe (``benchmarks/mixed_steps.py`` times decode rows beside a prompt chunk on
a GPU): the decode requests' contexts it draws, its table, and docs/profiles.md's blocks of the
terms fitted after the rest: the mixed-step term on the probe, the spread term on the
profiler's spread rows."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

CONTEXT_MEAN, CONTEXT_SIGMA, CONTEXT_MIN, CONTEXT_MAX = 1000, 1.0, 32, 8192


def contexts(reqs: int, mean: int = CONTEXT_MEAN, hi: int = CONTEXT_MAX) -> list[int]:
    """The decode requests' contexts: ``Stepper.verify_spread``'s draw for ``reqs`` requests
    of one verify token each (no speculation)."""
    rng = np.random.default_rng(reqs * 1000 + reqs)
    draw = rng.lognormal(np.log(mean) - CONTEXT_SIGMA ** 2 / 2, CONTEXT_SIGMA, reqs)
    return [int(x) for x in np.clip(np.round(draw), min(CONTEXT_MIN, hi), hi)]


def table(data: dict) -> list[str]:
    """Per point: device and wall time, and what the mixed step costs over its two halves
    timed apart (R alone + the chunk alone), in total and per decode row."""
    pts = {(p["reqs"], p["chunk"], p["cached"]): p for p in data["points"]}
    lines = ["| R | chunk | cached | max context | gpu ms | forward ms | wall ms | hidden | "
             "over parts ms | over parts per row us |", "|---|---|---|---|---|---|---|---|---|---|"]
    for (r, c, k), p in sorted(pts.items()):
        alone, chunk = pts.get((r, 0, 0)), pts.get((0, c, k))
        over = per = "-"
        if c and r and alone and chunk:
            extra = p["gpu_s"] - alone["gpu_s"] - chunk["gpu_s"]
            over, per = f"{extra * 1e3:+.3f}", f"{extra / r * 1e6:+.1f}"
        lines.append(f"| {r} | {c} | {k} | {p['context_max']} | {p['gpu_s'] * 1e3:.3f} | {p['forward_s'] * 1e3:.3f} | "
                     f"{p['wall_s'] * 1e3:.3f} | {p['hidden']:.0%} | {over} | {per} |")
    for f in data.get("failed", []):
        lines.append(f"| {f['reqs']} | {f['chunk']} | {f['cached']} | failed: {f['error']} |||||||")
    return lines


HELD_HEAD = ["| held out (whole levels) | median | p90 | max | mean signed | without the term: median / mean signed |",
             "|---|---|---|---|---|---|"]


def held_row(level: str, e: dict) -> str:
    """A held-out table's row: the term's errors with every level of ``level`` held out whole, and
    the prices' without it (``e``: the ``with``/``without`` summaries of a post-fit term)."""
    w, o = e["with"], e["without"]
    return (f"| every level of {level} | {w['median']:.1%} | {w['p90']:.1%} | {w['max']:.1%} | {w['mean_signed']:+.1%} | "
            f"{o['median']:.1%} / {o['mean_signed']:+.1%} |")


def block_text(probe: Path, profile: Path) -> str:
    """docs/profiles.md's block: the probe's mixed steps, what they cost over their two halves
    (the interaction) and what the term gives of it, priced by the shipped profile without and
    with its mixed-step term, and the term's errors with each level held out whole: of the
    interaction (which decides whether the term is kept) and of the step's price."""
    from dataclasses import replace

    from dspark_sim.cost.profile import load_profile
    from dspark_sim.profiling.mixed import fit_term, held_out_levels, interactions

    data, fit = json.loads(probe.read_text()), load_profile(profile).target
    p, k = data["provenance"], fit.mixed_s_per_row_tile
    rows = interactions(replace(fit, mixed_s_per_row_tile=0.0), data["points"])
    fitted = k or fit_term(rows, np.ones(rows["reqs"].size, bool))
    head = (f"Measured {p['date']} on {p['gpu']} ({p['gpu_uuid']}; driver {p['driver']}, torch {p['torch']}, triton "
            f"{p['triton']}; tree {p.get('tree') or p.get('decoder_commit')}); {p['model']}, {p['weights']} weights, "
            f"no speculation; decode contexts {p['contexts']}; device time with the host's launch hidden, median of "
            f"{p['reps']}. Made by `python benchmarks/mixed_steps.py --run` (the command in its docstring); the "
            f"term fitted on these points' interactions only by `python benchmarks/fit_profiles.py` "
            + (f"(`mixed_s_per_row_tile` = {k * 1e9:.1f} ns per decode row and query tile of {fit.prefill_tile:g} tokens)."
               if k else "kept `mixed_s_per_row_tile` at 0: fitted, the term predicted held-out levels' interactions no "
                         "better than none (the table's last two columns use the coefficient fitted on all of them)."))
    halves = _halves(fit, data["points"])
    head += (" The halves alone, priced by the profile against the probe: the chunk alone "
             f"{min(halves['chunk']):+.1%} to {max(halves['chunk']):+.1%}, the decode rows alone "
             f"{min(halves['rows']):+.1%} to {max(halves['rows']):+.1%}.")
    lines = ["| R | chunk | cached | measured ms | interaction ms | the term's ms | priced without | with the term |",
             "|---|---|---|---|---|---|---|---|"]
    for i in np.argsort(rows["reqs"] * 1e9 + rows["chunk"] * 1e4 + rows["cached"], kind="stable"):
        step, base, term = rows["step_s"][i], rows["base_s"][i], fitted * rows["tiles"][i]
        lines.append(f"| {rows['reqs'][i]:.0f} | {rows['chunk'][i]:.0f} | {rows['cached'][i]:.0f} | {step * 1e3:.2f} | "
                     f"{rows['excess'][i] * 1e3:+.2f} | {term * 1e3:+.2f} | {base / step - 1:+.1%} | "
                     f"{(base + term) / step - 1:+.1%} |")
    held = held_out_levels(rows)
    name = lambda axis: "R" if axis == "reqs" else "the chunk"  # noqa: E731
    inter = [held_row(name(a), {"with": e["interaction_with"], "without": e["interaction_without"]})
             for a, e in held.items()]
    step = [held_row(name(a), e) for a, e in held.items()]
    return "\n".join([head, "", *lines, "", "The interaction, relative to the step (what decides whether the term "
                      "is kept):", "", *HELD_HEAD, *inter, "", "The step's price:", "", *HELD_HEAD, *step])


def _halves(fit, points: list[dict]) -> dict[str, list[float]]:
    """The probe's steps of one half only (a chunk alone, decode rows alone), each priced by ``fit``
    against its measured time: relative errors by half."""
    from dspark_sim.profiling.mixed import model_gpu_s

    out = {"chunk": [], "rows": []}
    for p in points:
        if bool(p["reqs"]) == bool(p["chunk"]):
            continue
        price = float(model_gpu_s(fit, [p["reqs"]], [p["chunk"]], [p["cached"]], [p["context_sum"]],
                                  [p["context_max"]])[0])
        out["rows" if p["reqs"] else "chunk"].append(price / p["gpu_s"] - 1.0)
    return out


def spread_block_text(raw: Path, profile: Path) -> str:
    """docs/profiles.md's block: the profiler's spread rows (long-tailed contexts) priced by the
    shipped profile without and with its spread term, and the term's error with each level of
    R held out whole."""
    from dspark_sim.cost.profile import load_profile
    from dspark_sim.profiling.spread import SLOTS, columns, held_out_levels, spread_rows

    data, fit = json.loads(raw.read_text()), load_profile(profile).target
    p, rows = data["provenance"], spread_rows(data, raw)
    cols = columns(fit, rows)
    tail = cols["tails"][:, SLOTS.index(fit.spread_slots)] * fit.spread_ratio if fit.spread_ratio else 0 * cols["base_s"]
    head = (f"The spread rows of `{raw.relative_to(raw.parents[3])}` (measured {p.get('date', '?')} on {p.get('gpu', '?')}, "
            f"{p.get('gpu_uuid', '?')}; the profiler's lognormal contexts beside the same step at their mean); the term "
            f"fitted on these rows only by `python benchmarks/fit_profiles.py` (`--post-only`): `spread_ratio` = "
            f"{fit.spread_ratio:.3f}, `spread_slots` = {fit.spread_slots:g}.")
    lines = ["| R | verify tokens | context mean / longest | measured ms | at the mean ms | priced without | with the term |",
             "|---|---|---|---|---|---|---|"]
    for c in sorted(range(len(rows)), key=lambda i: (rows[i]["reqs"], rows[i]["tokens"])):
        r, step, base = rows[c], cols["step_s"][c], cols["base_s"][c]
        uniform = f"{r['uniform_s'] * 1e3:.2f}" if "uniform_s" in r else "-"
        lines.append(f"| {r['reqs']} | {r['tokens']} | {r['context']} / {r['max_context']} | {step * 1e3:.2f} | {uniform} | "
                     f"{base / step - 1:+.1%} | {(base + tail[c]) / step - 1:+.1%} |")
    held = HELD_HEAD + [held_row("R", held_out_levels(cols))]
    return "\n".join([head, "", *lines, "", *held])
