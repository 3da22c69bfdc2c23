"""Held-out errors of a profile at long contexts: each long level held out whole, in its own table."""
from dataclasses import replace

import numpy as np

from dspark_sim.catalog import get_gpu, get_model
from dspark_sim.cost.profile import load_profile, shipped_profile_path
from dspark_sim.cost.profile_format import HeldOut
from dspark_sim.cost.roofline import RooflineCost
from dspark_sim.profiling.levels import level_errors, long_levels
from dspark_sim.profiling.pipeline import held_out_table, long_keys, targets_text
from dspark_sim.profiling.synthetic import default_grid, synthetic_raw

MODEL, GPU = get_model("qwen3-8b"), get_gpu("h200")


def test_each_long_level_is_held_out_alone():
    """Synthetic timings (the roofline with noise) over contexts to 32k: every level of at least
    16,384 tokens gets its own error, over exactly its rows."""
    grid = {"verify": [(r, r * t, c) for r in (1, 4, 16) for t in (1, 4) for c in (512, 8192, 32768)],
            "prefill": [(n, c) for n in (64, 1024, 8192) for c in (0, 16384, 32768)],
            "draft": [row for row in default_grid()["draft"] if row[0] <= 4 and row[2] == "block"]}
    held = level_errors(synthetic_raw(RooflineCost(MODEL, GPU), grid=grid, seed=5), MODEL, GPU)
    assert {k for k in held if "=" in k} == {"verify@context=32768", "prefill@cached=16384", "prefill@cached=32768"}
    assert held["verify@context=32768"].num_points == 6 and held["prefill@cached=32768"].num_points == 3
    assert held["verify@context=32768"].max_rel_err <= held["verify@context"].max_rel_err  # a subset of its rows


def test_long_levels_split_the_held_out_predictions_by_level():
    levels = {"cached": np.array([0.0, 16384, 16384, 24576, 32768])}
    measured = np.array([1.0, 2.0, 2.0, 4.0, 5.0])
    found = {"cached": (np.array([4, 0, 1, 2, 3]), np.array([5.5, 1.0, 2.2, 1.8, 4.0]))}
    got = long_levels("prefill", found, levels, measured)
    assert list(got) == ["prefill@cached=16384", "prefill@cached=24576", "prefill@cached=32768"]
    assert got["prefill@cached=16384"].num_points == 2
    assert np.isclose(got["prefill@cached=16384"].max_rel_err, 0.1) and got["prefill@cached=24576"].max_rel_err == 0.0
    assert np.isclose(got["prefill@cached=32768"].median_rel_err, 0.1) and long_levels("verify", found, levels, measured) == {}
    assert np.isclose(got["prefill@cached=16384"].median_signed_err, 0.0)  # +0.1 and -0.1: the signs cancel
    assert np.isclose(got["prefill@cached=32768"].median_signed_err, 0.1)


def test_the_long_table_and_the_targets_line():
    shipped = load_profile(shipped_profile_path("h200", "qwen3-8b"))
    short = {k: v for k, v in shipped.held_out.items() if "=" not in k}
    assert "Long contexts" not in held_out_table([replace(shipped, held_out=short)])
    held = {**short, "prefill@cached=32768": HeldOut(0.05, 0.2, 0.3, 3),
            "verify@context=32768": HeldOut(0.01, 0.02, 0.03, 6, -0.004),
            "prefill@cached=24576": HeldOut(0.01, 0.02, 0.03, 3)}
    profile = replace(shipped, held_out=held)
    assert long_keys(profile) == ["verify@context=32768", "prefill@cached=24576", "prefill@cached=32768"]
    table = held_out_table([profile])
    assert "| qwen3-8b | verify | context 32768 | 1.0 / 2.0 / 3.0 | -0.4 | 6 |" in table
    assert "| qwen3-8b | prefill | cached 24576 | 1.0 / 2.0 / 3.0 | - | 3 |" in table
    text = targets_text([profile], ["verify", "prefill"], ["@reqs"])
    assert "qwen3-8b prefill@cached=32768 (20.0 %)" in text and "verify@context=32768" not in text


def test_the_signed_median_is_written_only_where_recorded():
    """A profile's held-out entries keep the signed median through its JSON; entries without one
    (every profile fitted before it) read and write as before."""
    import json

    from dspark_sim.cost.profile_format import profile_from_json_dict

    shipped = load_profile(shipped_profile_path("h200", "qwen3-8b"))
    profile = replace(shipped, held_out={"verify": HeldOut(0.01, 0.02, 0.03, 6),
                                         "verify@context=32768": HeldOut(0.01, 0.02, 0.03, 6, -0.004)})
    d = json.loads(json.dumps(profile.to_json_dict()))
    assert "median_signed_err" not in d["held_out"]["verify"]
    assert profile_from_json_dict(d).held_out == profile.held_out
