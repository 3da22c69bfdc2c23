"""Whole served steps over long-tailed contexts against the shipped profile's prices."""
from __future__ import annotations

from dspark_sim.cost import ProfileCost
from dspark_sim.cost.profile import load_profile, shipped_profile_path
from dspark_sim.reports.spread_steps import block_text, priced_s, table

PROFILE = load_profile(shipped_profile_path("h200", "qwen3-8b"))
PROVENANCE = {"date": "2026-12-04", "gpu": "NVIDIA H200", "gpu_uuid": "GPU-x", "driver": "580", "torch": "2.11",
              "triton": "3.6", "tree": "abc", "model": "qwen3-8b", "weights": "random", "contexts": "lognormal",
              "steps": 12}


def _data(scale: float) -> dict:
    """Points measured at ``scale`` times the profile's own price of them."""
    cost, points = ProfileCost(PROFILE), []
    for kind in ("block", "chain", "none"):
        for label, longest in (("spread", 6000), ("uniform", 1000)):
            p = {"kind": kind, "contexts": label, "reqs": 128, "context_sum": 128_000, "context_max": longest,
                 "verify_tokens": 128 * (4 if kind != "none" else 1), "draft_s": 0.004}
            p["step_s"] = scale * priced_s(cost, p)
            points.append(p)
    return {"provenance": PROVENANCE, "points": points, "failed": []}


def test_the_table_gives_each_kind_its_priced_error_and_the_spread_over_the_mean():
    lines = table(_data(1.25), "h200")
    assert len(lines) == 2 + 3
    assert all(line.count("-20.0%") == 2 for line in lines[2:])  # priced 1 / 1.25 - 1, both draws


def test_the_block_compares_the_profile_with_and_without_its_spread_term():
    text = block_text(_data(1.0), PROFILE)
    assert "| long-tailed | with | 3 | 0.0% | 0.0% | 0.0% | +0.0% |" in text
    without = next(line for line in text.splitlines() if line.startswith("| long-tailed | without"))
    assert "-" in without.split("|")[-2]  # the spread term's share is missed without it
