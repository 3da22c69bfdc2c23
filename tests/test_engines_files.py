"""Engine-written files (bench_serving, vllm bench serve, dspark_sps_profiler, step CSV) and
the calibration that fits an engine's host terms from them."""
import ast
import importlib.util
import json
import math
import os
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import synthetic_scenario

from dspark_sim.cli import main
from dspark_sim.cost import scenario_cost
from dspark_sim.cost.base import StepWork
from dspark_sim.engines.model import EngineTerms, load_calibration
from dspark_sim.errors import InputError
from dspark_sim.engines.files import BenchRun, StepRows, read_engine_file
from dspark_sim.engines.fit import fit_step_terms, replay_scenario, step_residuals
from dspark_sim.scenario import Scenario, load_scenario

# the engines' released packages, unpacked by tests/engines.sh (DSPARK_ENGINES names another folder)
ENGINES = Path(os.environ.get("DSPARK_ENGINES", Path(__file__).resolve().parents[1] / ".engines"))


def _released(engine: str, member: str) -> Path:
    """A file of ``engine``'s released package as tests/engines.sh unpacked it (skip without it)."""
    path = ENGINES / engine / member
    if not path.is_file():
        pytest.skip(f"{engine}'s released package is not unpacked under {ENGINES} (run tests/engines.sh)")
    return path


def _sglang_result(details: bool) -> dict:
    """One line as sglang.benchmark.serving.benchmark appends it (the keys its ``result`` dict holds)."""
    out = {"tag": None, "backend": "sglang", "dataset_name": "random", "request_rate": float("inf"),
           "max_concurrency": None, "sharegpt_output_len": None, "random_input_len": 300,
           "random_output_len": 40, "random_range_ratio": 0.0, "server_info": None, "duration": 3.5,
           "completed": 4, "total_input_tokens": 1200, "total_input_text_tokens": 1200,
           "total_input_vision_tokens": 0, "total_output_tokens": 160, "total_output_tokens_retokenized": 160,
           "request_throughput": 1.1, "input_throughput": 340.0, "output_throughput": 45.7,
           "total_throughput": 390.0, "median_ttft_ms": 120.0, "median_tpot_ms": 9.0, "mean_ttft_ms": 121.0,
           "mean_tpot_ms": 9.1, "median_e2e_latency_ms": 480.0, "concurrency": 3.9, "accept_length": None}
    if details:
        out |= {"input_lens": [300] * 4, "output_lens": [40] * 4, "ttfts": [0.12] * 4, "itls": [[0.009] * 39] * 4,
                "generated_texts": [""] * 4, "errors": [""] * 4}
    return out


def _vllm_result(details: bool) -> dict:
    """A vllm bench serve --save-result file's object (vllm/benchmarks/serve.py main_async's result_json)."""
    out = {"date": "20260101-000000", "endpoint_type": "openai-chat", "backend": "openai-chat", "label": None,
           "model_id": "Qwen/Qwen3-14B", "tokenizer_id": "Qwen/Qwen3-14B", "num_prompts": 4,
           "request_rate": "inf", "burstiness": 1.0, "max_concurrency": None, "duration": 3.4, "completed": 4,
           "failed": 0, "total_input_tokens": 1200, "total_output_tokens": 160, "request_throughput": 1.2,
           "request_goodput": None, "output_throughput": 47.0, "total_token_throughput": 400.0,
           "max_output_tokens_per_s": 60.0, "max_concurrent_requests": 4, "rtfx": 0.0, "mean_ttft_ms": 110.0,
           "median_ttft_ms": 108.0, "std_ttft_ms": 3.0, "p99_ttft_ms": 115.0, "mean_tpot_ms": 9.5,
           "median_tpot_ms": 9.4, "std_tpot_ms": 0.2, "p99_tpot_ms": 10.0, "latencies": [0.48] * 4}
    if details:
        out |= {"input_lens": [300, 300, 300, 300], "output_lens": [40, 40, 40, 40], "ttfts": [0.11] * 4,
                "itls": [[0.0094] * 39] * 4, "start_times": [100.0, 100.001, 100.002, 100.003],
                "generated_texts": [""] * 4, "errors": [""] * 4}
    return out


def test_sglang_bench_serving_jsonl_lines_are_runs(tmp_path):
    path = tmp_path / "sglang_0101_4_300_40.jsonl"
    path.write_text(json.dumps(_sglang_result(False)) + "\n" + json.dumps(_sglang_result(True)) + "\n")
    runs = read_engine_file(path)
    assert [r.format for r in runs] == ["sglang.bench_serving"] * 2
    assert math.isinf(runs[0].request_rate) and not runs[0].detailed
    assert runs[1].detailed and runs[1].input_lens == (300,) * 4
    assert runs[0].median_tpot_ms == 9.0 and runs[0].output_throughput == 45.7


def test_vllm_result_json_with_details(tmp_path):
    path = tmp_path / "openai-chat-infqps-Qwen3-14B.json"
    path.write_text(json.dumps(_vllm_result(True)))
    (run,) = read_engine_file(path)
    assert run.format == "vllm bench serve" and math.isinf(run.request_rate)
    assert run.start_times_s[0] == 100.0 and run.detailed


@pytest.mark.parametrize("change, key", [
    ({"median_tpot_ms": -1}, "median_tpot_ms"),
    ({"completed": "four"}, "completed"),
    ({"input_lens": [1, 2]}, "output_lens"),
    ({"request_rate": "trace"}, "request_rate"),
])
def test_bad_bench_value_names_key(tmp_path, change, key):
    path = tmp_path / "r.json"
    path.write_text(json.dumps({**_vllm_result(False), **change}))
    with pytest.raises(InputError) as err:
        read_engine_file(path)
    assert key in err.value.key


def test_step_csv_and_missing_column(tmp_path, capsys, write_scenario):
    good = tmp_path / "steps.csv"
    good.write_text("reqs,step_s,verify_tokens\n1,0.01,1\n8,0.012,\n")
    rows = read_engine_file(good)
    assert isinstance(rows, StepRows) and rows.verify_tokens.tolist() == [1, 8]
    bad = tmp_path / "bad.csv"
    bad.write_text("requests,step_s\n1,0.01\n")
    scenario = write_scenario(synthetic_scenario(engine="vllm"))
    assert main(["engine-fit", str(scenario), str(bad), "--out", str(tmp_path / "c.json")]) == 2
    assert "bad.csv: reqs: missing column" in capsys.readouterr().err
    assert not (tmp_path / "c.json").exists()


def _released_module(tmp_path, member: str, name: str, *beside: str):
    """A module of SGLang 0.5.23's released package (and the ``beside`` files it loads), copied into
    the test's folder (skip without the package)."""
    for item in (member, *beside):
        (tmp_path / item).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(_released("sglang", item), tmp_path / item)
    path = tmp_path / member
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    return path, spec, module


def test_released_sps_profiler_writer_output_is_read(tmp_path):
    """SGLang 0.5.23's own append_round_files writes the records and rounds files."""
    pytest.importorskip("msgspec")
    pytest.importorskip("requests")
    _, spec, profiler = _released_module(tmp_path, "sglang/benchmark/dspark_sps_profiler.py", "sps_profiler_t",
                                         "sglang/srt/speculative/dspark_components/dspark_sps.py")
    try:
        spec.loader.exec_module(profiler)
    except Exception as err:  # its fallback import needs the wheel's dspark_sps module beside it
        pytest.skip(f"the released profiler does not import here: {type(err).__name__}")
    paths = profiler.out_paths(out=str(tmp_path / "sps.json"))
    for repeat, bs in enumerate((4, 16)):
        rows = [profiler.SpsRow(forward_ct=i, num_running_reqs=bs, num_verify_tokens=bs * 8,
                                step_time=0.010 + 0.0002 * bs) for i in range(5)]
        outcome = profiler.RoundOutcome(
            batch_size=bs, batch_size_per_rank=bs, batch_tokens=bs * 8, steps_per_sec=1 / (0.010 + 0.0002 * bs),
            num_steady_steps=5, match_fraction=1.0, per_rank_median_step_time=[0.010 + 0.0002 * bs],
            rank_rows=[rows], load_info=profiler.LoadInfo(num_requests=bs, max_new_tokens=64, wall_seconds=1.0,
                                                          reached_target=True))
        profiler.append_round_files(records_path=paths["records"], rounds_path=paths["rounds"], outcome=outcome,
                                    repeat=repeat)
    records, rounds = read_engine_file(paths["records"]), read_engine_file(paths["rounds"])
    assert records.format == "dspark_sps_profiler records" and records.reqs.tolist() == [4] * 5 + [16] * 5
    assert rounds.format == "dspark_sps_profiler rounds" and rounds.verify_tokens.tolist() == [32, 128]
    assert rounds.step_s == pytest.approx([0.0108, 0.0132])


def _result_keys(source: str, variable: str) -> set[str]:
    """The string keys of the dict literal(s) assigned to ``variable`` in ``source``."""
    keys = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(node.value, ast.Dict):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == variable for t in targets):
                keys |= {k.value for k in node.value.keys if isinstance(k, ast.Constant)}
    return keys


def test_reader_keys_are_the_released_bench_serving_keys(tmp_path):
    """Every key the reader needs is one SGLang 0.5.23's benchmark() writes (result, result_details)."""
    path, _, _ = _released_module(tmp_path, "sglang/benchmark/serving.py", "sglang_serving_t")
    source = path.read_text()
    written = _result_keys(source, "result") | _result_keys(source, "result_details")
    assert set(_sglang_result(True)) - {"tag"} <= written | {"tag"}
    assert {"median_ttft_ms", "median_tpot_ms", "output_throughput", "input_lens", "output_lens"} <= written


def _step_csv(path, cost, reqs, step_s):
    """A step CSV of decode steps of each of ``reqs`` requests (500 tokens of context each), every
    step lasting ``step_s(gpu_s, reqs)`` given the GPU work ``cost`` prices it at."""
    lines = ["reqs,verify_tokens,context,step_s"]
    for r in reqs:
        work = StepWork(decode_reqs=r, verify_tokens=r, decode_context_tokens=r * 500, running_reqs=r,
                        decode_max_context=500)
        gpu = sum(v for k, v in cost.breakdown(work).items() if k not in ("engine_s", "eager_s"))
        lines.append(f"{r},{r},{r * 500},{step_s(gpu, r)!r}")
    path.write_text("\n".join(lines) + "\n")
    return path


def test_calibrated_terms_from_steps_reproduce_the_host_time(tmp_path, write_scenario):
    """Step times made as GPU work + 0.8 ms + 3 us a request (host time adding to the GPU's: no
    overlap) give those terms back, and the calibration file drives a scenario."""
    engine = {"name": "vllm", "overlap": False}
    scenario = load_scenario(write_scenario(synthetic_scenario(engine=engine)))
    cost = scenario_cost(scenario.__class__.from_dict(synthetic_scenario(engine=engine)), warn=False)
    csv = _step_csv(tmp_path / "steps.csv", cost, (1, 2, 4, 8, 16, 32, 64), lambda gpu, r: gpu + 0.8e-3 + 3e-6 * r)
    rows = read_engine_file(csv)
    bias, per_req = fit_step_terms(rows.reqs, step_residuals(scenario, rows))
    assert bias == pytest.approx(0.8e-3, rel=1e-6) and per_req == pytest.approx(3e-6, rel=1e-5)
    out = tmp_path / "cal.json"
    assert main(["engine-fit", str(write_scenario(synthetic_scenario(engine=engine))), str(csv), "--out", str(out),
                 "--quiet"]) == 0
    cal = json.loads(out.read_text())
    assert cal["fitted_from"][0]["format"] == "step csv" and cal["engine"] == "vllm"
    terms = load_calibration(out, engine="vllm")
    assert terms.step_host_s == pytest.approx(0.8e-3, rel=1e-6)
    used = Scenario.from_dict(synthetic_scenario(engine={"name": "vllm", "calibration": str(out)}))
    assert used.engine.terms == terms


def test_timed_steps_of_an_overlapped_engine_give_its_whole_host_time(tmp_path, write_scenario):
    """Overlapped steps last max(GPU work, host time): the steps that took longer than their GPU
    work give the host terms back (0.8 ms + 300 us a request); the others hide theirs."""
    from dspark_sim.engines.fit import calibrate

    scenario = load_scenario(write_scenario(synthetic_scenario(engine="vllm")))
    assert scenario.engine.overlapped
    csv = _step_csv(tmp_path / "steps.csv", scenario_cost(scenario, warn=False), (1, 2, 4, 8, 16, 32, 64, 96, 128),
                    lambda gpu, r: max(gpu, 0.8e-3 + 300e-6 * r))
    terms = calibrate(scenario, [csv])["terms"]
    assert terms["step_host_s"] == pytest.approx(0.8e-3, rel=1e-6)
    assert terms["step_host_s_per_req"] == pytest.approx(300e-6, rel=1e-6)


def test_bench_run_replays_its_own_requests(tmp_path):
    base = Scenario.from_dict(synthetic_scenario(engine="sglang"))
    path = tmp_path / "r.json"
    path.write_text(json.dumps(_vllm_result(True)))
    (run,) = read_engine_file(path)
    scenario = replay_scenario(base, run, tmp_path)
    assert scenario.workload.format == "mooncake"
    lines = scenario.workload.trace.read_text().splitlines()
    assert [json.loads(x)["input_length"] for x in lines] == [300] * 4
    assert json.loads(lines[-1])["timestamp"] == pytest.approx(3.0)
    assert isinstance(run, BenchRun) and EngineTerms().frontend_s == 0.0


def _vllm_serve_source(tmp_path) -> str:
    """vLLM 0.33.0's vllm/benchmarks/serve.py from its released package (skip without it)."""
    return _released("vllm", "vllm/benchmarks/serve.py").read_text()


def test_reader_keys_are_the_released_vllm_keys(tmp_path):
    """Every key the reader needs is one vLLM 0.33.0's bench serve writes into its result file."""
    source = _vllm_serve_source(tmp_path)
    written = _result_keys(source, "result")
    for node in ast.walk(ast.parse(source)):  # result_json["..."] = ...
        if isinstance(node, ast.Assign):
            for t in node.targets:
                if isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name) and t.value.id == "result_json" \
                        and isinstance(t.slice, ast.Constant):
                    written.add(t.slice.value)
    needed = {"request_rate", "max_concurrency", "completed", "total_input_tokens", "total_output_tokens",
              "duration", "output_throughput", "input_lens", "output_lens", "start_times", "endpoint_type"}
    assert needed <= written
    # the medians come from process_one_metric over the default metrics "ttft,tpot,itl"
    assert 'result[f"median_{metric_attribute_name}_ms"]' in source and '"ttft,tpot,itl"' in source
    assert '"inf"' in source  # request_rate inf is written as the string "inf"


def test_engine_fit_on_a_bench_result_replays_it(tmp_path, write_scenario, capsys):
    """A vllm bench serve result whose medians are what the simulator gives with a 40 ms front end
    and no step host time: the fit finds those terms, and the run then replays. Overlap off: an
    overlapped step hides host time shorter than its GPU work, so no run could tell it apart from none.
    A lone request's first token comes after its intake and one streamed message, so one run tells
    only their sum."""
    scenario = write_scenario(synthetic_scenario(engine={"name": "vllm", "overlap": False}, model="qwen3-14b"))
    base = load_scenario(scenario)
    result = {**_vllm_result(True), "completed": 1, "num_prompts": 1, "input_lens": [300], "output_lens": [40],
              "ttfts": [0.11], "itls": [[0.0094] * 39], "start_times": [100.0], "generated_texts": [""],
              "errors": [""]}  # one request: nothing queues at the front end
    from dspark_sim.engines.fit import replay, with_terms

    sim = replay(with_terms(replay_scenario(base, read_engine_file(_write(tmp_path, result))[0], tmp_path),
                            EngineTerms(frontend_s=0.040)))
    result |= {k: sim[k] for k in ("median_ttft_ms", "median_tpot_ms", "output_throughput")}
    out = tmp_path / "cal.json"
    assert main(["engine-fit", str(scenario), str(_write(tmp_path, result)), "--out", str(out), "--quiet"]) == 0
    cal = json.loads(out.read_text())
    assert cal["terms"]["frontend_s"] + cal["terms"]["stream_s"] == pytest.approx(0.040, abs=2e-4)
    assert cal["terms"]["step_host_s"] == pytest.approx(0.0, abs=2e-5)
    assert abs(cal["replay"][0]["error"]["ttft"]) < 1e-3
    assert cal["fitted_from"][0]["format"] == "vllm bench serve" and len(cal["fitted_from"][0]["sha256"]) == 64
    assert "a streamed message" in capsys.readouterr().out


def _write(tmp_path, result: dict) -> Path:
    path = tmp_path / "vllm_result.json"
    path.write_text(json.dumps(result))
    return path
