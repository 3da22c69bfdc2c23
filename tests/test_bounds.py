"""Hostile and extreme inputs to the seven commands: a physical run (what an engine would refuse
counted as rejected) or one ``error:`` line naming the file or flag, exit 2, nothing on disk.

The first tests replay each input once found to give an impossible answer, hang or crash; the
table after them holds further hostile inputs across ``run``, ``capacity``, ``calibrate``,
``compare``, ``validate``, ``dspark-tune``, ``dspark-decode`` and ``dspark-profile``. Each call
runs in-process and must end within :data:`CPU_LIMIT_S` of CPU time (a hang guard that the
machine's load does not move).
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from conftest import synthetic_scenario
from physical import assert_physical

from dspark_sim.cli import main as sim_main

CPU_LIMIT_S = 10.0
AZURE = "TIMESTAMP,ContextTokens,GeneratedTokens\n"


def _azure(*rows: tuple[int, int]) -> str:
    return AZURE + "".join(f"2023-11-16 18:17:{3 + i:02d}.0000000,{p},{o}\n" for i, (p, o) in enumerate(rows))


def _call(main, argv, capsys) -> tuple[int, list[str], float]:
    t0 = time.process_time()
    try:
        code = main(argv)
    except SystemExit as stop:  # argparse's errors exit (with one line: dspark_sim.errors.ArgumentParser)
        code = stop.code
    cpu_s = time.process_time() - t0
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    return code, [line for line in err.splitlines() if not line.startswith("warning:")], cpu_s


def _expect_one_line(main, argv, capsys, root: Path, *fragments):
    """Exit 2, one ``error:`` line holding every fragment, within the CPU limit, no new file under ``root``."""
    before = {p for p in root.rglob("*")}
    code, lines, cpu_s = _call(main, argv, capsys)
    assert code == 2, (code, lines)
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    assert {p for p in root.rglob("*")} == before, sorted(set(root.rglob("*")) - before)
    assert cpu_s < CPU_LIMIT_S, cpu_s
    return lines[0]


def _scenario(tmp_path, data, name="s.yaml") -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return str(path)


def _trace_scenario(tmp_path, text: str, model="qwen3-8b", **deployment) -> str:
    (tmp_path / "t.csv").write_text(text)
    data = synthetic_scenario(model=model)
    data["workload"] = {"trace": "t.csv", "domain": "code"}
    data["deployment"] = {**data["deployment"], **deployment}
    return _scenario(tmp_path, data)


def _run(tmp_path, scenario: str) -> list[str]:
    return ["run", scenario, "--out", str(tmp_path / "out"), "--quiet", "--no-plots"]


# -- the inputs once found wrong ------------------------------------------------------------------
def test_a_request_beyond_the_context_or_the_cache_is_rejected_and_the_rest_runs(tmp_path, capsys):
    """1.5M and 200k output tokens on Qwen3-8B (40,960-token context) are rejected as vLLM and SGLang
    reject them; the others complete, and the outputs count both."""
    scenario = _trace_scenario(tmp_path, _azure((100, 10), (100, 1_500_000), (100, 200_000), (100, 20)))
    code, lines, cpu_s = _call(sim_main, _run(tmp_path, scenario), capsys)
    assert code == 0 and cpu_s < CPU_LIMIT_S, lines
    summary = assert_physical(tmp_path / "out")
    assert (summary["requests"], summary["completed"], summary["rejected"]) == (4, 2, 2)
    assert summary["rejected_reasons"] == {"context_length": 2}
    assert summary["kv_peak_fraction"] <= 1


def test_a_request_that_fits_the_context_but_not_the_cache_is_rejected(tmp_path, capsys):
    """Llama-3.1-8B's context is 131,072 tokens; at 20% of an H200 its cache holds fewer."""
    scenario = _trace_scenario(tmp_path, _azure((120_000, 10), (100, 10)), model="llama-3.1-8b",
                               gpu_memory_fraction=0.2)
    code, lines, _ = _call(sim_main, _run(tmp_path, scenario), capsys)
    assert code == 0, lines
    summary = assert_physical(tmp_path / "out")
    assert summary["rejected_reasons"] == {"kv_cache": 1} and summary["completed"] == 1


@pytest.mark.parametrize("output", [1_500_000, 200_000, 10**9])
def test_a_workload_no_engine_would_run_is_one_error(tmp_path, capsys, output):
    data = synthetic_scenario(num_requests=1, output=output)
    _expect_one_line(sim_main, _run(tmp_path, _scenario(tmp_path, data)), capsys, tmp_path,
                     "s.yaml", "every request is rejected", "context of 40960 tokens")


def test_a_trace_of_fifty_million_output_tokens_ends_at_once(tmp_path, capsys):
    scenario = _trace_scenario(tmp_path, _azure((100, 50_000_000)))
    _expect_one_line(sim_main, _run(tmp_path, scenario), capsys, tmp_path, "every request is rejected")


def test_a_count_beyond_int64_is_not_wrapped(tmp_path, capsys):
    scenario = _trace_scenario(tmp_path, _azure((10, 10)).replace(",10,10", ",99999999999999999999,10"))
    _expect_one_line(sim_main, _run(tmp_path, scenario), capsys, tmp_path,
                     "t.csv", "ContextTokens", "99999999999999999999")


@pytest.mark.parametrize("tp,why", [(3, "not divisible by 3"), (64, "spans more than one h200 node")])
def test_tensor_parallel_sizes_no_engine_runs(tmp_path, capsys, tp, why):
    data = synthetic_scenario(deployment={"tp": tp})
    _expect_one_line(sim_main, _run(tmp_path, _scenario(tmp_path, data)), capsys, tmp_path, "deployment.tp", why)


def test_a_vanishing_rate_or_time_scale_is_refused(tmp_path, capsys):
    data = synthetic_scenario(rate_per_s=1e-300)
    _expect_one_line(sim_main, _run(tmp_path, _scenario(tmp_path, data)), capsys, tmp_path,
                     "rate_per_s", "1e-300")
    scenario = _trace_scenario(tmp_path, _azure((10, 10), (10, 10)))
    raw = yaml.safe_load(Path(scenario).read_text())
    raw["workload"]["time_scale"] = 1e-300
    _expect_one_line(sim_main, _run(tmp_path, _scenario(tmp_path, raw)), capsys, tmp_path,
                     "time_scale", "1e-300")


def test_capacity_refuses_an_astronomical_qps(tmp_path, capsys):
    scenario = _scenario(tmp_path, synthetic_scenario(num_requests=4))
    _expect_one_line(sim_main, ["capacity", scenario, "--qps", "1e300", "--out", str(tmp_path / "cap")], capsys,
                     tmp_path, "--qps", "1e+300")


def test_duplicate_yaml_keys_are_errors(tmp_path, capsys):
    text = yaml.safe_dump(synthetic_scenario(), sort_keys=False).replace("model: qwen3-8b",
                                                                         "model: qwen3-8b\nmodel: qwen3-4b")
    (tmp_path / "s.yaml").write_text(text)
    _expect_one_line(sim_main, _run(tmp_path, str(tmp_path / "s.yaml")), capsys, tmp_path,
                     "s.yaml", "model", "duplicate key")


def _calibrate(tmp_path, *flags) -> list[str]:
    return ["calibrate", *flags, "--out", str(tmp_path / "cal")]


def test_duplicate_calibrate_rows_are_errors(tmp_path, capsys):
    (tmp_path / "t.csv").write_text("dataset,accept_len\ngsm8k,3\ngsm8k,5\n")
    _expect_one_line(sim_main, _calibrate(tmp_path, "--table", str(tmp_path / "t.csv")), capsys, tmp_path,
                     "t.csv", "line 3", "duplicate row")


def test_a_log_where_every_draft_is_accepted_is_one_error(tmp_path, capsys):
    rows = "".join(f"0.{i % 9 + 1},0.5,0.{(i * 7) % 9 + 1},3\n" for i in range(200))
    (tmp_path / "log.csv").write_text("c1,c2,c3,accepted\n" + rows)
    _expect_one_line(sim_main, _calibrate(tmp_path, "--log", str(tmp_path / "log.csv")), capsys, tmp_path,
                     "log.csv", "position 1", "accepted in all 200")


def test_an_accepted_length_beyond_the_block_is_one_error(tmp_path, capsys):
    (tmp_path / "t.csv").write_text("dataset,accept_len\ngsm8k,12\n")
    _expect_one_line(sim_main, _calibrate(tmp_path, "--table", str(tmp_path / "t.csv")), capsys, tmp_path,
                     "t.csv", "accept_len", "12")


def _tune(tmp_path, *flags) -> list[str]:
    return ["--scenario", str(Path(__file__).parents[1] / "examples" / "tune_default.yaml"),
            "--storage", f"sqlite:///{tmp_path / 'study.db'}", "--out", str(tmp_path / "tuned"),
            "--trials", "1", "--seeds", "1", "--baseline-trials", "1", "--quiet", *flags]


@pytest.mark.parametrize("space,fragments", [
    ("dspark:\n  block_size: [0, 99]\n", ("dspark.block_size", "0", "[1, 16]")),
    ("threshold:\n  threshold: {low: -5, high: 0.5}\n", ("threshold.threshold", "-5")),
    ("deployment:\n  max_running_requests: {low: -5, high: 64}\n", ("max_running_requests", "-5")),
])
def test_a_space_file_outside_the_scenarios_bounds_is_one_error(tmp_path, capsys, space, fragments):
    from dspark_sim.tuner.cli import main as tune_main

    (tmp_path / "space.yaml").write_text(space)
    _expect_one_line(tune_main, _tune(tmp_path, "--space", str(tmp_path / "space.yaml")), capsys, tmp_path,
                     "space.yaml", *fragments)


@pytest.mark.parametrize("flags,fragments", [
    (("--gpu", "h300"), ("dspark-tune", "--gpu", "h300")),
    (("--slo-tok-per-s-user", "-5"), ("--slo-tok-per-s-user", "-5")),
])
def test_tune_flags_are_named(tmp_path, capsys, flags, fragments):
    from dspark_sim.tuner.cli import main as tune_main

    _expect_one_line(tune_main, _tune(tmp_path, *flags), capsys, tmp_path, *fragments)


def test_no_baselines_is_not_reported_as_baselines_missing_the_slo():
    from types import SimpleNamespace

    from dspark_sim.tuner.report import headline
    from dspark_sim.tuner.repeats import Spread, summary

    ours = {"job": SimpleNamespace(method="dspark"), "value": 900.0, "winner": {"feasible": True}}
    alone = summary({"dspark": Spread("dspark", (900.0,), 1, 10, (10,))}, 1)
    assert "No baseline was compared" in headline([ours], "tok/s/GPU", alone)
    missed = {"job": SimpleNamespace(method="static"), "value": 700.0, "winner": {"feasible": False}}
    both = summary({"dspark": Spread("dspark", (900.0,), 1, 10, (10,)),
                    "static": Spread("static", (), 1, 10, (10,))}, 1)
    assert "No baseline meets the SLO" in headline([ours, missed], "tok/s/GPU", both)


# -- stopping cleanly ---------------------------------------------------------------------------------
@pytest.mark.parametrize("sig,code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_stopped_run_leaves_nothing_and_exits_128_plus_the_signal(tmp_path, sig, code):
    scenario = _scenario(tmp_path, synthetic_scenario(num_requests=200_000, rate_per_s=50.0))
    proc = subprocess.Popen([sys.executable, "-m", "dspark_sim.cli", *_run(tmp_path, scenario)],
                            stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    deadline = time.monotonic() + 120
    while not list(tmp_path.glob(".out.tmp-*")) and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    assert list(tmp_path.glob(".out.tmp-*")), "the run never started writing"
    time.sleep(0.5)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == code, err
    assert "Traceback" not in err and err.strip().splitlines()[-1].endswith("nothing written"), err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.yaml"]


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # the lost exception, by design
@pytest.mark.parametrize("sig,code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_lost_in_a_finalizer_still_stops_the_command(sig, code, capsys):
    """A signal that lands in a finalizer raises there, and Python prints and drops that
    exception; the command's loops ask again and stop all the same."""
    from dspark_sim.errors import raise_if_stopped, run_reporting_errors

    class Finalized:
        def __del__(self):
            os.kill(os.getpid(), sig)

    def command():
        Finalized()  # collected at once: the handler's exception is raised in __del__ and lost
        raise_if_stopped()  # what the simulator's loops call
        return 0

    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    assert run_reporting_errors(command) == code
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before
    assert run_reporting_errors(lambda: raise_if_stopped() or 0) == 0  # nothing left pending


# -- further hostile inputs, across the seven commands ----------------------------------------------
def _syn(tmp_path, **over) -> str:
    return _scenario(tmp_path, synthetic_scenario(num_requests=3, **over))


def _with(data: dict, dotted: str, value) -> dict:
    node = data
    *parents, leaf = dotted.split(".")
    for key in parents:
        node = node.setdefault(key, {})
    node[leaf] = value
    return data


RUN_BAD = [  # (dotted key, value, fragment)
    ("workload.synthetic.num_requests", 10**10, "num_requests"),
    ("workload.synthetic.rate_per_s", 1e300, "rate_per_s"),
    ("workload.synthetic.rate_per_s", 5e-324, "rate_per_s"),
    ("workload.synthetic.cv", 1e6, "cv"),
    ("workload.synthetic.prompt_tokens.mean", 2**63, "mean"),
    ("workload.synthetic.output_tokens.max_tokens", 2**40, "max_tokens"),
    ("workload.synthetic.output_tokens.values", [1, 2**33], "values"),
    ("workload.max_requests", 10**12, "max_requests"),
    ("deployment.replicas", 4097, "replicas"),
    ("deployment.replicas", 2**64, "replicas"),
    ("deployment.tp", 128, "tp"),
    ("deployment.tp", 6, "tp"),
    ("deployment.kv_block_tokens", 10**6, "kv_block_tokens"),
    ("deployment.max_running_requests", 10**9, "max_running_requests"),
    ("seed", 2**63, "seed"),
    ("seed", -1, "seed"),
    ("slo.tpot_ms", 1e300, "tpot_ms"),
    ("slo.ttft_ms", -1e-300, "ttft_ms"),
]


@pytest.mark.parametrize("dotted,value,fragment", RUN_BAD)
def test_run_bounds(tmp_path, capsys, dotted, value, fragment):
    data = _with(synthetic_scenario(num_requests=3), dotted, value)
    _expect_one_line(sim_main, _run(tmp_path, _scenario(tmp_path, data)), capsys, tmp_path, "s.yaml", fragment)


@pytest.mark.parametrize("rows,fragment", [
    ("2023-11-16 18:17:03.0,100,-0\n", "GeneratedTokens"),
    ("2023-11-16 18:17:03.0,1e30,10\n", "ContextTokens"),
    ("2023-11-16 18:17:03.0,100,4294967297\n", "GeneratedTokens"),
    ("2023-11-16 18:17:03.0,nan,10\n", "ContextTokens"),
    ("", "t.csv"),
])
def test_run_trace_bounds(tmp_path, capsys, rows, fragment):
    scenario = _trace_scenario(tmp_path, AZURE + rows)
    _expect_one_line(sim_main, _run(tmp_path, scenario), capsys, tmp_path, "t.csv", fragment)


def test_run_seed_flag(tmp_path, capsys):
    _expect_one_line(sim_main, [*_run(tmp_path, _syn(tmp_path)), "--seed", "-3"], capsys, tmp_path, "--seed", "-3")


@pytest.mark.parametrize("flags,fragment", [
    (("--qps", "-1"), "--qps"), (("--qps", "nan"), "--qps"), (("--max-requests", "10000000000"), "--max-requests"),
    (("--precision", "5"), "--precision"), (("--max-sims", "100000"), "--max-sims"),
    (("--jobs", "100000"), "--jobs"), (("--price-per-gpu-hour", "h200=1e9"), "--price-per-gpu-hour"),
    (("--tp", "1,128"), "--tp"), (("--attainment", "1.5"), "--attainment"),
    (("--slo-tpot-ms", "1e300"), "--slo-tpot-ms"),
])
def test_capacity_bounds(tmp_path, capsys, flags, fragment):
    argv = ["capacity", _syn(tmp_path), "--out", str(tmp_path / "cap"), "--gpus", "h200", "--methods", "none",
            *flags]
    _expect_one_line(sim_main, argv, capsys, tmp_path, fragment)


@pytest.mark.parametrize("flags,fragment", [
    (("--concurrency", "0"), "--concurrency"), (("--concurrency", "1,100000000"), "--concurrency"),
    (("--requests", "-5"), "--requests"), (("--requests", "1000000000000"), "--requests"),
    (("--methods", "magic"), "--methods"),
])
def test_compare_bounds(tmp_path, capsys, flags, fragment):
    argv = ["compare", _syn(tmp_path), "--out", str(tmp_path / "cmp"), "--quiet", *flags]
    _expect_one_line(sim_main, argv, capsys, tmp_path, fragment)


@pytest.mark.parametrize("name,text,flags,fragment", [
    ("t.csv", "dataset,accept_len\ngsm8k,1\n", (), "accept_len"),
    ("t.csv", "dataset,accept_len\ngsm8k,inf\n", (), "accept_len"),
    ("t.csv", "position,accept_rate\n1,0.8\n2,0.8\n", (), "accept_rate"),
    ("t.yaml", "accept_len: {math: 3}\naccept_len: {code: 3}\n", (), "duplicate key"),
    ("t.csv", "dataset,accept_len\ngsm8k,3\n", ("--seed", "-1"), "--seed"),
    ("t.csv", "dataset,accept_len\ngsm8k,3\n", ("--seed", str(2**64)), "--seed"),
])
def test_calibrate_bounds(tmp_path, capsys, name, text, flags, fragment):
    (tmp_path / name).write_text(text)
    _expect_one_line(sim_main, _calibrate(tmp_path, "--table", str(tmp_path / name), *flags), capsys, tmp_path,
                     fragment)


def _real_run(tmp_path, **changes) -> Path:
    """A real engine's run directory (the record format), one request's columns changed."""
    from dspark_sim.metrics.record import REQUEST_COLUMNS, write_record

    row = {c: 0 for c in REQUEST_COLUMNS}
    row.update(request_id=0, arrival_s=0.0, prompt_tokens=100, output_tokens=10, domain="math",
               first_scheduled_s=0.0, first_token_s=0.02, finish_s=0.1, queue_delay_ms=0.0, ttft_ms=20.0,
               tpot_ms=8.9, e2el_ms=100.0, num_steps=10, status="completed", reject_reason="")
    row.update(changes)
    write_record(tmp_path / "real", [row], [{"step": 0, "start_s": 0.0, "step_s": 0.02, "running_reqs": 1}])
    return tmp_path / "real"


@pytest.mark.parametrize("changes,fragment", [
    ({"ttft_ms": -5.0}, "ttft_ms"), ({"e2el_ms": float("nan")}, "e2el_ms"), ({"output_tokens": -1}, "output_tokens"),
])
def test_validate_refuses_an_impossible_real_run(tmp_path, capsys, changes, fragment):
    real = _real_run(tmp_path, **changes)
    argv = ["validate", "--scenario", _syn(tmp_path), "--real", str(real), "--out", str(tmp_path / "v")]
    _expect_one_line(sim_main, argv, capsys, tmp_path, "requests.csv", fragment)


def test_validate_needs_a_real_run(tmp_path, capsys):
    argv = ["validate", "--scenario", _syn(tmp_path), "--real", str(tmp_path / "none"), "--out", str(tmp_path / "v")]
    _expect_one_line(sim_main, argv, capsys, tmp_path, "requests.csv", "not found")


@pytest.mark.parametrize("flags,fragment", [
    (("--trials", "0"), "--trials"), (("--workers", "100000"), "--workers"), (("--seed", "-1"), "--seed"),
    (("--timeout", "nan"), "--timeout"), (("--seeds", "1000"), "--seeds"), (("--model", "gpt-9"), "--model"),
    (("--baselines", "magic"), "--baselines"), (("--slo-tpot-ms", "0"), "--slo-tpot-ms"),
])
def test_tune_bounds(tmp_path, capsys, flags, fragment):
    from dspark_sim.tuner.cli import main as tune_main

    _expect_one_line(tune_main, _tune(tmp_path, *flags), capsys, tmp_path, "dspark-tune", fragment)


def _decode(tmp_path, *flags) -> list[str]:
    config = _syn(tmp_path, deployment={"batching": "prefill_first"}, speculation={"method": "static",
                                                                                  "block_size": 2})
    return ["--config", config, "--out", str(tmp_path / "dec"), "--device", "cpu", *flags]


@pytest.mark.parametrize("flags,fragment", [
    (("--temperature", "-1"), "--temperature"), (("--temperature", "nan"), "--temperature"),
    (("--max-tokens", "0"), "--max-tokens"), (("--max-tokens", str(2**40)), "--max-tokens"),
    (("--max-model-len", "8"), "--max-model-len"), (("--max-requests", "0"), "--max-requests"),
    (("--checkpoint", "/no/such/dir"), "--checkpoint"), (("--trace", "/no/such.csv"), "--trace"),
])
def test_decode_bounds(tmp_path, capsys, flags, fragment):
    pytest.importorskip("torch")
    from dspark_sim.kernels.decoder.cli import main as decode_main

    _expect_one_line(decode_main, _decode(tmp_path, *flags), capsys, tmp_path, "dspark-decode", fragment)


@pytest.mark.parametrize("line,fragment", [
    ("{not json", "bad JSON"), ('{"prompt_ids": []}', "prompt_ids"), ('{"prompt_ids": [-1, 5]}', "prompt_ids"),
    ('{"prompt_ids": [1, 99999999]}', "prompt_ids"), ('{"prompt_ids": [1], "max_tokens": 0}', "max_tokens"),
])
def test_decode_prompt_files(tmp_path, capsys, line, fragment):
    pytest.importorskip("torch")
    from dspark_sim.kernels.decoder.cli import main as decode_main

    (tmp_path / "p.jsonl").write_text(line + "\n")
    _expect_one_line(decode_main, _decode(tmp_path, "--prompts", str(tmp_path / "p.jsonl")), capsys, tmp_path,
                     "p.jsonl", fragment)


@pytest.mark.parametrize("flags,fragment", [
    (("--layers", "-1"), "--layers"), (("--reps", "0"), "--reps"), (("--kv-tokens", str(2**40)), "--kv-tokens"),
    (("--max-seconds", "nan"), "--max-seconds"), (("--gpu", "a/b"), "--gpu"), (("--resume", "/no/such.json"),
                                                                               "--resume"),
])
def test_profile_bounds(tmp_path, capsys, flags, fragment):
    from dspark_sim.profiling.cli import main as profile_main

    argv = ["--gpu", "h200", "--model", "qwen3-8b", "--out", str(tmp_path / "raw.json"), *flags]
    _expect_one_line(profile_main, argv, capsys, tmp_path, "dspark-profile", fragment)


def test_profile_fit_bounds(tmp_path, capsys):
    from dspark_sim.profiling.cli import main as profile_main

    _expect_one_line(profile_main, ["fit", "--gpu", "h300", "--raw-dir", str(tmp_path), "--out-dir",
                                    str(tmp_path / "p")], capsys, tmp_path, "h300")


def test_the_bounds_table_of_the_docs_is_the_code_s():
    """docs/scenario.md lists limits.py's bounds; a changed bound changes the docs."""
    from dspark_sim import limits

    text = (Path(__file__).parents[1] / "docs" / "scenario.md").read_text()
    for name in ("MAX_TOKENS", "MAX_REQUESTS", "MIN_RATE_PER_S", "MAX_RATE_PER_S", "MIN_TIME_SCALE",
                 "MAX_TIME_SCALE", "MAX_ARRIVAL_S", "MAX_RUN_TOKENS", "MAX_SEED", "MAX_REPLICAS"):
        value = getattr(limits, name)
        assert f"`{name}`" in text, name
        assert (f"{value:,}" if isinstance(value, int) else f"{value:g}") in text, (name, value)


def test_every_listed_json_key_is_still_there(tmp_path, capsys):
    """A completed run's summary carries requests, completed, rejected and the reasons."""
    code, lines, _ = _call(sim_main, _run(tmp_path, _syn(tmp_path)), capsys)
    assert code == 0, lines
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["requests"] == summary["completed"] == 3 and summary["rejected"] == 0
    assert summary["rejected_reasons"] == {}
    assert os.listdir(tmp_path / "out")


# -- the invariants can fail ---------------------------------------------------------------------------
@pytest.mark.parametrize("tamper,what", [
    (lambda r: r.collector.requests.ttft_ms.__setitem__(0, -1.0), "TTFT is negative"),
    (lambda r: r.collector.requests.e2el_ms.__setitem__(0, float("nan")), "E2E latency"),
    (lambda r: r.collector.requests.finish_s.__setitem__(0, -5.0), "finished before it arrived"),
    (lambda r: r.collector.requests.output_tokens.__setitem__(0, 10**6), "longer than"),
    (lambda r: r.collector.requests.accepted_tokens.__setitem__(0, 5), "more accepted drafts than the tokens"),
    (lambda r: r.collector.requests.verified_drafts.__setitem__(0, -1), "accepted more drafts than it verified"),
    (lambda r: r.collector.steps.kv_tokens.__setitem__(0, 10**12), "above the capacity"),
    (lambda r: setattr(r, "num_arrived", r.num_arrived + 1), "requests arrived"),
])
def test_a_broken_invariant_is_an_internal_error_not_a_number(write_scenario, tamper, what):
    from dspark_sim.serving.simulator import simulate
    from dspark_sim.errors import InternalError
    from dspark_sim.metrics.invariants import check_run
    from dspark_sim.scenario import load_scenario

    result = simulate(load_scenario(write_scenario(synthetic_scenario(num_requests=3, output=5,
                                                                      speculation={"method": "dspark"}))))
    check_run(result)
    tamper(result)
    with pytest.raises(InternalError, match=what) as err:
        check_run(result)
    assert str(err.value).startswith("internal error: invariant broken") and "bug in dspark-sim" in str(err.value)
