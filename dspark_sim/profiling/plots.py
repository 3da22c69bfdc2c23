"""Plots of a fitted profile against its own measured points (``docs/img/profile_fit_<model>.png``)."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from dspark_sim.cost.base import DraftWork, StepWork
from dspark_sim.cost.profile import ProfileCost
from dspark_sim.cost.profile_format import Profile
from dspark_sim.metrics.plots import pyplot


def plot_fit(profile: Profile, path: Path) -> None:
    """Measured points against the fitted curves, one panel per section, plus fitted/measured.

    The grids time graph replays and eager prefill: their curves leave out the host terms;
    whole decode steps (the ``step`` rows, in the last panel) include the host time inside a
    step, not the serving loop's between steps."""
    plt = pyplot()
    cost, grids = ProfileCost(replace(profile, host={}, schedule=None)), profile.grids
    fig, ax = plt.subplots(2, 2, figsize=(12, 9))
    contexts = sorted({r["context"] for r in grids["verify"]})
    ctx = contexts[len(contexts) // 2]
    for i, reqs in enumerate(sorted({r["reqs"] for r in grids["verify"]})):
        rows = sorted((r for r in grids["verify"] if r["reqs"] == reqs and r["context"] == ctx),
                      key=lambda r: r["tokens"])
        if not rows:
            continue
        colour = plt.cm.viridis(i / 9)
        ax[0, 0].plot([r["tokens"] for r in rows], [1e3 * r["step_s"] for r in rows], "o", color=colour,
                      label=f"R={reqs}")
        tokens = range(rows[0]["tokens"], rows[-1]["tokens"] + 1)
        ax[0, 0].plot(tokens, [1e3 * cost.step_s(StepWork(decode_reqs=reqs, verify_tokens=m,
                               decode_context_tokens=reqs * ctx)) for m in tokens], "-", color=colour)
    decode = sorted({r["reqs"] for r in grids["verify"] if r["context"] == ctx and r["tokens"] == r["reqs"]})
    if decode and all(r["tokens"] == r["reqs"] for r in grids["verify"]):  # one token a request: a line over R
        ax[0, 0].plot(decode, [1e3 * cost.step_s(StepWork(decode_reqs=r, verify_tokens=r, decode_context_tokens=r * ctx))
                               for r in decode], "-", color="grey", label="fitted")
    ax[0, 0].set(xscale="log", yscale="log", xlabel="verify tokens M", ylabel="step ms",
                 title=f"verify, context {ctx} per request")
    ax[0, 0].legend(fontsize=7, ncol=2)
    for i, cached in enumerate(sorted({r["cached"] for r in grids["prefill"]})):
        rows = sorted((r for r in grids["prefill"] if r["cached"] == cached), key=lambda r: r["chunk"])
        colour = plt.cm.plasma(i / 4)
        ax[0, 1].plot([r["chunk"] for r in rows], [1e3 * r["step_s"] for r in rows], "o", color=colour,
                      label=f"cached {cached}")
        chunks = range(rows[0]["chunk"], rows[-1]["chunk"] + 1, 16)
        ax[0, 1].plot(chunks, [1e3 * cost.step_s(_prefill(n, cached)) for n in chunks], "-", color=colour)
    ax[0, 1].set(xscale="log", yscale="log", xlabel="prefill chunk tokens", ylabel="step ms",
                 title="prefill")
    ax[0, 1].legend(fontsize=7)
    for i, (kind, size) in enumerate(sorted({(r["kind"], r["block_size"]) for r in grids["draft"]})):
        rows = sorted((r for r in grids["draft"] if (r["kind"], r["block_size"]) == (kind, size)),
                      key=lambda r: r["reqs"])
        colour = plt.cm.tab10(i % 10)
        ax[1, 0].plot([r["reqs"] for r in rows], [1e3 * r["step_s"] for r in rows], "o", color=colour,
                      label=f"{kind} g={size}")
        reqs = range(rows[0]["reqs"], rows[-1]["reqs"] + 1)
        ctx = rows[0]["context"]
        ax[1, 0].plot(reqs, [1e3 * cost.step_s(StepWork(draft=DraftWork(kind, n, size, n * ctx)))
                             for n in reqs], "-", color=colour)
    ax[1, 0].set(xscale="log", yscale="log", xlabel="requests R", ylabel="draft ms", title="drafters")
    ax[1, 0].legend(fontsize=7, ncol=2)
    measured, ratio = _fitted_over_measured(cost, grids)
    ax[1, 1].plot(measured, ratio, ".", alpha=0.6, label="grid points")
    whole = ProfileCost(replace(profile, schedule=None))
    steps = [(_whole_step(r), r) for r in grids.get("step", [])]
    if steps:
        ax[1, 1].plot([1e3 * r["step_s"] for _, r in steps],
                      [whole.step_s(w) / r["step_s"] - 1 for w, r in steps], "x", label="whole decode steps")
    ax[1, 1].legend(fontsize=7)
    for y in (-0.08, -0.03, 0.03, 0.08):
        ax[1, 1].axhline(y, color="grey", lw=0.6, ls="--")
    held = profile.held_out["all"]
    ax[1, 1].set(xscale="log", xlabel="measured step ms", ylabel="fitted / measured - 1",
                 title=f"all points; held-out median {100 * held.median_rel_err:.1f} %, "
                       f"p90 {100 * held.p90_rel_err:.1f} %")
    rank = f", one rank of tp {profile.tp}" if profile.tp > 1 else ""
    fig.suptitle(f"{profile.model}{rank} on {profile.gpu}: {profile.source}")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)


def _whole_step(r: dict) -> StepWork:
    """A whole decode step row as the simulator's work (the drafter's kind and block)."""
    ctx = r["reqs"] * r["context"]
    draft = DraftWork(r["kind"], r["reqs"], r["block_size"], ctx) if r["block_size"] else None
    return StepWork(decode_reqs=r["reqs"], verify_tokens=round(r["verify_tokens"]),
                    decode_context_tokens=ctx, draft=draft)


def _prefill(chunk: int, cached: int) -> StepWork:
    return StepWork(prefill_tokens=chunk, prefill_reqs=1, prefill_attn_tokens2=chunk * (cached + chunk / 2))


def _fitted_over_measured(cost: ProfileCost, grids: dict) -> tuple[list[float], list[float]]:
    works = [(StepWork(decode_reqs=r["reqs"], verify_tokens=r["tokens"],
                       decode_context_tokens=r["reqs"] * r["context"]), r) for r in grids["verify"]]
    works += [(_prefill(r["chunk"], r["cached"]), r) for r in grids["prefill"]]
    works += [(StepWork(draft=DraftWork(r["kind"], r["reqs"], r["block_size"], r["reqs"] * r["context"])), r)
              for r in grids["draft"]]
    return ([1e3 * r["step_s"] for _, r in works], [cost.step_s(w) / r["step_s"] - 1 for w, r in works])
