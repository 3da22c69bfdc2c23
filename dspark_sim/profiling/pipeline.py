"""Raw profile -> fitted profile: fit, SGLang tables, projections to other GPUs, error table.

For each raw file the profiler wrote (``raw_<model>.json``; a model timed as two layer
slices, ``raw_<model>.slice<N>.json``, is first scaled to its whole layer count by
:mod:`.slices`, and where the whole model was timed too the scaling's error is measured
instead): fit ``<out>/<gpu>/<model>.json`` (k-fold and leave-one-level-out errors inside,
:mod:`.levels`; for an MoE model also the communication assumptions), write SGLang's
``<model>.sps.json`` and ``<model>.sps_additive.json`` beside it, project to the other
shipped GPUs (``<out>/<gpu>/<model>.json`` and tables, never over a measured profile) and
plot measured against fitted step time. ``dspark-profile fit`` runs it (:mod:`.cli`);
docs/profiles.md holds the held-out error table it prints.
"""
from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

from dspark_sim.catalog import get_gpu, get_model
from dspark_sim.cost.jsonio import read_json
from dspark_sim.cost.profile import ProfileCost, load_profile, project_profile
from dspark_sim.cost.profile_format import Profile
from dspark_sim.cost.roofline import RooflineCost
from dspark_sim.cost.sps import sps_from_cost_model
from dspark_sim.errors import InputError
from dspark_sim.profiling.fit import fit_profile
from dspark_sim.profiling.levels import METHOD as LEVELS_METHOD
from dspark_sim.profiling.levels import level_errors
from dspark_sim.profiling.draft_step import with_draft_step_term
from dspark_sim.profiling.hot import with_decode_hot_term, with_hot_term
from dspark_sim.profiling.launch_times import with_launch_times
from dspark_sim.profiling.mixed import with_mixed_steps
from dspark_sim.profiling.shared import with_shared_term
from dspark_sim.profiling.spread import with_spread_term
from dspark_sim.profiling.slices import slice_model, whole_from_slices
from dspark_sim.profiling.synthetic import synthetic_raw

SHIPPED_GPUS = ("h200", "b300", "b200", "h100", "a100")
SYNTHETIC_MODELS = ("qwen3-4b", "qwen3-8b", "qwen3-14b", "qwen3-32b", "qwen3-30b-a3b")
# The SGLang tables shipped beside each profile: DSpark's Qwen3 drafter (block, block size 7),
# 2048 tokens of context a request, probes up to 8192 verify tokens.
TABLE_ARGS = {"context_tokens_per_req": 2048, "max_batch_tokens": 8192, "block_size": 7}
BEGIN, END = "<!-- held-out:begin -->", "<!-- held-out:end -->"


def write_profile(profile: Profile, out_dir: Path) -> list[Path]:
    """Save ``profile`` and its two SGLang tables under ``out_dir/<gpu>/``; returns the paths.

    A projection never replaces a measured profile: it is skipped (returns []).
    """
    base = out_dir / profile.gpu / profile.model
    path = Path(f"{base}.json")  # not with_suffix: model names hold dots (llama-3.1-8b)
    # read the key alone: a profile of an older format_version is still a measured one
    if profile.projection is not None and path.is_file() and read_json(path).get("projection") is None:
        return []
    cost = ProfileCost(profile)
    kind = "block" if "block" in profile.draft else None
    profile.save(path)
    for additive, suffix in ((False, ".sps.json"), (True, ".sps_additive.json")):
        table = sps_from_cost_model(cost, additive=additive, draft_kind=kind, **TABLE_ARGS)
        table.save(Path(f"{base}{suffix}"))
    return [path, Path(f"{base}.sps.json"), Path(f"{base}.sps_additive.json")]


def fit_raws(raws: list[tuple[str, dict, Path | None]], measured, out_dir: Path, img_dir: Path | None, *,
             folds: int = 10, log=print, raw_dir: Path | None = None) -> list[Profile]:
    """Fit every (model, raw, file) measured on the GPU ``measured``, write the profile, its tables
    and its projections under ``out_dir`` and (``img_dir``) its plot; returns the fitted profiles.
    ``raw_dir``'s ``comm_tp<N>.json`` (measured collectives) go into every profile, and its
    ``steps_<model>.tp<N>.json`` (whole steps at tp N) give ``held_out["step_tp<N>"]``."""
    from dspark_sim.profiling.plots import plot_fit
    from dspark_sim.profiling.tp_check import with_tp_errors

    comm = comm_sets(raw_dir, measured.name) if raw_dir is not None else {}

    fitted = []
    for model_name, raw, file in raws:
        model = get_model(model_name, file=file)
        seen = str(raw.get("provenance", {}).get("gpu", measured.name)).lower()
        if measured.name not in seen.replace(" ", ""):
            log(f"warning: {file} was measured on {seen!r}, filed under {measured.name}")
        profile = moe_notes(fit_profile(raw, model, measured, folds=folds, file=file), raw, model, measured)
        profile = with_level_errors(profile, raw, model, measured)
        profile = with_post_terms(profile, raw, file, raw_dir)
        if raw_dir is not None:
            profile = with_tp_errors(replace(profile, comm=comm), raw_dir, log)
        written = write_profile(profile, out_dir)
        for other in SHIPPED_GPUS:
            if other != measured.name:
                files = write_profile(project_profile(profile, get_gpu(other)), out_dir)
                if not files:
                    log(f"kept measured {out_dir / other / model.name}.json (not replaced by a projection)")
                written += files
        if img_dir is not None:
            plot_fit(profile, img_dir / f"profile_fit_{model.name}.png")
        fitted.append(profile)
        held = profile.held_out["all"]
        log(f"{model.name}: held-out median {100 * held.median_rel_err:.2f} %, p90 "
            f"{100 * held.p90_rel_err:.2f} % over {held.num_points} points; wrote {len(written)} files")
    return fitted


def comm_sets(raw_dir: Path, gpu: str) -> dict:
    """``{tp: CommCurves}`` of the ``comm_tp<N>.json`` files in ``raw_dir`` (measured on ``gpu``)."""
    from dspark_sim.cost.comm_curves import load_comm_curves

    out = {}
    for path in sorted(raw_dir.glob("comm_tp*.json")):
        curves = load_comm_curves(path)
        if curves.gpu != gpu or curves.source != "measured":
            raise InputError(path, "gpu" if curves.gpu != gpu else "source",
                             curves.gpu if curves.gpu != gpu else curves.source,
                             f"only curves measured on {gpu} go into its profiles")
        out[curves.tp] = curves
    return out
def with_level_errors(profile: Profile, raw: dict, model, gpu) -> Profile:
    """``profile`` with the leave-one-level-out errors of every term (:mod:`.levels`) beside the
    k-fold ones (replacing any earlier level errors)."""
    kept = {k: v for k, v in profile.held_out.items()
            if ("@" not in k or k.startswith(POST_TERMS)) and k != "verify_levels"}
    method = profile.held_out_method.split("; ")[0]
    return replace(profile, held_out={**kept, **level_errors(raw, model, gpu)},
                   held_out_method=f"{method}; {LEVELS_METHOD}")


def add_level_errors(raws: list[tuple[str, dict, Path | None]], measured, out_dir: Path, log=print) -> list[Profile]:
    """Put the leave-one-level-out errors into the shipped profiles of ``raws`` (measured on
    ``measured``) and their projections, leaving every fitted number as it is (a refit on
    another machine moves them by ~1e-4); returns the measured profiles."""
    done = []
    for model_name, raw, file in raws:
        model = get_model(model_name, file=file)
        path = out_dir / measured.name / f"{model.name}.json"
        profile = with_level_errors(load_profile(path), raw, model, measured)
        profile.save(path)
        for other in SHIPPED_GPUS:
            if other != measured.name:
                write_profile(project_profile(profile, get_gpu(other)), out_dir)
        held = {k: v for k, v in profile.held_out.items() if k.endswith("@largest")}
        log(f"{model.name}: " + ", ".join(f"{k} median {100 * v.median_rel_err:.1f} % p90 "
                                          f"{100 * v.p90_rel_err:.1f} %" for k, v in held.items()))
        done.append(profile)
    return done


POST_TERMS = ("spread@", "shared@", "mixed@")  # held-out keys of the terms fitted after the rest


def with_post_terms(profile: Profile, raw: dict | None, file, raw_dir: Path | None) -> Profile:
    """``profile`` with the terms fitted after the rest, each on its own steps: the spread of
    contexts (:mod:`.spread`, ``raw``'s spread rows), the shared prefixes (:mod:`.shared`,
    ``raw_dir``'s probe ``served_<model>.json``), the power limit (:mod:`.hot`, the prompt steps
    timed back to back, ``prefill_clocks.json`` beside ``raw_dir``, with the mixed steps held by
    ``raw_dir``'s probe ``after_mixed_<model>.json``; the decode steps after them, that probe's and
    ``after_<model>.json``'s), the drafters inside a served step (:mod:`.draft_step`, ``raw_dir``'s
    probe ``layout_<model>.json``) and then the mixed steps (:mod:`.mixed`,
    ``raw_dir``'s probe ``mixed_<model>.json``), where those were timed."""
    if raw is not None:
        profile, _ = with_spread_term(profile, raw, file)
    if raw_dir is None:
        return profile
    served = raw_dir / f"served_{profile.model}.json"
    if served.is_file():
        profile, _ = with_shared_term(profile, served)
    # decode steps after prompt steps, and after mixed steps with the mixed steps held (.hot)
    after = [p for p in (raw_dir / f"after_{profile.model}.json", raw_dir / f"after_mixed_{profile.model}.json")
             if p.is_file()]
    clocks = raw_dir.parent / "prefill_clocks.json"  # prompt steps back to back (.hot)
    if clocks.is_file():
        profile, _ = with_hot_term(profile, clocks, tuple(after))
    if after:
        profile, _ = with_decode_hot_term(profile, after)
    layout = raw_dir / f"layout_{profile.model}.json"  # whole decode steps as served (.draft_step)
    if layout.is_file():
        profile, _ = with_draft_step_term(profile, layout)
    probe = raw_dir / f"mixed_{profile.model}.json"
    return with_launch_times(with_mixed_steps(profile, probe), probe) if probe.is_file() else profile


def add_post_terms(out_dir: Path, measured, raw_dir: Path, models=None, log=print) -> list[Profile]:
    """Refit the terms fitted after the rest (:func:`with_post_terms`) of each profile under
    ``out_dir`` measured on ``measured`` whose spread rows (``raw_<model>.json``) or mixed-step
    probe (``mixed_<model>.json``) lie in ``raw_dir`` (only ``models`` if given), every other
    fitted number kept; save it and its projections. Returns the profiles."""
    names = {p.stem.split("_", 1)[1] for pattern in ("mixed_*.json", "served_*.json") for p in raw_dir.glob(pattern)}
    names |= {p.stem.removeprefix("raw_") for p in raw_dir.glob("raw_*.json") if "." not in p.stem}
    done = []
    for name in sorted(names):
        path = out_dir / measured.name / f"{name}.json"
        if (models and name not in models) or not path.is_file():
            continue
        raw_path = raw_dir / f"raw_{name}.json"
        raw = read_json(raw_path) if raw_path.is_file() else None
        before = load_profile(path)
        profile = with_post_terms(before, raw, raw_path, raw_dir)
        if profile is before:
            continue
        write_profile(profile, out_dir)
        for other in SHIPPED_GPUS:
            if other != measured.name:
                write_profile(project_profile(profile, get_gpu(other)), out_dir)
        t, held = profile.target, profile.held_out
        log(f"{name}: " + "; ".join(
            f"{label} held out by {axis} median {100 * held[key].median_rel_err:.1f} % p90 {100 * held[key].p90_rel_err:.1f} %"
            for label, key, axis in ((f"spread_ratio {t.spread_ratio:.3f} past {t.spread_slots:g} slots", "spread@reqs", "R"),
                                     (f"shared_ratio {t.shared_ratio} at widths {t.shared_widths}", "shared@reqs", "R"),
                                     (f"hot_ratio {t.hot_ratio:.4f} past duty {t.hot_duty0:g}", "hot@chunk", "chunk"),
                                     ("hot_ratio", "hot@host", "GPU"),
                                     (f"hot_decode {t.hot_decode} at {t.hot_decode_reqs} requests", "hot_decode@reqs", "R"),
                                     ("hot_decode", "hot_decode@host", "GPU"),
                                     ("drafters in a served step", "draft_step@reqs", "R"),
                                     (f"mixed_s_per_row_tile {t.mixed_s_per_row_tile:.3e} s", "mixed@reqs", "R"),
                                     ("mixed", "mixed@chunk", "chunk")) if key in held))
        done.append(profile)
    if not done:
        log(f"no spread rows or mixed-step probes for the profiles of {raw_dir}")
    return done


def moe_notes(profile: Profile, raw: dict, model, gpu) -> Profile:
    """For an MoE model: the communication assumptions its multi-GPU use adds, and the slices
    it was scaled from."""
    if not model.is_moe:
        return profile
    from dspark_sim.cost.comm import describe

    prov = {**profile.provenance, "communication_when_tp_gt_1": describe()}
    source = profile.source
    scaled = raw.get("provenance", {}).get("scaled_from_slices")
    if scaled:
        source += f"; the whole model scaled by layer count from {scaled[0]}- and {scaled[1]}-layer slices"
    return replace(profile, provenance=prov, source=source)


TARGET_MEDIAN, TARGET_P90 = 0.03, 0.08  # the fit's held-out targets (relative error)


def held_out_table(profiles: list[Profile]) -> str:
    """Markdown tables of held-out median / p90 relative error: k-fold per section, then per
    term the leave-one-level-out errors (median / p90 / max) beside the k-fold one."""
    sections = ["verify", "prefill", "draft_block", "draft_chain", "step", "sched", "all"]
    lines = ["| model | gpu | " + " | ".join(f"{s} median / p90" for s in sections) + " | points |",
             "|---|---|" + "---|" * (len(sections) + 1)]
    for p in profiles:
        cells = [f"{100 * p.held_out[s].median_rel_err:.1f} % / {100 * p.held_out[s].p90_rel_err:.1f} %"
                 if s in p.held_out else "-" for s in sections]
        lines.append(f"| {p.model} | {p.gpu} | " + " | ".join(cells) + f" | {p.held_out['all'].num_points} |")
    axes = ["", "@reqs", "@context", "@chunk", "@cached", "@largest"]
    lines += ["", "Leave-one-level-out (median / p90 / max, %; the first column is k-fold):", "",
              "| model | term | k-fold | by request count | by context | by prefill chunk | by cached prefix "
              "| largest level |", "|---|---|---|---|---|---|---|---|"]
    for p in profiles:
        for term in sections[:-1]:
            if term not in p.held_out:
                continue
            cells = [_three(p.held_out.get(term + a)) for a in axes]
            lines.append(f"| {p.model} | {term} | " + " | ".join(cells) + " |")
    return "\n".join(lines + long_table(profiles) + ["", targets_text(profiles, sections[:-1], axes[1:])])


def long_keys(profile: Profile) -> list[str]:
    """The profile's long-context level errors (``verify@context=<n>``, ``prefill@cached=<n>``), in order."""
    keys = [k for k in profile.held_out if re.fullmatch(r"(verify@context|prefill@cached)=\d+", k)]
    return sorted(keys, key=lambda k: (k.split("@")[0] != "verify", int(k.split("=")[1])))


def long_table(profiles: list[Profile]) -> list[str]:
    """Lines of the long-context table: each long level held out whole (none: no lines)."""
    rows = [(p, k) for p in profiles for k in long_keys(p)]
    if not rows:
        return []
    lines = ["", "Long contexts, each level held out whole and predicted by a fit without it (median / p90 / "
             "max of |error|, %, and the median signed error, predicted / measured - 1): decode (verify) steps by "
             "context per request, prefill chunks by cached tokens before them:",
             "", "| model | term | level (tokens) | held out | signed median | points |", "|---|---|---|---|---|---|"]
    for p, key in rows:
        term, level = key.split("@")
        h = p.held_out[key]
        signed = "-" if h.median_signed_err is None else f"{100 * h.median_signed_err:+.1f}"
        lines.append(f"| {p.model} | {term} | {level.replace('=', ' ')} | {_three(h)} | {signed} | {h.num_points} |")
    return lines


def targets_text(profiles: list[Profile], terms: list[str], axes: list[str]) -> str:
    """Which held-out errors miss the fit's targets (median <= 3 %, p90 <= 8 %): k-fold per term and
    over all points, then the leave-one-level-out p90s above target."""
    def miss(h) -> bool:
        return h is not None and (h.median_rel_err > TARGET_MEDIAN or h.p90_rel_err > TARGET_P90)

    kfold = [f"{p.model} {t} ({100 * p.held_out[t].median_rel_err:.1f} % / {100 * p.held_out[t].p90_rel_err:.1f} %)"
             for p in profiles for t in [*terms, "all"] if miss(p.held_out.get(t))]
    keys = lambda p: [t + a for t in terms for a in axes] + long_keys(p) + sorted(  # noqa: E731
        k for k in p.held_out if k.startswith(POST_TERMS))
    levels = [f"{p.model} {k} ({100 * p.held_out[k].p90_rel_err:.1f} %)" for p in profiles for k in keys(p)
              if p.held_out.get(k) is not None and p.held_out[k].p90_rel_err > TARGET_P90]
    return (f"Targets: median <= {100 * TARGET_MEDIAN:.0f} %, p90 <= {100 * TARGET_P90:.0f} %. K-fold, missed by: "
            f"{'; '.join(kfold) or 'none'}. Leave-one-level-out p90 above target: {'; '.join(levels) or 'none'}.")


def _three(h) -> str:
    return "-" if h is None else f"{100 * h.median_rel_err:.1f} / {100 * h.p90_rel_err:.1f} / {100 * h.max_rel_err:.1f}"


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
        raise InputError(doc, None, None, f"missing the {BEGIN} / {END} markers")
    body = f"{BEGIN}\nMade by `{command}`.\n\n{table}\n{END}"
    doc.write_text(re.sub(re.escape(BEGIN) + ".*?" + re.escape(END), lambda _: body, text, flags=re.S),
                   encoding="utf-8")


def measured_raws(raw_dir: Path, models=None, log=print) -> tuple[list[tuple[str, dict, Path]], dict]:
    """(model, raw JSON, path) of every ``raw_<model>.json`` in ``raw_dir`` (only ``models`` if
    given), a model timed only as slices scaled to its whole (:mod:`.slices`); and the
    slice-scaling error of each model timed both whole and as slices."""
    out, slices = [], {}
    for path in sorted(raw_dir.glob("raw_*.json")):
        sliced = slice_model(path)
        name = sliced or path.stem.removeprefix("raw_")
        if models and name not in models:
            continue
        raw = read_json(path)
        if isinstance(raw, dict) and isinstance(raw.get("provenance"), dict) \
                and raw["provenance"].get("synthetic"):
            raise InputError(path, "provenance.synthetic", True, "synthetic data; only measured raw files may be fitted")
        if sliced:
            slices.setdefault(name, []).append((raw, path))
        else:
            out.append((name, raw, path))
    scaled, errors = whole_from_slices(slices, {name: raw for name, raw, _ in out}, log)
    return out + scaled, errors


def synthetic_raws(models, gpu) -> list[tuple[str, dict, Path | None]]:
    """Raw files made from the roofline with noise, for a dry run of the pipeline (never shipped)."""
    return [(name, synthetic_raw(RooflineCost(get_model(name), gpu)), None)
            for name in (models or SYNTHETIC_MODELS)]
