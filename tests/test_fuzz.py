"""Fuzzing the CLI with generated scenarios and traces (Hypothesis, ~3,600 cases a run).

Each case writes its files into a fresh directory and runs ``dspark_sim.cli.main``
in-process. A valid input must exit 0 with ``summary.json`` and ``requests.csv`` whose
contents are physical (tests/physical.py: every request completed or rejected, no negative
latency, events in order, KV within capacity, accepted <= verified, read back from the
files); an invalid one must exit 2 with exactly one stderr line ``error: <file>: ...``
naming the offending file, and leave neither the output directory nor a temporary
sibling behind. Extreme magnitudes (lengths up to 2^63, rates 1e-300..1e300, TP up to
128, empty and one-request traces) either run physically or fail in one line. Valid
cases hold at most a handful of requests so the module stays within minutes on two cores.
"""
from __future__ import annotations

import contextlib
import io
import json
import math
import os
import signal
import tempfile
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from physical import assert_physical

from dspark_sim.catalog.gpus import GPUS
from dspark_sim.cli import main
from dspark_sim.names import DOMAINS
from dspark_sim.scenario import ROUTERS

CASE_LIMIT_S = 30  # a generated case that runs longer than this is a hang, reported as a failure
# Derandomized so CI sees the same cases every run; DSPARK_FUZZ_RANDOM=1 explores new ones, and
# DSPARK_FUZZ_SCALE=N runs N times as many cases of every test.
_BASE = settings(deadline=None, derandomize=os.environ.get("DSPARK_FUZZ_RANDOM") != "1",
                 suppress_health_check=list(HealthCheck), database=None)
_SCALE = float(os.environ.get("DSPARK_FUZZ_SCALE", "1"))


def fuzz(max_examples: int) -> settings:
    return settings(_BASE, max_examples=max(1, round(max_examples * _SCALE)))
SMALL_MODELS = ("qwen3-4b", "qwen3-8b", "qwen3-14b", "llama-3.1-8b")
AZURE_HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens"
BURSTGPT_HEADER = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type"


# -- running one case ----------------------------------------------------------------
class Hang(Exception):
    pass


def _alarm(signum, frame):
    raise Hang(f"case ran longer than {CASE_LIMIT_S} s")


def run_case(files: dict[str, str | bytes], argv_tail=(), command="run", scenario="s.yaml"):
    """Write ``files`` into a fresh directory, run the CLI on ``scenario``; return (code, lines, dir listing)."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for name, text in files.items():
            (root / name).write_bytes(text if isinstance(text, bytes) else text.encode())
        out, err = io.StringIO(), io.StringIO()
        old = signal.signal(signal.SIGALRM, _alarm)
        signal.alarm(CASE_LIMIT_S)
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                code = main([command, str(root / scenario), "--out", str(root / "out"), "--quiet",
                             "--no-plots", *argv_tail])
        finally:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, old)
        lines = [line for line in err.getvalue().splitlines() if not line.startswith("warning:")]
        listing = {p.name: sorted(q.name for q in p.iterdir()) if p.is_dir() else None for p in root.iterdir()}
        if code == 0 and (root / "out" / "summary.json").is_file():
            assert_physical(root / "out")  # every run that succeeds: its numbers can happen
        return code, lines, listing


def assert_completed(code, lines, listing, outputs=("summary.json", "requests.csv")):
    assert code == 0, lines
    assert set(outputs) <= set(listing.get("out") or ()), listing
    assert not [n for n in listing if n.startswith(".out")], listing


def assert_one_line_error(code, lines, listing, file_name):
    assert code == 2, (code, lines)
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    assert file_name in lines[0], (file_name, lines[0])
    assert "out" not in listing and not [n for n in listing if n.startswith(".out")], listing


def assert_ran_or_one_line(code, lines, listing, file_name):
    """Either outcome a user may get: a completed run, or one error line naming the file."""
    event(f"exit {code}")
    if code == 0:
        assert_completed(code, lines, listing)
    else:
        assert_one_line_error(code, lines, listing, file_name)


# -- strategies: valid scenarios --------------------------------------------------------
def length_dist(max_mean: int):
    constant = st.fixed_dictionaries({"dist": st.just("constant"), "mean": st.integers(1, max_mean)})
    uniform = st.integers(1, max_mean).flatmap(lambda lo: st.fixed_dictionaries(
        {"dist": st.just("uniform"), "min_tokens": st.just(lo), "max_tokens": st.integers(lo, max_mean)}))
    lognormal = st.fixed_dictionaries(
        {"dist": st.just("lognormal"), "mean": st.floats(2, max_mean), "sigma": st.floats(0.01, 1.5),
         "max_tokens": st.just(2 * max_mean)})
    empirical = st.lists(st.integers(1, max_mean), min_size=1, max_size=5).flatmap(lambda vs: st.fixed_dictionaries(
        {"dist": st.just("empirical"), "values": st.just(vs)},
        optional={"weights": st.lists(st.floats(0.1, 5), min_size=len(vs), max_size=len(vs))}))
    return st.one_of(constant, uniform, lognormal, empirical)


def arrival():
    return st.one_of(st.fixed_dictionaries({"arrival": st.sampled_from(["poisson", "constant"])}),
                     st.fixed_dictionaries({"arrival": st.just("gamma"), "cv": st.floats(0.2, 4)}))


@st.composite
def synthetic_workload(draw, max_requests=6):
    syn = {"num_requests": draw(st.integers(1, max_requests)), "rate_per_s": draw(st.floats(0.05, 1e4)),
           **draw(arrival()), "prompt_tokens": draw(length_dist(1500)), "output_tokens": draw(length_dist(120))}
    return {"synthetic": syn, "domain": draw(domain())}


def domain():
    mix = st.dictionaries(st.sampled_from(DOMAINS), st.floats(0.01, 10), min_size=1)
    return st.one_of(st.sampled_from(DOMAINS), mix)


def deployment():
    return st.fixed_dictionaries({}, optional={
        "replicas": st.integers(1, 3), "tp": st.sampled_from([1, 2, 4]),
        "max_running_requests": st.integers(1, 64), "max_batched_tokens": st.integers(32, 8192),
        "chunked_prefill_tokens": st.integers(1, 4096), "router": st.sampled_from(ROUTERS),
        "gpu_memory_fraction": st.floats(0.6, 1.0), "kv_block_tokens": st.integers(1, 64)})


def speculation():
    block = st.integers(1, 8)
    none = st.fixed_dictionaries({"method": st.just("none")})
    static = st.fixed_dictionaries({"method": st.just("static")}, optional={
        "drafter": st.sampled_from(["mtp", "eagle3", "dspark", "dflash"]), "block_size": block})
    threshold = st.fixed_dictionaries({"method": st.just("threshold")}, optional={
        "threshold": st.floats(0, 1), "block_size": block})
    schedule = st.fixed_dictionaries({"method": st.just("schedule"), "schedule": st.lists(
        st.integers(1, 256), min_size=1, max_size=3, unique=True).map(
        lambda bs: [{"max_batch_size": b, "num_draft_tokens": k % 5} for k, b in enumerate(sorted(bs))])})
    dspark = st.fixed_dictionaries({"method": st.just("dspark")}, optional={
        "block_size": block, "scheduler": st.sampled_from(["production", "algorithm1"]),
        "lag_steps": st.integers(0, 4), "survival_eps": st.floats(0, 0.1),
        "graph_tiers": st.just([1, 8, 64, 512, 4096]),
        "acceptance": st.fixed_dictionaries({}, optional={"calibration": st.sampled_from(["sts", "raw"]),
                                                           "fixed_accept_prob": st.floats(0, 1)})})
    return st.one_of(none, static, threshold, schedule, dspark)


def slo():
    pos = st.floats(0.5, 1e5)
    return st.fixed_dictionaries({}, optional={"ttft_ms": pos, "tpot_ms": pos})


@st.composite
def valid_scenario(draw, workload=None):
    data = {"name": "fuzz", "workload": workload if workload is not None else draw(synthetic_workload()),
            "model": draw(st.sampled_from(SMALL_MODELS)), "gpu": draw(st.sampled_from(sorted(GPUS))),
            "deployment": draw(deployment()), "speculation": draw(speculation()), "slo": draw(slo()),
            "seed": draw(st.integers(0, 2**32))}
    if data["gpu"] == "a100" and data["model"] == "qwen3-14b":
        data["deployment"]["gpu_memory_fraction"] = 0.9
    wl, block = data["workload"], data["deployment"].get("kv_block_tokens")
    hashed = str(wl.get("trace", "")).endswith(".jsonl") or "sessions" in wl.get("synthetic", {})
    if hashed and block is not None and 512 % block:  # a cache block must divide a 512-token hash block
        data["deployment"]["kv_block_tokens"] = draw(st.sampled_from([1, 2, 4, 8, 16, 32, 64]))
    return data


# -- strategies: traces ----------------------------------------------------------------
def _azure_time(seconds: float) -> str:
    whole = int(seconds)
    return f"2023-11-16 {10 + whole // 3600:02d}:{whole // 60 % 60:02d}:{whole % 60:02d}." \
           f"{round((seconds - whole) * 1e7):07d}"


@st.composite
def trace_rows(draw, max_rows=6):
    """Sorted arrival times (s) with prompt and output token counts."""
    n = draw(st.integers(1, max_rows))
    gaps = draw(st.lists(st.floats(0, 30), min_size=n, max_size=n))
    times = [round(sum(gaps[: i + 1]), 3) for i in range(n)]
    prompt = draw(st.lists(st.integers(1, 1500), min_size=n, max_size=n))
    output = draw(st.lists(st.integers(1, 120), min_size=n, max_size=n))
    return list(zip(times, prompt, output))


def render_trace(fmt: str, rows) -> tuple[str, str]:
    """(file name, text) of ``rows`` in one of the three trace formats."""
    if fmt == "azure":
        body = [f"{_azure_time(t)},{p},{o}" for t, p, o in rows]
        return "t.csv", "\n".join([AZURE_HEADER, *body]) + "\n"
    if fmt == "burstgpt":
        body = [f"{t},ChatGPT,{p},{o},{p + o},Conversation log" for t, p, o in rows]
        return "t.csv", "\n".join([BURSTGPT_HEADER, *body]) + "\n"
    lines = [json.dumps({"timestamp": int(t * 1000), "input_length": p, "output_length": o, "hash_ids": [i]})
             for i, (t, p, o) in enumerate(rows)]
    return "t.jsonl", "\n".join(lines) + "\n"


@st.composite
def trace_workload(draw, fmt: str, name: str):
    wl = {"trace": name, "domain": draw(domain())}
    if draw(st.booleans()):
        wl["format"] = fmt
    if draw(st.booleans()):
        wl["time_scale"] = draw(st.floats(0.01, 1000))
    if draw(st.booleans()):
        wl["max_requests"] = draw(st.integers(1, 10))
    return wl


# -- valid inputs complete -----------------------------------------------------------------
@fuzz(250)
@given(data=valid_scenario())
def test_valid_synthetic_scenarios_complete(data):
    code, lines, listing = run_case({"s.yaml": yaml.safe_dump(data)})
    assert_completed(code, lines, listing)


@fuzz(200)
@given(fmt=st.sampled_from(["azure", "burstgpt", "mooncake"]), rows=trace_rows(), data=st.data())
def test_valid_traces_complete(fmt, rows, data):
    name, text = render_trace(fmt, rows)
    scenario = data.draw(valid_scenario(workload=data.draw(trace_workload(fmt, name))))
    code, lines, listing = run_case({"s.yaml": yaml.safe_dump(scenario), name: text})
    assert_completed(code, lines, listing)


@fuzz(60)
@given(rows=trace_rows(max_rows=8), max_requests=st.one_of(st.none(), st.integers(1, 10)))
def test_valid_trace_request_count(rows, max_requests):
    """Every request of the trace (up to max_requests) is completed or rejected, none lost."""
    name, text = render_trace("azure", rows)
    wl = {"trace": name, "domain": "code", **({"max_requests": max_requests} if max_requests else {})}
    scenario = {"name": "count", "workload": wl, "model": "qwen3-8b", "gpu": "h200"}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "s.yaml").write_text(yaml.safe_dump(scenario))
        (root / name).write_text(text)
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            assert main(["run", str(root / "s.yaml"), "--out", str(root / "out"), "--quiet", "--no-plots"]) == 0
        summary = json.loads((root / "out" / "summary.json").read_text())
        csv_lines = (root / "out" / "requests.csv").read_text().splitlines()
    want = len(rows) if max_requests is None else min(len(rows), max_requests)
    assert summary["completed"] + summary["rejected"] == summary["requests"] == want
    assert len(csv_lines) == 1 + want


# -- invalid scenarios fail in one line ------------------------------------------------------
# (section, key, strategy of values the key must reject)
_NOT_INT = st.one_of(st.text(max_size=5), st.floats(), st.lists(st.integers(), max_size=2), st.booleans())
_NOT_NUMBER = st.one_of(st.text(max_size=5), st.lists(st.integers(), max_size=2), st.booleans(),
                        st.sampled_from([math.nan, math.inf, -math.inf]))
BAD_VALUES = [
    ("", "model", st.one_of(st.text(min_size=1, max_size=8).filter(lambda s: s.strip().lower() not in
                                                                     {"qwen3-4b", "qwen3-8b"}), st.integers())),
    ("", "gpu", st.one_of(st.sampled_from(["tpu", "h300", "", "H100 "]).filter(lambda s: s.strip().lower() not in GPUS),
                          st.integers(), st.lists(st.text(), max_size=1))),
    ("", "seed", st.one_of(st.integers(max_value=-1), _NOT_INT)),
    ("", "name", st.one_of(st.integers(), st.lists(st.text(), max_size=1))),
    ("", "unknown_key", st.integers()),
    ("deployment", "replicas", st.one_of(st.integers(max_value=0), _NOT_INT)),
    ("deployment", "tp", st.one_of(st.integers(max_value=0), st.integers(65, 10**6), _NOT_INT)),
    ("deployment", "max_running_requests", st.one_of(st.integers(max_value=0), _NOT_INT)),
    ("deployment", "max_batched_tokens", st.one_of(st.integers(max_value=0), _NOT_INT)),
    ("deployment", "router", st.text(max_size=6).filter(lambda s: s not in ROUTERS)),
    ("deployment", "gpu_memory_fraction", st.one_of(st.floats(1.0001, 1e9), st.floats(-1e9, 0.0499), _NOT_NUMBER)),
    ("deployment", "kv_block_tokens", st.one_of(st.integers(max_value=0), _NOT_INT)),
    ("deployment", "tensor_parallel", st.integers()),
    ("speculation", "method", st.text(max_size=8).filter(lambda s: s not in
                                                         ("none", "static", "threshold", "schedule", "dspark"))),
    ("speculation", "block_size", st.one_of(st.integers(max_value=0), st.integers(17, 10**6), _NOT_INT)),
    ("speculation", "threshold", st.one_of(st.floats(1.0001, 1e9), st.floats(-1e9, -0.0001), _NOT_NUMBER)),
    ("speculation", "lag_steps", st.one_of(st.integers(max_value=-1), st.integers(17, 10**4), _NOT_INT)),
    ("speculation", "graph_tiers", st.one_of(st.just([8, 4]), st.just([0]), st.just("8,16"), st.just([1.5]))),
    ("speculation", "schedule", st.one_of(st.just("fast"), st.just([{"max_batch_size": 8}, {"max_batch_size": 4}]))),
    ("speculation", "acceptance", st.one_of(st.just({"drafter": "gpt"}), st.just({"auc": [0.3]}),
                                            st.just({"fixed_accept_prob": 2}), st.just({"colour": 1}))),
    ("slo", "ttft_ms", st.one_of(st.floats(-1e9, 0), _NOT_NUMBER)),
    ("slo", "tpot_ms", st.one_of(st.floats(-1e9, 0), _NOT_NUMBER)),
    ("workload", "domain", st.one_of(st.just("poetry"), st.just({"math": -1}), st.just({}), st.just({"code": 0}))),
    ("workload", "synthetic", st.one_of(st.just({}), st.just("many"), st.just({"num_requests": 3}))),
    ("workload", "trace", st.one_of(st.just("missing.csv"), st.integers())),
    ("synthetic", "num_requests", st.one_of(st.integers(max_value=0), _NOT_INT)),
    ("synthetic", "rate_per_s", st.one_of(st.floats(-1e9, 0), _NOT_NUMBER)),
    ("synthetic", "arrival", st.text(max_size=6).filter(lambda s: s not in ("poisson", "gamma", "constant"))),
    ("synthetic", "cv", st.one_of(st.floats(-10, 0), _NOT_NUMBER)),
    ("synthetic", "prompt_tokens", st.one_of(
        st.just({"dist": "normal"}), st.just({"dist": "constant"}), st.just({"dist": "constant", "mean": -3}),
        st.just({"dist": "uniform", "min_tokens": 5, "max_tokens": 2}),
        st.just({"dist": "lognormal", "mean": 0, "sigma": 1}),
        st.just({"dist": "empirical", "values": []}), st.just({"dist": "empirical", "values": [0]}),
        st.just({"dist": "constant", "mean": 5, "sigma": 1}), st.just(7))),
]


def _set(data: dict, section: str, key: str, value) -> dict:
    if section == "":
        data[key] = value
    elif section == "synthetic":
        data["workload"]["synthetic"][key] = value
    else:
        data.setdefault(section, {})[key] = value
    return data


@fuzz(400)
@given(base=valid_scenario(), bad=st.sampled_from(BAD_VALUES).flatmap(
    lambda b: st.tuples(st.just(b[0]), st.just(b[1]), b[2])))
def test_invalid_scenario_values_fail_in_one_line(base, bad):
    section, key, value = bad
    if section == "speculation" and key == "acceptance" and base["speculation"]["method"] == "none":
        base["speculation"]["method"] = "dspark"  # acceptance is only read for speculative methods
    data = _set(base, section, key, value)
    code, lines, listing = run_case({"s.yaml": yaml.safe_dump(data)})
    assert_one_line_error(code, lines, listing, "s.yaml")


@fuzz(250)
@given(base=valid_scenario(), drop=st.sampled_from(["model", "gpu", "workload"]))
def test_missing_required_keys_fail_in_one_line(base, drop):
    del base[drop]
    code, lines, listing = run_case({"s.yaml": yaml.safe_dump(base)})
    assert_one_line_error(code, lines, listing, "s.yaml")


@fuzz(250)
@given(text=st.one_of(
    st.text(max_size=60),
    st.binary(max_size=60),
    st.lists(st.text(max_size=10), max_size=3).map(yaml.safe_dump),
    st.sampled_from(["name: [unclosed\n", "{", "- a\n- b\n", "a: b: c\n", "\tname: x\n", "null\n", "3\n"])))
def test_arbitrary_scenario_text_completes_or_fails_in_one_line(text):
    """Any bytes as a scenario file: never a traceback; exit 0 is impossible without model and gpu."""
    code, lines, listing = run_case({"s.yaml": text})
    assert_one_line_error(code, lines, listing, "s.yaml")


# -- invalid traces fail in one line, naming the trace ------------------------------------------
def _corrupt(fmt: str, text: str, how: str, i: int) -> str | bytes:
    """``text`` with one defect; "unsorted" needs two rows or more."""
    lines = text.splitlines()
    first = 0 if fmt == "mooncake" else 1
    row = first + i % (len(lines) - first)
    if how == "drop_header":
        return "\n".join(lines[1:] if fmt != "mooncake" else ["not json", *lines]) + "\n"
    if how == "empty":
        return ""
    if how == "binary":
        return b"\x00\xff\xfe garbage\n"
    if how == "unsorted":
        row = max(row, first + 1)  # a row after the first, made earlier than the first
    if fmt == "mooncake":
        obj = json.loads(lines[row])
        edits = {"text": "{not json", "negative": {**obj, "output_length": -5}, "zero": {**obj, "input_length": 0},
                 "missing": {k: v for k, v in obj.items() if k != "output_length"},
                 "word": {**obj, "input_length": "many"},
                 "unsorted": {**obj, "timestamp": json.loads(lines[0])["timestamp"] - 1000},
                 "list": [1, 2], "short": {**obj, "hash_ids": "x"}}
        edit = edits[how]
        lines[row] = edit if isinstance(edit, str) else json.dumps(edit)
        return "\n".join(lines) + "\n"
    cells = lines[row].split(",")
    p_col, o_col = (1, 2) if fmt == "azure" else (2, 3)
    if how == "text":
        cells[0] = "yesterday"
    elif how == "negative":
        cells[o_col] = "-5"
    elif how == "zero":
        cells[p_col] = "0" if fmt == "azure" else "1.5"  # BurstGPT drops zero-token rows as failed
    elif how in ("missing", "short"):
        cells = cells[:p_col if how == "missing" else 1]
    elif how == "word":
        cells[p_col] = "many"
    elif how == "unsorted":
        cells[0] = "2023-11-16 09:59:59.0000000" if fmt == "azure" else "-1.0"
    elif how == "list":
        cells[o_col] = '"1,2"'
    lines[row] = ",".join(cells)
    return "\n".join(lines) + "\n"


CORRUPTIONS = ("drop_header", "empty", "binary", "text", "negative", "zero", "missing", "word", "unsorted",
               "list", "short")


@fuzz(400)
@given(fmt=st.sampled_from(["azure", "burstgpt", "mooncake"]), rows=trace_rows(max_rows=5),
       how=st.sampled_from(CORRUPTIONS), i=st.integers(0, 10), data=st.data())
def test_corrupt_traces_fail_in_one_line_naming_the_trace(fmt, rows, how, i, data):
    assume(how != "unsorted" or len(rows) >= 2)
    name, text = render_trace(fmt, rows)
    wl = data.draw(trace_workload(fmt, name))
    wl.pop("max_requests", None)  # the defect may sit past the cap
    scenario = {"name": "bad-trace", "workload": wl, "model": "qwen3-8b", "gpu": "h200"}
    code, lines, listing = run_case({"s.yaml": yaml.safe_dump(scenario), name: _corrupt(fmt, text, how, i)})
    assert_one_line_error(code, lines, listing, name)


# -- any value at any key: completes or fails in one line -------------------------------------------
ANY_VALUE = st.one_of(st.none(), st.booleans(), st.integers(-50, 50), st.floats(-1e3, 1e3),
                      st.sampled_from([math.nan, math.inf, -math.inf, 10**30]), st.text(max_size=6),
                      st.lists(st.integers(-3, 3), max_size=3),
                      st.dictionaries(st.text(max_size=4), st.integers(-3, 3), max_size=2))
SCENARIO_KEYS = (
    [("", k) for k in ("name", "model", "gpu", "seed", "workload", "deployment", "speculation", "slo")]
    + [("deployment", k) for k in ("replicas", "tp", "max_running_requests", "max_batched_tokens",
                                   "chunked_prefill_tokens", "router", "gpu_memory_fraction", "kv_block_tokens")]
    + [("speculation", k) for k in ("method", "drafter", "block_size", "num_draft_tokens", "scheduler", "lag_steps",
                                    "min_verify_len", "max_verify_len", "survival_eps", "threshold", "schedule",
                                    "graph_tiers", "pad_to_graph_tier", "sps_table", "acceptance")]
    + [("acceptance", k) for k in ("drafter", "target", "calibration", "auc", "difficulty_sigma", "preset_file",
                                   "fixed_accept_prob", "dataset")]
    + [("slo", k) for k in ("ttft_ms", "tpot_ms")]
    + [("workload", k) for k in ("domain", "max_requests", "time_scale", "format", "trace")]
    + [("synthetic", k) for k in ("num_requests", "rate_per_s", "arrival", "cv", "prompt_tokens", "output_tokens")]
    + [("output_tokens", k) for k in ("dist", "mean", "sigma", "min_tokens", "max_tokens", "values", "weights")])


def _put(data: dict, section: str, key: str, value) -> dict:
    spec = data.setdefault("speculation", {})
    where = {"": data, "deployment": data.setdefault("deployment", {}), "speculation": spec,
             "acceptance": spec.setdefault("acceptance", {}) if section == "acceptance" else None,
             "slo": data.setdefault("slo", {}), "workload": data["workload"],
             "synthetic": data["workload"]["synthetic"],
             "output_tokens": data["workload"]["synthetic"]["output_tokens"]}[section]
    where[key] = value
    return data


@fuzz(300)
@given(base=valid_scenario(), where=st.sampled_from(SCENARIO_KEYS), value=ANY_VALUE)
def test_any_value_at_any_key_completes_or_fails_in_one_line(base, where, value):
    data = _put(base, *where, value)
    code, lines, listing = run_case({"s.yaml": yaml.safe_dump(data)})
    assert_ran_or_one_line(code, lines, listing, "s.yaml")


# -- extreme magnitudes: a physical run or one line ---------------------------------------------------
def _power(lo: int, hi: int):
    """Magnitudes spread evenly over decades: m x 10^e."""
    return st.tuples(st.floats(1, 9.99), st.integers(lo, hi)).map(lambda me: me[0] * 10.0 ** me[1])


# Token counts: small (quick runs), at the edge of Qwen3's 40,960-token context, or beyond any
# context up to 2^63 - 1 (read and rejected, or refused as input, never wrapped or run).
# Outputs stay short or beyond the context: a valid output of 40,000 tokens is 40,000 decode steps,
# legitimate work but too slow for thousands of cases.
_BEYOND = st.one_of(st.integers(41000, 2**63 - 1), st.sampled_from([2**31, 2**32, 2**32 + 1, 2**53, 2**63 - 1]))
EXTREME_LENGTH = st.one_of(st.integers(1, 200), st.integers(40700, 41000), _BEYOND)
EXTREME_OUTPUT = st.one_of(st.integers(1, 60), _BEYOND)
EXTREME_RATE = st.one_of(_power(-300, 300), st.sampled_from([5e-324, 1e-6, 1e9, 1.7e308]))


@st.composite
def extreme_scenario(draw):
    prompt, output = draw(EXTREME_LENGTH), draw(EXTREME_OUTPUT)
    syn = {"num_requests": draw(st.integers(1, 4)), "rate_per_s": draw(EXTREME_RATE),
           "prompt_tokens": {"dist": "constant", "mean": prompt},
           "output_tokens": draw(st.one_of(st.just({"dist": "constant", "mean": output}), st.fixed_dictionaries(
               {"dist": st.just("lognormal"), "mean": _power(6, 300),
                "sigma": st.one_of(st.floats(0, 0.5), st.floats(10.01, 1e300))})))}
    dep = {"tp": draw(st.one_of(st.sampled_from([1, 2, 4, 8]), st.integers(1, 128))),
           "replicas": draw(st.one_of(st.integers(1, 2), st.sampled_from([4096, 4097, 2**63])))}
    spec = draw(st.sampled_from([{"method": "none"}, {"method": "dspark"}, {"method": "static", "block_size": 3}]))
    return {"name": "extreme", "model": draw(st.sampled_from(["qwen3-8b", "llama-3.1-8b"])), "gpu": "h200",
            "workload": {"synthetic": syn, "domain": "math"}, "deployment": dep, "speculation": spec,
            "seed": draw(st.one_of(st.integers(0, 2**63 - 1), st.integers(2**63, 2**70)))}


@fuzz(300)
@given(data=extreme_scenario())
def test_extreme_synthetic_magnitudes_run_physically_or_fail_in_one_line(data):
    code, lines, listing = run_case({"s.yaml": yaml.safe_dump(data)})
    assert_ran_or_one_line(code, lines, listing, "s.yaml")


@fuzz(200)
@given(rows=st.lists(st.tuples(_power(-3, 300), EXTREME_LENGTH, EXTREME_OUTPUT), max_size=4),
       time_scale=st.one_of(st.none(), _power(-300, 300)), tp=st.integers(1, 128))
def test_extreme_traces_run_physically_or_fail_in_one_line(rows, time_scale, tp):
    """BurstGPT rows (seconds since the first, cumulative) with extreme gaps and counts; none is empty."""
    clock, body = 0.0, []
    for gap, prompt, output in rows:
        clock += gap
        body.append(f"{clock!r},ChatGPT,{prompt},{output},{prompt + output},Conversation log")
    text = "\n".join([BURSTGPT_HEADER, *body]) + "\n"
    wl = {"trace": "t.csv", "domain": "code", **({"time_scale": time_scale} if time_scale is not None else {})}
    scenario = {"name": "extreme-trace", "workload": wl, "model": "qwen3-8b", "gpu": "h200",
                "deployment": {"tp": tp}}
    code, lines, listing = run_case({"s.yaml": yaml.safe_dump(scenario), "t.csv": text})
    event(f"exit {code}")
    if code == 0:
        assert_completed(code, lines, listing)
    else:
        assert_one_line_error(code, lines, listing, "t.csv" if "t.csv:" in lines[0] else "s.yaml")


# -- crashes the fuzzer once found, kept as regression cases --
FOUND_CRASHES = [
    (("", "seed"), None),  # "<input>: seed: must be ..." (no file); with a trace workload the run is unseeded
    (("deployment", "replicas"), None),  # TypeError in serving/simulator.py
    (("deployment", "router"), None),  # KeyError in serving/router.py
    (("deployment", "gpu_memory_fraction"), None),  # TypeError in serving/kv.py
    (("speculation", "method"), None),  # ValueError in spec/policy.py
    (("deployment", "replicas"), 10**30),  # OverflowError in numpy SeedSequence.spawn
    (("deployment", "max_batched_tokens"), 10**30),  # OverflowError in cost/sps.py
    (("speculation", "acceptance"), "high"),  # ValueError: dict("high") in scenario.py
    (("speculation", "acceptance"), [1, 2]),  # TypeError: dict([1, 2]) in scenario.py
]


@pytest.mark.parametrize("where,value", FOUND_CRASHES)
def test_found_crash_is_fixed(where, value):
    base = {"name": "known", "workload": {"synthetic": {
        "num_requests": 2, "rate_per_s": 1.0, "prompt_tokens": {"dist": "constant", "mean": 20},
        "output_tokens": {"dist": "constant", "mean": 5}}}, "model": "qwen3-8b", "gpu": "h200",
        "speculation": {"method": "dspark"}}
    code, lines, listing = run_case({"s.yaml": yaml.safe_dump(_put(base, *where, value))})
    if code != 0:
        assert_one_line_error(code, lines, listing, "s.yaml")
    else:
        assert_completed(code, lines, listing)


# -- the capacity command's flags ---------------------------------------------------------------------
def _num(lo: float, hi: float, bad: list[str]):
    return st.one_of(st.floats(lo, hi).map(lambda x: f"{x:.4g}"), st.sampled_from(bad))


CAPACITY_FLAGS = {
    "--slo-tpot-ms": _num(1, 500, ["0", "-3", "nan", "inf"]),
    "--slo-ttft-ms": _num(1, 1e5, ["0", "-1", "nan"]),
    "--attainment": _num(0.01, 1, ["0", "1.5", "nan"]),
    "--rule": st.sampled_from(["attainment", "p99"]),
    "--max-queue-ms": _num(1, 1e4, ["0", "-1"]),
    "--gpus": st.sampled_from(["h200", "b200,h100", "H200", "a100", "tpu", ",", "h200,gpu9"]),
    "--methods": st.sampled_from(["none", "dspark", "mtp1,none", "dspark-full", "threshold-0.3", "magic", ","]),
    "--tp": st.sampled_from(["1", "1,2", "2", "0", "x", "1,99"]),
    "--qps": _num(0.01, 1e4, ["0", "-2", "inf"]),
    "--price-per-gpu-hour": st.sampled_from(["h200=3.5", "h200=3.5,b200=5", "h200=", "=3", "h200=x", "tpu=2",
                                             "h200=-1", ""]),
    "--precision": _num(0.01, 1, ["0", "-0.1"]),
    "--max-sims": st.sampled_from(["2", "3", "0", "-1"]),
    "--max-requests": st.sampled_from(["3", "6", "0", "-5"]),
    "--jobs": st.sampled_from(["1", "0", "-1"]),
}


@fuzz(200)
@given(flags=st.fixed_dictionaries({}, optional=CAPACITY_FLAGS), num_requests=st.integers(2, 6),
       rate=st.floats(0.1, 100))
def test_capacity_flags_complete_or_fail_in_one_line(flags, num_requests, rate):
    flags.setdefault("--max-sims", "3")  # valid cases stay tiny: a few probes of a few requests
    flags.setdefault("--gpus", "h200")
    flags.setdefault("--methods", "none")
    flags.setdefault("--tp", "1")
    scenario = {"name": "cap", "model": "qwen3-8b", "gpu": "h200", "slo": {"tpot_ms": 30},
                "workload": {"synthetic": {"num_requests": num_requests, "rate_per_s": rate,
                                           "prompt_tokens": {"dist": "constant", "mean": 100},
                                           "output_tokens": {"dist": "constant", "mean": 10}}}}
    argv = [x for kv in flags.items() for x in kv]
    code, lines, listing = run_case({"s.yaml": yaml.safe_dump(scenario)}, argv, command="capacity")
    event(f"exit {code}")
    if code == 0:
        assert_completed(code, lines, listing, outputs=("capacity.json",))
    else:
        bad = [flag for flag in flags if flag in lines[0]] if lines else []
        assert_one_line_error(code, lines, listing, bad[0] if bad else "s.yaml")
