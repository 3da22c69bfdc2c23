"""Turn measured raw timings into shipped profiles: the one command that re-makes them.

    python benchmarks/fit_profiles.py            # every profiles/h200/raw/raw_<model>.json

For each raw file: fit ``profiles/h200/<model>.json`` (held-out error inside),
(a model timed as two layer slices, ``raw_<model>.slice<N>.json``, is first scaled to
its whole layer count, ``dspark_sim.cost.slices``; when the whole model was timed too,
the scaling's error goes to ``profiles/<gpu>/slice_scaling.json`` instead),
write SGLang's ``<model>.sps.json`` and ``<model>.sps_additive.json`` beside it,
project to B300, B200 and H100 (``profiles/<gpu>/<model>.json`` + tables),
plot measured against fitted step time (``docs/img/profile_fit_<model>.png``)
and put the held-out error table into ``docs/profiles.md``.

``--synthetic`` runs the same pipeline on raw data made from the roofline
with noise, into a scratch directory: a dry run, never shipped.
"""
from __future__ import annotations

import argparse
import re
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from dspark_sim.catalog import get_gpu, get_model  # noqa: E402
from dspark_sim.cost.base import DraftWork, StepWork  # noqa: E402
from dspark_sim.cost.jsonio import read_json  # noqa: E402
from dspark_sim.cost.profile import (Profile, ProfileCost, fit_profile,  # noqa: E402
                                     load_profile, project_profile)
from dspark_sim.cost.jsonio import write_json_atomic  # noqa: E402
from dspark_sim.cost.roofline import RooflineCost  # noqa: E402
from dspark_sim.cost.slices import scale_slices, scaling_error, slice_layers  # noqa: E402
from dspark_sim.cost.sps import sps_from_cost_model  # noqa: E402
from dspark_sim.cost.synthetic import synthetic_raw  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SHIPPED_GPUS = ("h200", "b300", "b200", "h100")
SYNTHETIC_MODELS = ("qwen3-4b", "qwen3-8b", "qwen3-14b", "qwen3-32b", "qwen3-30b-a3b")
# The SGLang tables shipped beside each profile: DSpark's Qwen3 drafter (block, gamma 7),
# 2048 tokens of context a request, probes up to 8192 verify tokens.
TABLE_ARGS = {"context_tokens_per_req": 2048, "max_batch_tokens": 8192, "block_size": 7}
BEGIN, END = "<!-- held-out:begin -->", "<!-- held-out:end -->"


def _moe_notes(profile: Profile, raw: dict, model, gpu) -> Profile:
    """For an MoE model: the leave-one-level-out error (request levels) beside the k-fold one,
    the communication assumptions its multi-GPU use adds, and the slices it was scaled from."""
    if not model.is_moe:
        return profile
    from dspark_sim.cost.comm import describe
    from dspark_sim.cost.fit import held_out_levels

    held = {**profile.held_out, "verify_levels": held_out_levels(raw, model, gpu)}
    prov = {**profile.provenance, "communication_when_tp_gt_1": describe()}
    source = profile.source
    scaled = raw.get("provenance", {}).get("scaled_from_slices")
    if scaled:
        source += f"; the whole model scaled by layer count from {scaled[0]}- and {scaled[1]}-layer slices"
    return replace(profile, held_out=held, provenance=prov, source=source,
                   held_out_method=profile.held_out_method + "; verify_levels: each request count left out "
                   "whole and predicted by a fit without it")


def write_profile(profile: Profile, out_dir: Path) -> list[Path]:
    """Save ``profile`` and its two SGLang tables under ``out_dir/<gpu>/``.

    A projection never replaces a measured profile: it is skipped (returns []).
    """
    base = out_dir / profile.gpu / profile.model
    # read the key alone: a profile of an older format_version is still a measured one
    if profile.projection is not None and base.with_suffix(".json").is_file() \
            and read_json(base.with_suffix(".json")).get("projection") is None:
        print(f"kept measured {base}.json (not replaced by a projection)")
        return []
    cost = ProfileCost(profile)
    kind = "block" if "block" in profile.draft else None
    profile.save(base.with_suffix(".json"))
    for additive, suffix in ((False, ".sps.json"), (True, ".sps_additive.json")):
        table = sps_from_cost_model(cost, additive=additive, draft_kind=kind, **TABLE_ARGS)
        table.save(Path(f"{base}{suffix}"))
    return [base.with_suffix(".json"), Path(f"{base}.sps.json"), Path(f"{base}.sps_additive.json")]


def plot_fit(profile: Profile, path: Path) -> None:
    """Measured points against the fitted curves, one panel per section, plus fitted/measured.

    The grids time graph replays and eager prefill: their curves leave out the host terms;
    whole decode steps (the ``step`` rows, in the last panel) include the host time inside a
    step, not the serving loop's between steps."""
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
    fig.suptitle(f"{profile.model} on {profile.gpu}: {profile.source}")
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


def held_out_table(profiles: list[Profile]) -> str:
    """Markdown table of held-out median / p90 relative error per section."""
    sections = ["verify", "verify_levels", "prefill", "draft_block", "draft_chain", "step", "all"]
    lines = ["| model | gpu | " + " | ".join(f"{s} median / p90" for s in sections) + " | points |",
             "|---|---|" + "---|" * (len(sections) + 1)]
    for p in profiles:
        cells = [f"{100 * p.held_out[s].median_rel_err:.1f} % / {100 * p.held_out[s].p90_rel_err:.1f} %"
                 if s in p.held_out else "-" for s in sections]
        lines.append(f"| {p.model} | {p.gpu} | " + " | ".join(cells) + f" | {p.held_out['all'].num_points} |")
    return "\n".join(lines)


def measured_profiles(out_dir: Path) -> list[Profile]:
    """Every measured (not projected) profile under ``out_dir/<gpu>/<model>.json``."""
    from dspark_sim.catalog import MODELS

    # profiles are named after catalog models; other JSON (benchmarks, kernel configs) sits beside them
    paths = [p for p in sorted(out_dir.glob("*/*.json")) if p.stem in MODELS]
    return [p for p in map(load_profile, paths) if p.projection is None]


def update_docs(doc: Path, table: str, command: str) -> None:
    """Replace the text between the held-out markers of ``doc`` with ``table``."""
    text = doc.read_text(encoding="utf-8")
    if BEGIN not in text or END not in text:
        raise SystemExit(f"{doc}: missing the {BEGIN} / {END} markers")
    body = f"{BEGIN}\nMade by `{command}`.\n\n{table}\n{END}"
    doc.write_text(re.sub(re.escape(BEGIN) + ".*?" + re.escape(END), lambda _: body, text, flags=re.S),
                   encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    """Fit, project, tabulate and plot every raw profile; print the held-out error table."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpu", default="h200", help="the GPU the raw files were measured on")
    ap.add_argument("--raw-dir", type=Path, default=None, help="default: profiles/<gpu>/raw")
    ap.add_argument("--out-dir", type=Path, default=None,
                    help="default: profiles/ (a scratch directory with --synthetic)")
    ap.add_argument("--img-dir", type=Path, default=None,
                    help="default: docs/img (a scratch directory with --synthetic)")
    ap.add_argument("--docs", type=Path, default=REPO / "docs" / "profiles.md")
    ap.add_argument("--folds", type=int, default=10)
    ap.add_argument("--models", nargs="*", help="only these models")
    ap.add_argument("--synthetic", action="store_true", help="dry run on roofline data with noise")
    args = ap.parse_args(argv)
    measured = get_gpu(args.gpu)
    raw_dir = args.raw_dir or REPO / "profiles" / measured.name / "raw"
    scratch = Path(tempfile.mkdtemp(prefix="dspark_profiles_")) if args.synthetic else None
    out_dir = args.out_dir or (scratch / "profiles" if scratch else REPO / "profiles")
    img_dir = args.img_dir or (scratch / "img" if scratch else REPO / "docs" / "img")
    if args.synthetic and out_dir.resolve() == (REPO / "profiles").resolve():
        raise SystemExit("--synthetic must not write into profiles/: synthetic fits are never shipped")
    raws, slice_errors = ((_synthetic_raws(args.models, measured), {}) if args.synthetic
                          else _measured_raws(raw_dir, args.models))
    if slice_errors:
        _write_slice_errors(out_dir / measured.name / "slice_scaling.json", slice_errors)
    if not raws:
        print(f"no raw profiles under {raw_dir}: waiting for the profiler", file=sys.stderr)
        return 1
    fitted = []
    for model_name, raw, file in raws:
        model = get_model(model_name, file=file)
        seen = str(raw.get("provenance", {}).get("gpu", measured.name)).lower()
        if measured.name not in seen.replace(" ", ""):
            print(f"warning: {file} was measured on {seen!r}, filed under {measured.name}", file=sys.stderr)
        profile = fit_profile(raw, model, measured, folds=args.folds, file=file)
        profile = _moe_notes(profile, raw, model, measured)
        written = write_profile(profile, out_dir)
        for other in SHIPPED_GPUS:
            if other != measured.name:
                written += write_profile(project_profile(profile, get_gpu(other)), out_dir)
        plot_fit(profile, img_dir / f"profile_fit_{model.name}.png")
        fitted.append(profile)
        held = profile.held_out["all"]
        print(f"{model.name}: held-out median {100 * held.median_rel_err:.2f} %, p90 "
              f"{100 * held.p90_rel_err:.2f} % over {held.num_points} points; wrote {len(written)} files")
    # the docs list every measured profile shipped, not only those fitted now
    table = held_out_table(fitted if args.synthetic else measured_profiles(out_dir))
    print(table)
    if args.synthetic:
        print(f"synthetic dry run: outputs under {scratch}; docs untouched")
    else:
        command = "python benchmarks/fit_profiles.py"
        command += f" --gpu {measured.name}" if measured.name != "h200" else ""
        update_docs(args.docs, table, command)
    return 0


SLICE_FILE = re.compile(r"raw_(?P<model>.+)\.slice(?P<layers>\d+)")


def _measured_raws(raw_dir: Path, models) -> tuple[list[tuple[str, dict, Path]], dict]:
    """The raw files to fit (slices scaled to their whole model), and the scaling error of
    each model timed both whole and as slices."""
    out, slices = [], {}
    for path in sorted(raw_dir.glob("raw_*.json")):
        match = SLICE_FILE.fullmatch(path.stem)
        name = match["model"] if match else path.stem.removeprefix("raw_")
        if models and name not in models:
            continue
        raw = read_json(path)
        if isinstance(raw, dict) and isinstance(raw.get("provenance"), dict) \
                and raw["provenance"].get("synthetic"):
            raise SystemExit(f"{path}: synthetic data; only measured raw files may be shipped")
        if match:
            slices.setdefault(name, []).append((slice_layers(raw, path), raw, path))
        else:
            out.append((name, raw, path))
    whole = {name: raw for name, raw, _ in out}
    errors = {}
    for name, group in sorted(slices.items()):
        if len(group) < 2:
            print(f"warning: {name} has one slice ({group[0][2].name}): two are needed to scale", file=sys.stderr)
            continue
        group.sort(key=lambda g: g[0])
        (a, small, f1), (b, large, f2) = group[0], group[-1]
        layers = get_model(name).num_layers
        scaled = scale_slices(small, large, layers, files=(f1, f2))
        if name in whole:
            errors[name] = {"slices": [a, b], "layers": layers, **scaling_error(scaled, whole[name]),
                            "date": str(large.get("provenance", {}).get("date", ""))[:10]}
        else:
            out.append((name, scaled, f2))
    return out, errors


def _write_slice_errors(path: Path, errors: dict) -> None:
    """Merge ``errors`` into the per-GPU slice-scaling file (one entry per model)."""
    old = read_json(path) if path.is_file() else {}
    models = {**old.get("models", {}), **errors}
    write_json_atomic(path, {"generated_by": "benchmarks/fit_profiles.py", "method": "dspark_sim/cost/slices.py",
                             "models": models})
    for name, e in errors.items():
        if e["points"]:
            print(f"{name}: slices {e['slices']} scaled to {e['layers']} layers, error median "
                  f"{100 * e['median']:.1f} %, p90 {100 * e['p90']:.1f} %, max {100 * e['max']:.1f} % "
                  f"over {e['points']} verify points")


def _synthetic_raws(models, gpu) -> list[tuple[str, dict, Path | None]]:
    return [(name, synthetic_raw(RooflineCost(get_model(name), gpu)), None)
            for name in (models or SYNTHETIC_MODELS)]


if __name__ == "__main__":
    sys.exit(main())
