"""The power-limit term of prompt steps: the prefill duty a GPU keeps, the price it adds to a
prompt step's linear layers (and nothing else), and the simulator's prompt steps priced at the
duty of its own timeline."""
import csv
from dataclasses import replace

import pytest

from dspark_sim.cost import get_cost_model
from dspark_sim.cost.base import DraftWork, StepWork
from dspark_sim.cost.hot import PrefillDuty, duty_column, hot_scale
from dspark_sim.cost.profile import ProfileCost
from dspark_sim.errors import InputError
from dspark_sim.run import run_scenario
from dspark_sim.scenario import Scenario

COST = get_cost_model("h200", "qwen3-8b", warn=False)
PROMPT = StepWork(prefill_tokens=4096, prefill_reqs=2, prefill_attn_tokens2=2 * 2048 * 1024.0)


def test_duty_is_the_share_of_the_window_spent_in_prompt_steps():
    duty = PrefillDuty(1.0)
    assert duty.at(0.0) == 0.0
    duty.add(0.0, 0.25)
    duty.add(0.5, 1.0)
    assert duty.at(1.0) == pytest.approx(0.75)
    assert duty.at(1.5) == pytest.approx(0.5)  # [0.5, 1.5]: only the second span
    assert duty.at(2.5) == 0.0  # both spans left the window
    duty.add(2.5, 4.0)  # a span longer than the window fills it
    assert duty.at(4.0) == 1.0
    assert PrefillDuty(0.0).at(3.0) == 0.0


def test_duty_column_counts_only_prompt_steps():
    start, step, tokens = [0.0, 0.5, 0.6, 1.2], [0.5, 0.1, 0.6, 0.1], [512, 0, 512, 0]
    assert duty_column(start, step, tokens, 1.0) == pytest.approx([0.0, 0.0, 0.5, 0.0])
    assert duty_column(start, step, tokens, 1.0, every=True) == pytest.approx([0.0, 0.5, 0.5, 0.9])


def test_below_the_profiles_own_duty_nothing_changes():
    assert hot_scale(0.04, 0.5, 0.5, 4096, 4096) == 1.0
    assert hot_scale(0.04, 0.5, 0.3, 4096, 4096) == 1.0
    assert hot_scale(0.04, 0.5, 1.0, 4096, 4096) == pytest.approx(1.04)
    assert hot_scale(0.04, 0.5, 0.75, 1024, 4096) == pytest.approx(1.005)  # half way, a quarter of the tokens
    assert hot_scale(0.0, 0.5, 1.0, 4096, 4096) == 1.0


def test_a_hot_prompt_step_pays_on_its_linear_layers_only():
    t = COST.profile.target
    assert t.hot_ratio > 0 and t.hot_duty0 == 0.5 and COST.hot_window_s == 1.0
    cool, hot = COST.breakdown(PROMPT), COST.breakdown(replace(PROMPT, prefill_duty=1.0))
    assert hot["linear_s"] == pytest.approx(cool["linear_s"] * (1 + t.hot_ratio), rel=1e-12)
    assert {k: v for k, v in hot.items() if k != "linear_s"} == {k: v for k, v in cool.items() if k != "linear_s"}
    assert COST.step_s(replace(PROMPT, prefill_duty=1.0)) == pytest.approx(sum(hot.values()), rel=1e-12)
    assert COST.step_s(replace(PROMPT, prefill_duty=0.5)) == COST.step_s(PROMPT)


def test_decode_steps_keep_their_price_at_any_duty():
    decode = StepWork(64, 64 * 8, 64 * 3000, draft=DraftWork("block", 64, 7, 64 * 3000), decode_max_context=5000)
    assert COST.step_s(replace(decode, prefill_duty=1.0)) == COST.step_s(decode)


def test_a_profile_without_the_term_has_no_window():
    bare = replace(COST.profile, target=replace(COST.profile.target, hot_ratio=0.0))
    assert ProfileCost(bare).hot_window_s == 0.0


def test_a_bad_term_is_refused():
    with pytest.raises(InputError, match="hot_duty0"):
        replace(COST.profile.target, hot_duty0=1.0)
    with pytest.raises(InputError, match="hot_ratio"):
        replace(COST.profile.target, hot_ratio=-0.1)


def test_the_simulators_prompt_steps_are_priced_at_their_own_duty(tmp_path):
    sc = Scenario.from_dict({
        "name": "hot", "model": "qwen3-8b", "gpu": "h200", "seed": 3,
        "workload": {"synthetic": {"num_requests": 120, "rate_per_s": 40.0,
                                   "prompt_tokens": {"dist": "lognormal", "mean": 3000, "sigma": 0.4},
                                   "output_tokens": {"dist": "lognormal", "mean": 60, "sigma": 0.4}}},
        "deployment": {"batching": "prefill_first", "chunked_prefill_tokens": 4096},
        "speculation": {"method": "none"}})
    run_scenario(sc, tmp_path)
    with open(tmp_path / "steps.csv") as f:
        rows = list(csv.DictReader(f))
    num = {k: [float(r[k]) for r in rows] for k in ("start_s", "step_s", "prefill_tokens")}
    duty = duty_column(num["start_s"], num["step_s"], num["prefill_tokens"], COST.hot_window_s)
    hot = [i for i, d in enumerate(duty) if d > COST.profile.target.hot_duty0]
    assert len(hot) > 10  # the load keeps the GPU in prompt steps
    for i in hot:
        r = rows[i]
        work = StepWork(int(r["decode_reqs"]), int(r["verify_tokens"]), int(r["decode_context_tokens"]),
                        int(r["prefill_tokens"]), int(r["prefill_reqs"]), float(r["prefill_attn_tokens2"]),
                        None, int(r["decode_max_context"]), int(r["running_reqs"]))
        cool = COST.step_s(work)
        assert float(r["step_s"]) == pytest.approx(COST.step_s(replace(work, prefill_duty=duty[i])), rel=1e-5)
        assert float(r["step_s"]) > cool


def test_the_term_is_named_in_a_runs_provenance_measured_or_carried():
    measured = COST.provenance()["terms"]["power_limit"]
    assert measured["kind"] == "measured" and "prefill_clocks.json" in measured["detail"]
    projected = get_cost_model("b300", "qwen3-8b", warn=False).provenance()["terms"]["power_limit"]
    assert projected["kind"] == "projected" and "carried unchanged from h200" in projected["caveat"]
    bare = replace(COST.profile, target=replace(COST.profile.target, hot_ratio=0.0))
    assert "power_limit" not in ProfileCost(bare).provenance()["terms"]
