"""DeepSeek-V4-Flash's batch-1 step by GPU and TP, from the shipped profile (slices timed on the
decoder's fused V4 path): the launch floor a step keeps (``overhead_s``, not projected by
bandwidth nor split by TP) stays, the weight reads follow bandwidth and the split."""
from __future__ import annotations

import warnings

import pytest

from dspark_sim.cost import StepWork
from dspark_sim.cost.profile import get_cost_model

MODEL = "deepseek-v4-flash"
WORK = StepWork(decode_reqs=1, verify_tokens=1, decode_context_tokens=8192, decode_max_context=8192, running_reqs=1)


def steps() -> dict:
    """``{(gpu, tp): cost model}`` of the shipped profiles."""
    out = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for gpu in ("h200", "b200", "b300"):
            for tp in (4, 8):
                out[gpu, tp] = get_cost_model(gpu, MODEL, tp, warn=False, kv_dtype_bytes=1)
    return out


def test_the_fixed_floor_stays_and_the_weight_reads_follow_bandwidth_and_the_split():
    models = steps()
    ms = {k: m.step_s(WORK) for k, m in models.items()}
    parts = {k: m.breakdown(WORK) for k, m in models.items()}
    assert parts["b200", 8]["overhead_s"] == pytest.approx(parts["h200", 8]["overhead_s"])
    # HBM 8 / 4.8 TB/s, and Blackwell serves the experts in FP4 (fewer bytes than Hopper's FP8)
    assert parts["b200", 8]["linear_s"] <= parts["h200", 8]["linear_s"] * 4.8 / 8.0 * 1.02
    assert parts["h200", 8]["linear_s"] == pytest.approx(parts["h200", 4]["linear_s"] / 2, rel=0.05)
    assert ms["b300", 8] < ms["h200", 8] < ms["h200", 4]
