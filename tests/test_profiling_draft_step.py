"""The drafter's in-step ratio: fitted on whole decode steps against the drafter's price alone (a
known ratio recovered, counts that are not a power of two left out, held out by count), priced
alike on floats and arrays, bad input refused with the file and key."""
import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from dspark_sim.cost import get_cost_model
from dspark_sim.cost.shapes import EXACT, SCALAR
from dspark_sim.errors import InputError
from dspark_sim.profiling.draft_step import alone_s, with_draft_step_term

PROFILE = get_cost_model("h200", "qwen3-8b", warn=False).profile
BARE = replace(PROFILE, draft={k: replace(f, step_knots=(), step_ratio=()) for k, f in PROFILE.draft.items()},
               held_out={k: v for k, v in PROFILE.held_out.items() if k != "draft_step@reqs"})
SHIPPED = Path(__file__).resolve().parents[1] / "profiles" / "h200" / "raw" / "layout_qwen3-8b.json"
RATIO = {"chain": {64: 0.10, 128: 0.12, 192: 0.5}, "block": {64: 0.08, 128: 0.06, 192: 0.5}}


def _probe(path: Path, model: str = "qwen3-8b", **bad) -> Path:
    points = []
    for kind, by in RATIO.items():
        for reqs, r in by.items():
            for layout in ("ordered", "scattered"):
                q = {"kind": kind, "reqs": reqs, "block_size": 3 if kind == "chain" else 7, "context_sum": 1000.0 * reqs}
                points.append({"part": "layout", "kind": kind, "reqs": reqs, "layout": layout,
                               "context_sum": q["context_sum"], "draft_s": alone_s(BARE, q) * (1 + r)})
    points.append({"part": "layout", "kind": "none", "reqs": 64, "layout": "ordered", "context_sum": 1.0, "draft_s": 1e-5})
    points[0].update(bad)
    path.write_text(json.dumps({"provenance": {"model": model, "gpu_uuid": "GPU-x", "block_size": {"block": 7}},
                                "points": points}))
    return path


def test_the_fit_recovers_each_drafters_ratio_at_powers_of_two(tmp_path):
    fitted, report = with_draft_step_term(BARE, _probe(tmp_path / "layout.json"))
    for kind, by in RATIO.items():
        fit = fitted.draft[kind]
        assert fit.step_knots == (64.0, 128.0)  # 192 runs at the probe's own tier: left out
        assert fit.step_ratio == pytest.approx((by[64], by[128]), rel=1e-9)
    assert report["held_out"]["with"]["max"] == pytest.approx(0.02 / 1.06, rel=1e-6)  # block 128 from 64's 8 %
    assert fitted.held_out["draft_step@reqs"].num_points == 8
    assert with_draft_step_term(BARE, _probe(tmp_path / "o.json", model="qwen3-4b")) == (BARE, None)


def test_the_ratio_prices_the_whole_drafter_step_alike_on_floats_and_arrays(tmp_path):
    fitted, _ = with_draft_step_term(BARE, _probe(tmp_path / "layout.json"))
    for kind in ("chain", "block"):
        fit, bare = fitted.draft[kind], BARE.draft[kind]
        reqs = np.array([1, 16, 64, 96, 128, 300])
        g, ctx = (3 if kind == "chain" else 7), 900.0 * reqs
        array = fit.seconds(reqs, g, ctx, EXACT)
        scalar = [fit.seconds(int(r), g, float(c), SCALAR) for r, c in zip(reqs, ctx)]
        assert array.tolist() == scalar  # bit for bit
        ratio = np.interp(reqs, fit.step_knots, fit.step_ratio)
        assert array == pytest.approx(bare.seconds(reqs, g, ctx, EXACT) * (1 + ratio), rel=1e-12)
    assert "inside a served step" in get_cost_model("h200", "qwen3-8b", warn=False).provenance()["terms"]["draft_block"]["detail"]


@pytest.mark.parametrize("bad, key", [({"draft_s": -1.0}, r"points\[0\]\.draft_s"), ({"reqs": "x"}, r"points\[0\]\.reqs")])
def test_a_bad_point_is_one_line_naming_the_file_and_key(tmp_path, bad, key):
    with pytest.raises(InputError, match=key) as e:
        with_draft_step_term(BARE, _probe(tmp_path / "layout.json", **bad))
    assert "layout.json" in str(e.value) and "\n" not in str(e.value)


def test_a_malformed_ratio_is_refused():
    fit = PROFILE.draft["chain"]
    with pytest.raises(InputError, match="step_ratio"):
        replace(fit, step_knots=(64.0, 128.0), step_ratio=(0.1,))
    with pytest.raises(InputError, match="step_ratio"):
        replace(fit, step_knots=(64.0,), step_ratio=(-1.0,))


def test_the_shipped_profile_carries_the_ratios_fitted_on_the_shipped_steps():
    fitted, report = with_draft_step_term(BARE, SHIPPED)
    assert {k: (f.step_knots, f.step_ratio) for k, f in fitted.draft.items()} == \
        {k: (f.step_knots, f.step_ratio) for k, f in PROFILE.draft.items()}
    assert report["gpu_uuid"].startswith("GPU-ee85e484") and all(r > 0 for _, rs in report["ratios"].values() for r in rs)
