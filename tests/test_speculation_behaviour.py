"""DSpark's behaviour on Qwen3-8B / H200 over concurrency (issue: the physics of section 7)."""
import pytest
from conftest import synthetic_scenario

from dspark_sim.sweep import sweep
from dspark_sim.scenario import load_scenario


@pytest.fixture
def math_scenario(write_scenario):
    data = synthetic_scenario(num_requests=64, prompt=600, output=300, speculation={"method": "dspark"})
    data["workload"]["domain"] = "math"
    return load_scenario(write_scenario(data))


def _by(rows):
    return {(r["method"], r["concurrency"]): r for r in rows}


def test_dspark_beats_no_speculation_at_batch_one(math_scenario):
    rows = _by(sweep(math_scenario, ["none", "dspark"], [1], num_requests=6))
    ratio = rows["dspark", 1]["mean_tok_per_s_per_user"] / rows["none", 1]["mean_tok_per_s_per_user"]
    assert ratio >= 2.5


def test_verify_budget_falls_with_concurrency_and_beats_full_block(math_scenario):
    conc = [1, 32, 256]
    rows = _by(sweep(math_scenario, ["dspark", "dspark-full"], conc, num_requests=512))
    budgets = [rows["dspark", c]["mean_verify_tokens_per_request"] for c in conc]
    assert budgets[0] > budgets[1] > budgets[2]
    assert rows["dspark", 256]["output_throughput_per_gpu"] >= rows["dspark-full", 256]["output_throughput_per_gpu"]
