"""`dspark-sim capacity`: the search, its answer re-checked by the simulator, sizing, cost and the CLI."""
import contextlib
import io
import json
import math
from types import SimpleNamespace

import numpy as np
import pytest
from conftest import EXAMPLES, synthetic_scenario
from hypothesis import given, settings
from hypothesis import strategies as st

from dspark_sim.capacity.plan import FLAGS, cost_per_mtok, plan, recommend, replicas_for
from dspark_sim.capacity.search import Evaluator, Probe, bisect_rate, judge, offered_rate, probe_scenario
from dspark_sim.cli import main
from dspark_sim.config import build
from dspark_sim.metrics.record import RequestColumns
from dspark_sim.methods import method_speculation
from dspark_sim.run import run_scenario
from dspark_sim.scenario import load_scenario
from dspark_sim.slo import Slo


# -- the bisection on its own --------------------------------------------------------
def _threshold(t: float, calls: list):
    def evaluate(x: float) -> Probe:
        calls.append(x)
        return Probe(x, 3.0 * x, x <= t, 1.0 if x <= t else 0.0)

    return evaluate


@settings(max_examples=300, deadline=None)
@given(t=st.floats(1e-2, 1e2), start=st.floats(0.1, 10), precision=st.floats(0.005, 0.2))
def test_bisect_brackets_a_monotone_threshold(t, start, precision):
    calls = []
    search = bisect_rate(_threshold(t, calls), start=start, precision=precision, max_sims=40)
    assert search.best is not None and search.first_fail is not None
    assert search.best.multiplier <= t < search.first_fail.multiplier
    assert search.first_fail.multiplier <= search.best.multiplier * (1 + precision)
    assert search.rate_rps == 3.0 * search.best.multiplier
    assert len(calls) == len(search.probes) <= 40


def test_bisect_respects_max_sims_and_reports_unbounded_and_infeasible():
    calls = []
    capped = bisect_rate(_threshold(100.0, calls), max_sims=5)
    assert len(calls) == 5 and capped.best.multiplier == 16.0 and capped.first_fail is None
    never = bisect_rate(_threshold(-1.0, []), max_doublings=4)
    assert never.best is None and never.rate_rps == 0.0
    always = bisect_rate(_threshold(math.inf, []), max_doublings=4)
    assert always.first_fail is None and always.best.multiplier == 16.0


def test_bisect_is_deterministic():
    a = bisect_rate(_threshold(7.3, []))
    b = bisect_rate(_threshold(7.3, []))
    assert a == b


# -- the rule -----------------------------------------------------------------------
def _fake_result(ttft_ms, tpot_ms, queue_ms, arrived=None, rejected=0):
    req = RequestColumns(ttft_ms=np.asarray(ttft_ms, dtype=float), tpot_ms=np.asarray(tpot_ms, dtype=float),
                         queue_delay_ms=np.asarray(queue_ms, dtype=float))
    return SimpleNamespace(collector=SimpleNamespace(requests=req, rejected=rejected),
                           num_arrived=arrived if arrived is not None else len(req))


def test_rule_attainment_counts_every_bound_and_the_queue():
    # 10 requests: one misses TTFT, one misses TPOT, one waited too long; single-token TPOT (nan) passes
    ttft = [100.0] * 10
    tpot = [10.0] * 9 + [math.nan]
    queue = [0.0] * 10
    ttft[0], tpot[1], queue[2] = 3000.0, 60.0, 6000.0
    slo = Slo(tpot_ms=50, ttft_ms=2000, attainment=0.7, max_queue_ms=5000)
    verdict = judge(slo, _fake_result(ttft, tpot, queue))
    assert verdict.attainment == pytest.approx(0.7) and verdict.passed
    strict = Slo(tpot_ms=50, ttft_ms=2000, attainment=0.71, max_queue_ms=5000)
    assert not judge(strict, _fake_result(ttft, tpot, queue)).passed
    # rejected requests count as arrived but never as good
    assert judge(slo, _fake_result(ttft, tpot, queue, arrived=20)).attainment == pytest.approx(0.35)


def test_rule_p99_checks_each_percentile():
    ttft, tpot, queue = [100.0] * 200, [10.0] * 200, [0.0] * 200
    slo = Slo(tpot_ms=50, ttft_ms=2000, rule="p99", max_queue_ms=5000)
    assert judge(slo, _fake_result(ttft, tpot, queue)).passed
    tpot[:3] = [90.0] * 3  # 1.5 % of requests above the bound: p99 is above it
    assert not judge(slo, _fake_result(ttft, tpot, queue)).passed
    assert not judge(slo, _fake_result([100.0] * 200, [10.0] * 200, queue, rejected=1)).passed


@pytest.mark.parametrize("kwargs,flag", [({"attainment": 1.5}, "--attainment"), ({"tpot_ms": 0}, "--slo-tpot-ms"),
                                         ({"rule": "p95"}, "--rule"), ({"max_queue_ms": math.inf}, "--max-queue-ms")])
def test_rule_rejects_bad_settings(kwargs, flag):
    from dspark_sim.errors import InputError

    with pytest.raises(InputError, match=flag):
        build(Slo, {"tpot_ms": 50, **kwargs}, None, None, FLAGS)


def test_probe_warnings_are_shown_once_per_message():
    import warnings

    from dspark_sim.capacity.search import OnceWarnings

    texts = ["no measured profile for h100/qwen3-8b", "no measured profile for h200/qwen3-8b",
             "request 17 rejected: prompt too long", "request 18 rejected: prompt too long",
             "no measured profile for h100/qwen3-8b"]
    once = OnceWarnings()
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")
        once.replay(warnings.WarningMessage(t, UserWarning, "", 0) for t in texts)
    assert [str(w.message) for w in shown] == texts[:3]


# -- the answer, checked by the simulator ------------------------------------------------
def _search(scenario, method, slo, max_requests):
    spec = method_speculation(method, scenario.speculation)
    base = probe_scenario(scenario, 1.0, speculation=spec, max_requests=max_requests)
    return base, bisect_rate(Evaluator(base, slo, offered_rate(base)), precision=0.02)


def _attainment_at(base, multiplier):
    summary, _ = run_scenario(probe_scenario(base, multiplier), None, plots=False, show_progress=False)
    return summary.slo_attainment, summary.completed


@pytest.mark.parametrize("source,method", [("synthetic", "none"), ("synthetic", "dspark"), ("trace", "dspark")])
def test_found_rate_meets_the_slo_and_ten_percent_more_does_not(write_scenario, source, method):
    """Re-simulate at the found rate (meets the SLO) and 10 % above it (misses), judged by summary.json's own
    slo_attainment with the scenario's SLO: the check does not reuse the search's rule code."""
    data = synthetic_scenario(num_requests=400, rate_per_s=5.0, prompt=600, output=120,
                              slo={"ttft_ms": 500, "tpot_ms": 25})
    if source == "trace":
        data["workload"] = {"trace": str(EXAMPLES / "traces" / "azure_llm_2023_code.csv"), "domain": "code"}
    scenario = load_scenario(write_scenario(data))
    slo = Slo(tpot_ms=25, ttft_ms=500, attainment=0.9, max_queue_ms=5000)
    base, search = _search(scenario, method, slo, max_requests=400)
    assert search.best is not None and search.first_fail is not None
    at_rate, done = _attainment_at(base, search.best.multiplier)
    above, _ = _attainment_at(base, search.best.multiplier * 1.1)
    assert done == 400
    assert at_rate >= 0.9 > above, (search.best, at_rate, above)
    assert at_rate == pytest.approx(search.best.attainment)


def test_tpot_only_slo_is_still_bounded_by_the_queue_guard(write_scenario):
    data = synthetic_scenario(num_requests=300, rate_per_s=5.0, prompt=600, output=60, slo={"tpot_ms": 200})
    scenario = load_scenario(write_scenario(data))
    _, search = _search(scenario, "none", Slo(tpot_ms=200, max_queue_ms=2000), max_requests=300)
    assert search.first_fail is not None
    assert search.first_fail.p99_queue_ms > 2000


# -- sizing and cost ---------------------------------------------------------------------
@pytest.mark.parametrize("target,rate,want", [(2.566, 1.098, 3), (3.0, 1.5, 2), (0.1, 5.0, 1), (10.0, 3.0, 4)])
def test_replicas_for(target, rate, want):
    assert replicas_for(target, rate) == want


def test_cost_per_million_output_tokens():
    # 2 GPUs at $3.50/h produce 1,000 tok/s: 3.6 M tokens an hour for $7
    assert cost_per_mtok(3.5, 2, 1000.0) == pytest.approx(7.0 / 3.6)


def test_recommend_prefers_cost_then_gpus_then_headroom():
    rows = [{"gpu": "a", "gpus": 2, "replicas": 2, "rate_per_replica_rps": 1.0, "cost_per_mtok": 5.0},
            {"gpu": "b", "gpus": 2, "replicas": 1, "rate_per_replica_rps": 3.0, "cost_per_mtok": 5.0},
            {"gpu": "c", "gpus": None, "replicas": None, "rate_per_replica_rps": 0.0, "cost_per_mtok": None}]
    assert recommend(rows)["gpu"] == "b"
    for r in rows:
        r["cost_per_mtok"] = None
    assert recommend(rows)["gpu"] == "b"
    assert recommend(rows[2:]) is None


def test_plan_moves_to_tp2_when_the_weights_do_not_fit_one_gpu(write_scenario):
    # Llama-3.1-70B: 141 GB of bf16 weights, more than 90 % of one H100 (77 GB), fits on two
    data = synthetic_scenario(num_requests=60, rate_per_s=2.0, prompt=400, output=40, model="llama-3.1-70b",
                              gpu="h100", slo={"ttft_ms": 2000, "tpot_ms": 100})
    scenario = load_scenario(write_scenario(data))
    slo = Slo(tpot_ms=100, ttft_ms=2000, max_queue_ms=5000)
    base_rate = offered_rate(probe_scenario(scenario, 1.0, max_requests=60))
    p = plan(scenario, "h100", "none", slo, 25.0, base_rate, max_requests=60, tp_choices=(1, 2), precision=0.1)
    assert p.candidates[0].tp == 1 and p.candidates[0].search is None and "no KV cache" in p.candidates[0].note
    assert p.best.tp == 2
    assert p.best.replicas == replicas_for(25.0, p.best.search.rate_rps)
    assert p.best.gpus == 2 * p.best.replicas


def test_plan_notes_a_tp_the_model_does_not_split_over(write_scenario):
    """Qwen3-8B's 32 heads do not split 3 ways, and 16 GPUs span two H200 nodes: each TP is a
    candidate with a note, not an error (the scenario it would probe could not exist)."""
    scenario = load_scenario(write_scenario(synthetic_scenario(num_requests=20)))
    slo = Slo(tpot_ms=100, ttft_ms=2000, max_queue_ms=5000)
    p = plan(scenario, "h200", "none", slo, 1.0, 1.0, max_requests=20, tp_choices=(3, 16))
    assert p.best is None and [c.tp for c in p.candidates] == [3, 16]
    assert all(c.search is None and c.note.startswith("cannot split") for c in p.candidates)
    assert "attention heads" in p.candidates[0].note and "node" in p.candidates[1].note


# -- the command -------------------------------------------------------------------------
def _cli(argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), [x for x in err.getvalue().splitlines() if not x.startswith("warning:")]


SMALL = ["--gpus", "h200,b200", "--methods", "none,dspark", "--max-requests", "150", "--tp", "1,2",
         "--precision", "0.1", "--quiet"]


def test_cli_writes_table_json_plot_and_is_deterministic(write_scenario, tmp_path):
    path = write_scenario(synthetic_scenario(num_requests=150, rate_per_s=4.0, prompt=500, output=80))
    runs = []
    for name, jobs in (("a", "1"), ("b", "2")):  # worker processes must not change the answer
        code, text, errs = _cli(["capacity", str(path), "--slo-tpot-ms", "30", "--slo-ttft-ms", "1000",
                                 "--price-per-gpu-hour", "h200=3.5,b200=5", "--qps", "40", "--jobs", jobs,
                                 "--out", str(tmp_path / name), *SMALL])
        assert code == 0, errs
        runs.append((tmp_path / name / "capacity.json").read_bytes())
        assert (tmp_path / name / "capacity.png").stat().st_size > 0
    assert runs[0] == runs[1]
    report = json.loads(runs[0])
    assert report["target_rps"] == 40.0 and len(report["rows"]) == 4
    for row in report["rows"]:
        assert row["gpus"] == row["replicas"] * row["tp"]
        assert row["replicas"] == replicas_for(40.0, row["rate_per_replica_rps"])
        target_tok_s = 40.0 * 80  # every request has 80 output tokens
        price = {"h200": 3.5, "b200": 5.0}[row["gpu"]]
        assert row["cost_per_mtok"] == pytest.approx(cost_per_mtok(price, row["gpus"], target_tok_s))
    assert "cheapest:" in text and "h200" in text and "b200" in text
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_cli_default_target_is_the_scenario_rate(write_scenario, tmp_path):
    data = synthetic_scenario(num_requests=150, rate_per_s=4.0)
    data["slo"] = {"tpot_ms": 40}
    path = write_scenario(data)
    code, _, errs = _cli(["capacity", str(path), "--out", str(tmp_path / "o"), *SMALL[:4], "--tp", "1",
                          "--max-requests", "100", "--quiet", "--no-plots"])
    assert code == 0, errs
    report = json.loads((tmp_path / "o" / "capacity.json").read_text())
    assert report["target_rps"] == pytest.approx(offered_rate(load_scenario(path)))
    assert report["slo"]["tpot_ms"] == 40 and report["slo"]["ttft_ms"] is None
    assert not (tmp_path / "o" / "capacity.png").exists()


@pytest.mark.parametrize("flags,fragment", [
    (["--gpus", "tpu9"], "--gpus"),
    (["--gpus", ","], "--gpus"),
    (["--price-per-gpu-hour", "h200=free"], "--price-per-gpu-hour"),
    (["--price-per-gpu-hour", "x9=3"], "--price-per-gpu-hour"),
    (["--attainment", "0"], "--attainment"),
    (["--attainment", "nan"], "--attainment"),
    (["--tp", "0,2"], "--tp"),
    (["--tp", "two"], "--tp"),
    (["--max-requests", "0"], "--max-requests"),
    (["--methods", "magic"], "--methods"),
    (["--qps", "-1"], "--qps"),
    (["--qps", "inf"], "--qps"),
    (["--slo-tpot-ms", "0"], "--slo-tpot-ms"),
    (["--precision", "0"], "--precision"),
    (["--max-sims", "0"], "--max-sims"),
    (["--jobs", "0"], "--jobs"),
])
def test_cli_bad_flags_fail_in_one_line(write_scenario, tmp_path, flags, fragment):
    path = write_scenario(synthetic_scenario())
    code, _, errs = _cli(["capacity", str(path), "--out", str(tmp_path / "o"), "--quiet", *flags])
    assert code == 2 and len(errs) == 1 and errs[0].startswith("error: ") and fragment in errs[0], errs
    assert not (tmp_path / "o").exists()


def test_cli_needs_a_tpot_slo(write_scenario, tmp_path):
    data = synthetic_scenario()
    del data["slo"]
    path = write_scenario(data)
    code, _, errs = _cli(["capacity", str(path), "--out", str(tmp_path / "o"), "--quiet"])
    assert code == 2 and "scenario.yaml" in errs[0] and "--slo-tpot-ms" in errs[0]


def test_cli_single_request_trace_has_no_rate(write_scenario, tmp_path):
    (tmp_path / "one.csv").write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.9799600,100,10\n")
    data = synthetic_scenario()
    data["workload"] = {"trace": "one.csv"}
    code, _, errs = _cli(["capacity", str(write_scenario(data)), "--out", str(tmp_path / "o"), "--quiet"])
    assert code == 2 and "scenario.yaml" in errs[0] and "two requests" in errs[0]
    assert not (tmp_path / "o").exists()
