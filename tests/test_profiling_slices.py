"""Scaling layer slices to the whole model, its error, and dspark-profile fit's handling of slice files."""
from __future__ import annotations

import json

import numpy as np
import pytest

from dspark_sim.catalog import get_model
from dspark_sim.errors import InputError
from dspark_sim.profiling.pipeline import measured_raws
from dspark_sim.profiling.slices import scale_slices, scaling_error, write_slice_errors

POINTS = [(r, r * w, c) for r in (1, 4, 16) for w in (1, 4) for c in (512, 2048)]
CHUNKS = [("none", n, 0) for n in (64, 512)]


def linear_raw(layers, base, per, slice_layers=None, wobble=None):
    """Rows timed as ``base + layers * per`` at every point (times ``1 + wobble`` when given)."""
    w = wobble if wobble is not None else np.zeros(len(POINTS))
    prov = {"date": "2026-12-01", "gpu": "NVIDIA H200"}
    if slice_layers:
        prov.update(slice_layers=slice_layers, layer_ratios=None)
    verify = [{"reqs": r, "tokens": m, "context": c, "step_s": (base[i] + layers * per[i]) * (1 + w[i])}
              for i, (r, m, c) in enumerate(POINTS)]
    prefill = [{"kind": k, "chunk": n, "context": c, "step_s": 1e-3 * n * (1 + layers)} for k, n, c in CHUNKS]
    return {"provenance": prov, "verify": verify, "prefill": prefill}


def test_linear_steps_scale_exactly():
    rng = np.random.default_rng(0)
    base, per = rng.uniform(1e-3, 2e-3, len(POINTS)), rng.uniform(1e-4, 5e-4, len(POINTS))
    scaled = scale_slices(linear_raw(2, base, per, 2), linear_raw(4, base, per, 4), 48)
    whole = linear_raw(48, base, per)
    assert [r["step_s"] for r in scaled["verify"]] == pytest.approx(
        [r["step_s"] for r in sorted(whole["verify"], key=lambda r: (r["reqs"], r["tokens"], r["context"]))])
    assert len(scaled["prefill"]) == 2 and scaled["prefill"][0]["step_s"] == pytest.approx(1e-3 * 64 * 49)
    assert scaled["provenance"]["scaled_from_slices"] == [2, 4] and "slice_layers" not in scaled["provenance"]
    err = scaling_error(scaled, whole)
    assert err["points"] == len(POINTS) and err["max"] == pytest.approx(0.0, abs=1e-12)


def test_scaling_error_by_hand():
    base, per = np.full(len(POINTS), 1e-3), np.full(len(POINTS), 1e-4)
    scaled = scale_slices(linear_raw(2, base, per, 2), linear_raw(4, base, per, 4), 10)
    wobble = np.zeros(len(POINTS))
    wobble[:4] = 0.25  # the measured whole is 25 % slower at four points: scaled / measured = 0.8
    err = scaling_error(scaled, linear_raw(10, base, per, wobble=wobble))
    assert err["max"] == pytest.approx(0.2) and err["median"] == pytest.approx(0.0, abs=1e-12)
    assert err["by_reqs"][1] == pytest.approx(0.2)


def test_slices_must_name_their_layers():
    base = per = np.ones(len(POINTS))
    with pytest.raises(InputError, match="slice_layers"):
        scale_slices(linear_raw(2, base, per), linear_raw(4, base, per, 4), 48)
    with pytest.raises(InputError):
        scale_slices(linear_raw(4, base, per, 4), linear_raw(2, base, per, 2), 48)


def test_fit_scales_slices_and_measures_the_error(tmp_path):
    rng = np.random.default_rng(1)
    base, per = rng.uniform(1e-3, 2e-3, len(POINTS)), rng.uniform(1e-4, 5e-4, len(POINTS))
    files = {"raw_qwen3-30b-a3b.json": linear_raw(48, base, per),
             "raw_qwen3-30b-a3b.slice2.json": linear_raw(2, base, per, 2),
             "raw_qwen3-30b-a3b.slice4.json": linear_raw(4, base, per, 4),
             "raw_deepseek-v4-flash.slice2.json": linear_raw(2, base, per, 2),
             "raw_deepseek-v4-flash.slice4.json": linear_raw(4, base, per, 4)}
    for name, raw in files.items():
        (tmp_path / name).write_text(json.dumps(raw))
    raws, errors = measured_raws(tmp_path, None)
    names = sorted(name for name, _, _ in raws)
    assert names == ["deepseek-v4-flash", "qwen3-30b-a3b"]  # the V4 slices became one whole model
    v4 = next(raw for name, raw, _ in raws if name == "deepseek-v4-flash")
    layers = get_model("deepseek-v4-flash").num_layers
    assert v4["provenance"]["scaled_to_layers"] == layers
    assert v4["verify"][0]["step_s"] > files["raw_deepseek-v4-flash.slice4.json"]["verify"][0]["step_s"]
    assert errors["qwen3-30b-a3b"]["points"] == len(POINTS) and errors["qwen3-30b-a3b"]["max"] < 1e-9
    out = tmp_path / "out" / "slice_scaling.json"
    write_slice_errors(out, errors)
    assert json.loads(out.read_text())["models"]["qwen3-30b-a3b"]["slices"] == [2, 4]


def test_leave_one_level_out_error():
    """Each request level held out whole: finite, one error per verify row, and worse where
    one level was timed 30 % slow (a fit without it cannot know)."""
    from dspark_sim.catalog import get_gpu
    from dspark_sim.cost.roofline import RooflineCost
    from dspark_sim.profiling.levels import level_errors
    from dspark_sim.profiling.synthetic import synthetic_raw

    def held_out_levels(raw, m, g):
        return level_errors(raw, m, g)["verify@reqs"]

    m, g = get_model("qwen3-30b-a3b"), get_gpu("h200")
    grid = {"verify": [(r, r * t, 1024) for r in (1, 4, 16, 64) for t in (1, 4)],
            "draft": [], "prefill": [(n, 0) for n in (64, 2048)]}
    raw = synthetic_raw(RooflineCost(m, g), grid=grid, noise=0.005)
    clean = held_out_levels(raw, m, g)
    assert clean.num_points == 8 and np.isfinite(clean.max_rel_err)
    for row in raw["verify"]:
        if row["reqs"] == 16:
            row["step_s"] *= 1.3
    assert held_out_levels(raw, m, g).max_rel_err > clean.max_rel_err + 0.1
