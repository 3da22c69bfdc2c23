"""Measured communication curves: the file, its errors, and the cost models that use them.

The curves here are synthetic (written by the tests, labelled ``synthetic``): they check that a
profile's or a scenario's curves replace the roofline's link model, by hand-computed values,
and that their label travels into the cost model's source line.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from dspark_sim.catalog import get_gpu, get_model
from dspark_sim.cost import StepWork
from dspark_sim.cost.comm_curves import (CommCurve, CommCurves, load_comm_curves, measured_comm,
                                         retarget)
from dspark_sim.cost.parallel import Parallel
from dspark_sim.cost.profile import get_cost_model, load_profile, project_profile
from dspark_sim.errors import InputError

ROOT = Path(__file__).resolve().parents[1]
BYTES = (1024, 65536, 1 << 20, 16 << 20)
AR_S = (20e-6, 30e-6, 100e-6, 900e-6)
A2A_S = (25e-6, 40e-6, 150e-6, 1500e-6)


def synthetic(tp: int = 2, gpu: str = "h200", ops=("all_reduce", "all_to_all")) -> CommCurves:
    curves = {"all_reduce": CommCurve(BYTES, AR_S), "all_to_all": CommCurve(BYTES, A2A_S)}
    return CommCurves(gpu, tp, "synthetic", "2026-12-01", {op: curves[op] for op in ops})


def test_a_curve_interpolates_floors_and_extrapolates_by_hand():
    c = CommCurve(BYTES, AR_S)
    assert c.seconds_at(0) == 0.0
    assert c.seconds_at(10) == 20e-6  # the latency floor below the first point
    assert c.seconds_at(1024) == 20e-6
    mid = 1024 + (65536 - 1024) / 2
    assert c.seconds_at(mid) == pytest.approx(25e-6, rel=1e-12)
    assert c.seconds_at(32 << 20) == pytest.approx(1800e-6, rel=1e-12)  # the last point's bandwidth


def test_the_file_round_trips(tmp_path):
    path = tmp_path / "comm_tp2.json"
    synthetic().save(path)
    back = load_comm_curves(path)
    assert back == synthetic()
    assert back.label == "synthetic (h200, tp 2, 2026-12-01)"


@pytest.mark.parametrize("edit,key", [
    (lambda d: d.update(color=1), "color"),
    (lambda d: d.update(tp=1), "tp"),
    (lambda d: d.update(source="guessed"), "source"),
    (lambda d: d["curves"]["all_reduce"].update(bytes=[1024, 1024, 4096, 8192]), "curves.all_reduce.bytes[1]"),
    (lambda d: d["curves"]["all_reduce"].update(seconds=[1e-5, -1.0, 1e-4, 1e-3]), "curves.all_reduce.seconds[1]"),
    (lambda d: d["curves"].update(broadcast=d["curves"]["all_reduce"]), "curves.broadcast"),
    (lambda d: d.pop("gpu"), "gpu"),
])
def test_bad_files_name_the_file_and_key(tmp_path, edit, key):
    d = synthetic().to_json_dict()
    edit(d)
    path = tmp_path / "comm_tp2.json"
    path.write_text(json.dumps(d))
    with pytest.raises(InputError) as err:
        load_comm_curves(path)
    assert err.value.file == str(path) and err.value.key == key and "\n" not in str(err.value)


def _profile_with(tmp_path, sets: dict) -> Path:
    """The shipped Qwen3-32B H200 profile with ``sets`` as its measured communication."""
    from dataclasses import replace

    prof = replace(load_profile(ROOT / "profiles/h200/qwen3-32b.json"), comm=sets)
    path = tmp_path / "qwen3-32b.json"
    prof.save(path)
    return path


def test_a_profile_with_curves_prices_tp2_all_reduces_from_them(tmp_path):
    path = _profile_with(tmp_path, {2: synthetic()})
    assert load_profile(path).comm == {2: synthetic()}
    m = get_model("qwen3-32b")
    work = StepWork(decode_reqs=64, verify_tokens=256, decode_context_tokens=64 * 1024)
    cost = get_cost_model("h200", "qwen3-32b", tp=2, profile=path, warn=False)
    want = 2 * m.num_layers * CommCurve(BYTES, AR_S).seconds_at(256 * m.hidden_size * 2)
    assert cost.breakdown(work)["comm_s"] == pytest.approx(want, rel=1e-12)
    assert "communication: synthetic (h200, tp 2, 2026-12-01)" in cost.source
    plain = get_cost_model("h200", "qwen3-32b", tp=2, warn=False)  # the shipped profile: the link model
    assert "assumed" in plain.source and plain.breakdown(work)["comm_s"] != pytest.approx(want)
    # everything but the communication is the same model
    a, b = cost.breakdown(work), plain.breakdown(work)
    assert {k: v for k, v in a.items() if k != "comm_s"} == {k: v for k, v in b.items() if k != "comm_s"}


def test_another_tp_is_retargeted_by_the_ring_model_and_says_so(tmp_path):
    path = _profile_with(tmp_path, {2: synthetic()})
    cost = get_cost_model("h200", "qwen3-32b", tp=4, profile=path, warn=False)
    assert "projected from synthetic (h200, tp 2" in cost.source
    four = retarget(synthetic(), tp=4).curves["all_reduce"]
    # floor x (n-1) steps; bandwidth part x the ring's bytes, 2(n-1)/n: 1.5 / 1.0
    assert four.seconds[0] == pytest.approx(20e-6 * 3)
    assert four.seconds[-1] == pytest.approx(60e-6 + (900e-6 - 20e-6) * 1.5)


def test_dp_attention_needs_all_to_all_curves_else_keeps_the_roofline():
    m = get_model("qwen3-30b-a3b")
    par = Parallel(4, 4, True)
    assert measured_comm(m, par, {4: synthetic(4, ops=("all_reduce",))}) is None
    comm = measured_comm(m, par, {4: synthetic(4)})
    assert comm is not None and comm.seconds(512) > 0


def test_projection_scales_the_curves_by_the_nvlink_ratio(tmp_path):
    prof = load_profile(_profile_with(tmp_path, {2: synthetic()}))
    b200 = project_profile(prof, get_gpu("b200"))
    c = b200.comm[2]
    assert c.gpu == "b200" and c.source.startswith("projected from synthetic (h200")
    ratio = 900e9 / 1.8e12
    assert c.curves["all_reduce"].seconds[-1] == pytest.approx(20e-6 + (900e-6 - 20e-6) * ratio)


def test_a_scenario_names_curves_and_the_simulator_prices_with_them(tmp_path):
    from dspark_sim.cost.scenario import scenario_cost
    from dspark_sim.serving.simulator import simulate
    from dspark_sim.scenario import load_scenario

    synthetic().save(tmp_path / "comm_tp2.json")
    body = {"name": "tp2", "model": "qwen3-32b", "gpu": "h200", "seed": 1,
            "workload": {"synthetic": {"num_requests": 40, "rate_per_s": 8,
                                       "prompt_tokens": {"dist": "constant", "mean": 200},
                                       "output_tokens": {"dist": "constant", "mean": 40}}},
            "deployment": {"tp": 2, "comm_curves": "comm_tp2.json"},
            "speculation": {"method": "none"}}
    (tmp_path / "s.yaml").write_text(json.dumps(body))
    sc = load_scenario(tmp_path / "s.yaml")
    assert "communication: synthetic (h200, tp 2" in scenario_cost(sc).source
    body["deployment"].pop("comm_curves")
    (tmp_path / "plain.yaml").write_text(json.dumps(body))
    with_curves = simulate(sc).collector.steps.step_s.sum()
    without = simulate(load_scenario(tmp_path / "plain.yaml")).collector.steps.step_s.sum()
    assert with_curves != without
    # another GPU (capacity's search swaps it): carried by the NVLink ratio, labelled projected
    b200 = get_cost_model("b200", "qwen3-32b", tp=2, comm_curves=tmp_path / "comm_tp2.json", warn=False)
    assert "projected from synthetic (h200" in b200.source
    body["deployment"]["comm_curves"] = "missing.json"
    (tmp_path / "bad.yaml").write_text(json.dumps(body))
    with pytest.raises(InputError) as err:
        load_scenario(tmp_path / "bad.yaml")
    assert err.value.key == "deployment.comm_curves"


def test_fit_puts_measured_curves_and_tp_step_errors_into_the_profile(tmp_path):
    """The pipeline's pieces on a synthetic steps file: whole steps at tp 2 made 10 % slower
    than the cost model predicts give a 10 % tp held-out error."""
    from dspark_sim.profiling.pipeline import comm_sets
    from dspark_sim.profiling.tp_check import step_work, with_tp_errors

    raw = tmp_path / "raw"
    raw.mkdir()
    curves = synthetic()
    object.__setattr__(curves, "source", "measured")
    curves.save(raw / "comm_tp2.json")
    sets = comm_sets(raw, "h200")
    assert sets[2].source == "measured"
    prof = load_profile(_profile_with(tmp_path, sets))
    cost = get_cost_model("h200", "qwen3-32b", tp=2, profile=tmp_path / "qwen3-32b.json", warn=False)
    rows = []
    for kind, block in (("none", 0), ("block", 7)):
        for reqs in (1, 8, 32):
            row = {"kind": kind, "reqs": reqs, "context": 1024, "verify_tokens": reqs * (1 + block / 2),
                   "block_size": block}
            work = step_work(row)
            rows.append({**row, "step_s": 1.1 * (cost.step_s(work) - cost.sched_s(work))})
    (raw / "steps_qwen3-32b.tp2.json").write_text(json.dumps({"provenance": {"tp": 2}, "step": rows}))
    out = with_tp_errors(prof, raw, log=lambda *_: None)
    held = out.held_out["step_tp2"]
    assert held.num_points == 6 and held.median_rel_err == pytest.approx(1 - 1 / 1.1, rel=1e-9)
    assert "communication measured (h200, tp 2" in out.held_out_method
    shutil.copy(raw / "comm_tp2.json", raw / "comm_tp4.json")  # a tp-2 file under a tp-4 name
    (raw / "comm_tp4.json").write_text((raw / "comm_tp4.json").read_text().replace('"gpu": "h200"', '"gpu": "h100"'))
    with pytest.raises(InputError) as err:
        comm_sets(raw, "h200")
    assert err.value.key == "gpu"
