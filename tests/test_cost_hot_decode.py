"""The decode steps' power-limit term: a decode step after prompt-heavy seconds priced its GPU
seconds a measured ratio longer in proportion to the duty, stretches priced as step by step
prices them, and the term fitted from the probe's steps (cost/hot.py, profiling/hot.py)."""
import json
from dataclasses import replace

import numpy as np
import pytest

from dspark_sim.cost import get_cost_model
from dspark_sim.cost.base import DraftWork, StepWork
from dspark_sim.cost.hot import DecodeHot, PrefillDuty, decode_hot_times, gpu_seconds
from dspark_sim.cost.profile import ProfileCost, shipped_profile_path
from dspark_sim.cost.profile_format import load_profile
from dspark_sim.errors import InputError
from dspark_sim.profiling.hot import decode_hot_rows, with_decode_hot_term

COST = get_cost_model("h200", "qwen3-8b", warn=False)
DECODE = StepWork(64, 64 * 8, 64 * 1000, draft=DraftWork("block", 64, 7, 64 * 1000))


def test_a_decode_step_at_a_duty_runs_its_gpu_seconds_the_ratio_longer():
    assert COST.decode_hot is not None
    cool = COST.breakdown(DECODE)
    hot = COST.breakdown(replace(DECODE, prefill_duty=0.8))
    ratio = float(np.interp(64, COST.decode_hot.knots, COST.decode_hot.ratios[DecodeHot.KINDS.index("block")]))
    d0 = COST.decode_hot.duty0
    assert ratio > 0 and d0 == COST.profile.target.hot_duty0 == 0.5  # the prompt steps' threshold
    assert hot["hot_s"] == pytest.approx(gpu_seconds(cool) * ratio * (0.8 - d0) / (1 - d0), rel=1e-12)
    assert {k: v for k, v in hot.items() if k != "hot_s"} == cool  # the other parts keep their price
    assert list(hot)[-1] == "hot_s"  # last: a stretch adds it to the sum of the others, as here


def test_a_cool_gpu_and_a_prompt_step_take_no_decode_term():
    assert "hot_s" not in COST.breakdown(DECODE)  # duty 0: the profile's cool price
    assert "hot_s" not in COST.breakdown(replace(DECODE, prefill_duty=0.5))  # up to the threshold, nor
    prompt = StepWork(4, 4, 4000, prefill_tokens=512, prefill_reqs=1, prefill_attn_tokens2=512 * 256.0,
                      prefill_duty=0.9)
    assert "hot_s" not in COST.breakdown(prompt)  # prompt steps have their own term


def test_the_ratio_goes_by_drafter_kind_and_requests():
    hot = DecodeHot((64.0, 128.0), ((0.1, 0.05), (0.2, 0.2), (0.3, 0.1)), 0.5)
    assert (hot.excess(0.25), hot.excess(0.5), hot.excess(0.75), hot.excess(1.0)) == (0.0, 0.0, 0.5, 1.0)
    assert hot.scaled_gpu(10.0, 96, None) == pytest.approx(0.75)  # none, halfway between the knots
    assert hot.scaled_gpu(10.0, 16, "chain") == pytest.approx(2.0)  # clamped below the first knot
    assert hot.scaled_gpu(10.0, 512, "block") == pytest.approx(1.0)  # and past the last
    assert np.allclose(hot.scaled_gpu(np.array([10.0, 10.0]), np.array([64, 128]), "block"), [3.0, 1.0])


def test_the_duty_forgets_spans_past_the_window():
    duty = PrefillDuty(1.0)
    for span in ((0.0, 0.2), (0.3, 0.35), (0.9, 1.4)):
        duty.add(*span)
    assert duty.last_end() == 1.4 and duty.spans() == ((0.0, 0.2), (0.3, 0.35), (0.9, 1.4))
    assert duty.at(1.25) == pytest.approx(0.05 + 0.35)  # [0.25, 1.25]: the second span and part of the third
    assert duty.spans() == ((0.3, 0.35), (0.9, 1.4))  # the first ended before the window
    assert duty.at(2.5) == 0.0 and duty.last_end() == -np.inf and PrefillDuty(1.0).last_end() == -np.inf


def test_a_stretch_of_decode_steps_is_priced_as_step_by_step():
    """Each step at the duty at its start, the clock moved by each step's own price."""
    step_s, scaled = np.array([0.01, 0.012, 0.011, 0.02] * 30), np.full(120, 0.001)
    hot = DecodeHot((64.0,), ((0.1,),) * 3, 0.2)
    duty, again = PrefillDuty(1.0), PrefillDuty(1.0)
    for d in (duty, again):
        d.add(0.1, 0.4)
        d.add(0.5, 0.55)
    times, seconds = decode_hot_times(0.55, step_s, scaled, duty, hot.excess)
    t, one_by_one = 0.55, []
    for base, extra in zip(step_s.tolist(), scaled.tolist()):
        one_by_one.append(base + extra * hot.excess(again.at(t)))
        t = t + one_by_one[-1]
    assert seconds == one_by_one and times[-1] == t
    assert seconds[0] > step_s[0] and seconds[-1] == step_s[-1]  # the duty falls past the threshold within it


def probe(points, model="qwen3-8b"):
    return {"provenance": {"model": model, "gpu_uuid": "GPU-x", "date": "2026-12-05"}, "points": points}


def after_points(ratios=None):
    ratios = ratios or {"none": (0.09, 0.05, 0.03), "chain": (0.1, 0.11, 0.09), "block": (0.13, 0.09, 0.08)}
    return [{"part": "after", "kind": k, "reqs": r, "chunk": 4096, "cool_s": 0.01 * (i + 1),
             "hot_s": 0.01 * (i + 1) * (1 + ratios[k][i]), "after_prompt_s": 0.0, "after_decode_s": 0.0}
            for k in ratios for i, r in enumerate((64, 128, 192))]


def test_the_term_is_fitted_from_the_probes_steps(tmp_path):
    path = tmp_path / "after_qwen3-8b.json"
    path.write_text(json.dumps(probe(after_points())))
    profile = load_profile(shipped_profile_path("h200", "qwen3-8b"))
    profile = replace(profile, target=replace(profile.target, hot_decode_reqs=(), hot_decode=()))
    fitted, report = with_decode_hot_term(profile, path)
    assert fitted.target.hot_decode_reqs == (64.0, 128.0, 192.0)
    assert fitted.target.hot_decode[2] == pytest.approx((0.13, 0.09, 0.08))
    assert "hot_decode@reqs" in fitted.held_out and report["held_out"]["without"]["mean_signed"] < 0
    other = tmp_path / "after_other.json"
    other.write_text(json.dumps(probe(after_points(), model="llama-3.1-8b")))
    assert with_decode_hot_term(profile, other) == (profile, None)  # another model's steps: no term
    assert ProfileCost(fitted, warn=False).decode_hot is not None


def test_probes_of_two_gpus_are_pooled_as_their_mean_and_held_out_by_gpu(tmp_path):
    low, high = {k: (0.02, 0.02, 0.02) for k in ("none", "chain", "block")}, {k: (0.06, 0.04, 0.02) for k in ("none", "chain", "block")}
    paths = [tmp_path / "a.json", tmp_path / "b.json"]
    paths[0].write_text(json.dumps(probe(after_points(low))))
    paths[1].write_text(json.dumps(probe([p for p in after_points(high) if p["reqs"] != 128])))  # knots 64 and 192 only
    profile = load_profile(shipped_profile_path("h200", "qwen3-8b"))
    fitted, report = with_decode_hot_term(profile, paths)
    assert fitted.target.hot_decode_reqs == (64.0, 128.0, 192.0)
    assert fitted.target.hot_decode[0] == pytest.approx((0.04, 0.03, 0.02))  # b's 128 interpolated: 0.04
    assert fitted.held_out["hot_decode@host"].num_points == 9 + 6 and report["by_host"]["with"]["max"] > 0.01
    assert [q["file"] for q in report["probes"]] == ["a.json", "b.json"]


def test_a_probe_missing_a_kind_or_a_bad_time_names_it(tmp_path):
    with pytest.raises(InputError, match="points"):
        decode_hot_rows(probe([p for p in after_points() if p["kind"] != "chain"]), "f.json")
    bad = after_points()
    bad[3]["hot_s"] = -1.0
    with pytest.raises(InputError, match=r"points\[3\]\.hot_s"):
        decode_hot_rows(probe(bad), "f.json")


def test_a_profile_with_a_malformed_term_is_refused():
    target = load_profile(shipped_profile_path("h200", "qwen3-8b")).target
    with pytest.raises(InputError, match="hot_decode"):
        replace(target, hot_decode=((0.1, 0.1, 0.1),))  # one row, three kinds needed
    with pytest.raises(InputError, match="hot_decode"):
        replace(target, hot_decode=((0.1, 0.1, -0.1),) * 3)
