"""The step-price attribution: busy-time errors of the replay and of the simulator's own steps."""
import pytest

from dspark_sim.catalog import get_gpu
from dspark_sim.cost import get_cost_model
from dspark_sim.cost.base import StepWork
from dspark_sim.cost.hot import duty_column
from dspark_sim.metrics.record import write_record
from dspark_sim.scenario import Speculation
from dspark_sim.validation import step_prices
from dspark_sim.validation.step_prices import attribution


def _steps(reqs: int, step_s: float) -> list[dict]:
    return [{"step": i, "start_s": i * step_s, "step_s": step_s, "running_reqs": reqs, "decode_reqs": reqs,
             "verify_tokens": reqs, "decode_context_tokens": 1000 * reqs, "decode_max_context": 1000}
            for i in range(5)]


def test_priced_steps_give_no_replay_error_and_slower_sim_steps_show(tmp_path):
    cost = get_cost_model(get_gpu("h200").name, "qwen3-8b", warn=False)
    priced = sum(cost.breakdown(StepWork(32, 32, 32000, 0, 0, 0.0, None, 1000, 32)).values())
    write_record(tmp_path / "real", [], _steps(32, priced))
    write_record(tmp_path / "sim", [], _steps(32, 2 * priced))
    out = attribution(tmp_path / "real" / "steps.csv", tmp_path / "sim" / "steps.csv",
                      Speculation(method="none"), cost)
    assert out["replay_busy_error"] == pytest.approx(0.0, abs=1e-6)
    assert out["sim_busy_error"] == pytest.approx(1.0, abs=1e-6)
    b = out["decode_by_running"]["17-64"]
    assert b["steps"] == 5 and b["rest_ms"] == pytest.approx(b["priced_rest_ms"], rel=1e-3)
    assert b["mean_context"] == 1000 and b["longest_context"] == 1000


def test_steps_are_split_by_kind_the_one_after_a_prompt_step_apart(tmp_path):
    cost = get_cost_model(get_gpu("h200").name, "qwen3-8b", warn=False)
    decode = sum(cost.breakdown(StepWork(32, 32, 32000, 0, 0, 0.0, None, 1000, 32)).values())
    rows = _steps(32, decode)
    rows[1] |= {"decode_reqs": 0, "verify_tokens": 0, "decode_context_tokens": 0, "decode_max_context": 0,
                "prefill_tokens": 512, "prefill_reqs": 1, "prefill_attn_tokens2": 512 * 256.0}
    rows[2]["step_s"] = 1.5 * decode  # the decode step right after the prompt step runs over its price
    write_record(tmp_path / "real", [], rows)
    write_record(tmp_path / "sim", [], rows)
    kinds = attribution(tmp_path / "real" / "steps.csv", tmp_path / "sim" / "steps.csv",
                        Speculation(method="none"), cost)["by_kind"]
    assert kinds["prompt only"][2] == 1 and kinds["prompt beside decode rows"][2] == 0
    # the decode steps after the prompt step at the duty it left (the decode steps' power-limit term)
    duty = duty_column([r["start_s"] for r in rows], [r["step_s"] for r in rows], [r.get("prefill_tokens", 0) for r in rows],
                       cost.hot_window_s, every=True)
    hot = [sum(cost.breakdown(StepWork(32, 32, 32000, 0, 0, 0.0, None, 1000, 32, prefill_duty=d)).values()) for d in duty]
    assert duty[2] > 0  # the prompt step left a duty (below the threshold here: no term)
    real, priced, n = kinds["decode right after a prompt step"]
    assert n == 1 and priced / real == pytest.approx(hot[2] / (1.5 * decode), rel=1e-6)
    real, priced, n = kinds["other decode"]
    assert n == 3 and priced / real == pytest.approx((hot[0] + hot[3] + hot[4]) / (3 * decode), rel=1e-6)


def test_prompt_steps_at_a_duty_are_priced_with_and_without_the_power_limit_term(tmp_path):
    cost = get_cost_model(get_gpu("h200").name, "qwen3-8b", warn=False)
    cool = sum(cost.breakdown(StepWork(0, 0, 0, 4096, 1, 4096 * 2048.0)).values())
    rows = [{"step": i, "start_s": i * cool, "step_s": cool, "running_reqs": 1, "prefill_tokens": 4096,
             "prefill_reqs": 1, "prefill_attn_tokens2": 4096 * 2048.0} for i in range(20)]
    write_record(tmp_path / "real", [], rows)
    write_record(tmp_path / "sim", [], rows)
    duty = attribution(tmp_path / "real" / "steps.csv", tmp_path / "sim" / "steps.csv",
                       Speculation(method="none"), cost)["by_duty"]
    real, priced, unpriced, n = duty["prompt steps 0.75-1"]  # back to back: a duty of 1 after the first second
    assert n > 5 and unpriced == pytest.approx(real, rel=1e-6) and priced > unpriced
    real, priced, unpriced, n = duty["prompt steps 0-0.5"]
    assert n >= 1 and priced == unpriced


def test_mixed_steps_are_priced_with_and_without_the_mixed_step_term(tmp_path):
    cost = get_cost_model(get_gpu("h200").name, "qwen3-8b", warn=False)
    t = cost.profile.target
    assert t.mixed_s_per_row_tile > 0
    rows = _steps(96, 0.05)
    for r in rows:
        r |= {"prefill_tokens": 2048, "prefill_reqs": 2, "prefill_attn_tokens2": 2048 * 512.0}
    rows[0] |= {"decode_reqs": 0, "verify_tokens": 0, "decode_context_tokens": 0, "decode_max_context": 0}
    write_record(tmp_path / "real", [], rows)
    write_record(tmp_path / "sim", [], rows)
    got = attribution(tmp_path / "real" / "steps.csv", tmp_path / "sim" / "steps.csv",
                      Speculation(method="none"), cost)["mixed_by_rows"]
    real, priced, bare, n = got["65-128 decoding"]
    assert n == 4 and real == pytest.approx(0.2)  # the prompt-only step is not a mixed one
    tiles = 96 * 2048 / (2 * t.prefill_tile)  # the mean chunk's query tiles, each decode row
    assert priced - bare == pytest.approx(4 * t.mixed_s_per_row_tile * tiles, rel=1e-9)
    assert got["1-16 decoding"][3] == 0


def test_each_visit_is_set_beside_the_replicates_runs_of_the_same_cases():
    def row(case, visit, real, priced):
        by_kind = {k: [real, priced, 10] for k in step_prices.KINDS}
        return {"case": case, "real_run": visit, "step_prices": {"by_kind": by_kind}}

    rows = [row("a", "visit1", 1.0, 0.98), row("b", "visit2", 2.0, 2.0),
            row("a", "visit9", 1.0, 1.01), row("b", "visit9", 1.0, 1.05), row("c", "visit9", 1.0, 1.0)]
    lines = step_prices.host_table(rows)
    assert lines[2].startswith("| visit1 | -2.0% (10 steps)")
    assert lines[3].startswith("| visit9, the same cases | +1.0% (10 steps)")  # only case a
    assert lines[4].startswith("| visit2 | +0.0%") and lines[5].startswith("| visit9, the same cases | +5.0%")
    assert step_prices.host_table(rows[:1]) == []
