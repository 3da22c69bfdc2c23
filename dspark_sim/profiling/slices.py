"""Whole-model timings from layer slices, and how far that scaling is off.

A model too large for one GPU is profiled as slices of its first ``a`` and ``b``
layers (``dspark-profile --layers``). At every grid point both slices run the same
embedding, head and host work and ``a`` or ``b`` identical layers, so the step time
is linear in the layer count: ``t(L) = base + L * per_layer`` with
``per_layer = (t_b - t_a) / (b - a)`` and ``base = t_a - a * per_layer``; the whole
model's point is ``t(layers)``. DeepSeek-V4's slices hold its CSA and HCA layers
alternating, so ``per_layer`` is their mean; the two window-only layers of V4-Flash
are counted as mean layers (an over-estimate: they have no compressor).

:func:`scaling_error` compares a scaled profile with a whole model measured on the
same grid (Qwen3-30B-A3B fits one H200 whole): the error of the method itself;
:func:`whole_from_slices` does both for the raw files of a folder (``dspark-profile fit``),
and this module owns the file the errors go to (``profiles/<gpu>/slice_scaling.json``).
"""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from dspark_sim.catalog import get_model
from dspark_sim.cost.jsonio import read_json, write_json_atomic
from dspark_sim.errors import InputError

# raw_<model>.slice<N>.json: the first N layers of <model> (dspark-profile --layers N)
SLICE_FILE = re.compile(r"raw_(?P<model>.+)\.slice(?P<layers>\d+)")
# the target's sections a slice scales, and the keys that name a grid point (raw spellings)
SECTIONS = {"verify": ("reqs", "tokens", "context"), "prefill": ("kind", "chunk", "context")}


def slice_layers(raw: dict, file=None) -> int:
    """The layer count of a slice's raw file (``provenance.slice_layers``)."""
    n = raw.get("provenance", {}).get("slice_layers") if isinstance(raw, dict) else None
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise InputError(file, "provenance.slice_layers", n, "a slice's raw file names its layer count")
    return n


def _points(rows: list, keys: tuple) -> dict:
    return {tuple(r.get(k, "block" if k == "kind" else None) for k in keys): float(r["step_s"])
            for r in rows if isinstance(r, dict) and "step_s" in r}


def scale_slices(small: dict, large: dict, layers: int, *, files=(None, None)) -> dict:
    """A raw profile of the whole ``layers``-layer model from two slices' raw profiles: every
    verify and prefill point both slices timed, extrapolated linearly in the layer count
    (points whose scaled time is not positive are dropped and counted)."""
    a, b = slice_layers(small, files[0]), slice_layers(large, files[1])
    if b <= a:
        raise InputError(files[1], "provenance.slice_layers", b, f"must exceed the other slice's {a}")
    prov = {k: v for k, v in large.get("provenance", {}).items() if k not in ("slice_layers", "layer_ratios")}
    out = {"provenance": {**prov, "scaled_from_slices": [a, b], "scaled_to_layers": layers,
                          "slice_ratios": large.get("provenance", {}).get("layer_ratios"),
                          "scaling": "t(L) = t_a + (L - a) (t_b - t_a) / (b - a) per grid point "
                                     "(dspark_sim/profiling/slices.py)"}}
    dropped = 0
    for section, keys in SECTIONS.items():
        ta, tb = _points(small.get(section, []), keys), _points(large.get(section, []), keys)
        rows = []
        for key in sorted(set(ta) & set(tb)):
            whole = ta[key] + (layers - a) * (tb[key] - ta[key]) / (b - a)
            if whole <= 0:
                dropped += 1
                continue
            rows.append({**dict(zip(keys, key)), "step_s": whole})
        out[section] = rows
    out["provenance"]["scaled_points_dropped"] = dropped
    return out


def scaling_error(scaled: dict, whole: dict) -> dict:
    """Relative error of the scaled verify points against the whole model's measured ones:
    ``{"points", "median", "p90", "max", "by_reqs": {R: median}}`` (None without points)."""
    keys = SECTIONS["verify"]
    s, w = _points(scaled.get("verify", []), keys), _points(whole.get("verify", []), keys)
    common = sorted(set(s) & set(w))
    if not common:
        return {"points": 0, "median": None, "p90": None, "max": None, "by_reqs": {}}
    err = np.array([abs(s[k] / w[k] - 1.0) for k in common])
    reqs = np.array([k[0] for k in common])
    return {"points": len(common), "median": float(np.median(err)), "p90": float(np.percentile(err, 90)),
            "max": float(err.max()),
            "by_reqs": {int(r): float(np.median(err[reqs == r])) for r in sorted(set(reqs.tolist()))}}


def slice_model(path: Path) -> str | None:
    """The model a slice's raw file (``raw_<model>.slice<N>.json``) times, or None for a whole model's."""
    match = SLICE_FILE.fullmatch(path.stem)
    return match["model"] if match else None


def whole_from_slices(slices: dict[str, list[tuple[dict, Path]]], whole: dict[str, dict],
                      log=print) -> tuple[list[tuple[str, dict, Path]], dict]:
    """Each model's slices (raw, file) scaled to its whole layer count from its smallest and
    largest slice: ``(model, scaled raw, file)`` for a model timed only as slices, and for a
    model also timed whole (``whole``: model -> raw) the scaling's error instead."""
    out, errors = [], {}
    for name, group in sorted(slices.items()):
        if len(group) < 2:
            log(f"warning: {name} has one slice ({group[0][1].name}): two are needed to scale")
            continue
        group = sorted(((slice_layers(raw, file), raw, file) for raw, file in group), key=lambda g: g[0])
        (a, small, f1), (b, large, f2) = group[0], group[-1]
        layers = get_model(name, file=f2).num_layers
        scaled = scale_slices(small, large, layers, files=(f1, f2))
        if name in whole:
            errors[name] = {"slices": [a, b], "layers": layers, **scaling_error(scaled, whole[name]),
                            "date": str(large.get("provenance", {}).get("date", ""))[:10]}
        else:
            out.append((name, scaled, f2))
    return out, errors


def write_slice_errors(path: Path, errors: dict, log=print) -> None:
    """Merge ``errors`` (model -> :func:`scaling_error` and its slices) into the per-GPU
    slice-scaling file, one entry per model, written atomically."""
    old = read_json(path) if path.is_file() else {}
    models = {**old.get("models", {}), **errors}
    write_json_atomic(path, {"generated_by": "dspark-profile fit", "method": "dspark_sim/profiling/slices.py",
                             "models": models})
    for name, e in errors.items():
        if e["points"]:
            log(f"{name}: slices {e['slices']} scaled to {e['layers']} layers, error median "
                f"{100 * e['median']:.1f} %, p90 {100 * e['p90']:.1f} %, max {100 * e['max']:.1f} % "
                f"over {e['points']} verify points")


__all__ = ["SECTIONS", "SLICE_FILE", "scale_slices", "scaling_error", "slice_layers", "slice_model",
           "whole_from_slices", "write_slice_errors"]
