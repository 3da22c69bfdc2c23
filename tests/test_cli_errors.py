"""Bad input ends in one line naming file, key and value, exit code 2, and no output."""
import subprocess
import sys

import pytest
from conftest import synthetic_scenario

from dspark_sim.cli import main

GOOD_TRACE = "TIMESTAMP,ContextTokens,GeneratedTokens\n" \
             "2023-11-16 18:17:03.9799600,100,10\n2023-11-16 18:17:04.0319600,200,20\n"


def _trace_scenario(tmp_path, write_scenario, csv_text, name="t.csv"):
    (tmp_path / name).write_text(csv_text)
    data = synthetic_scenario()
    data["workload"] = {"trace": name, "domain": "code"}
    return write_scenario(data)


def _expect_error(capsys, tmp_path, argv, *fragments):
    out = tmp_path / "out"
    code = main(["run", *argv, "--out", str(out), "--quiet"])
    err = capsys.readouterr().err.strip()
    lines = [line for line in err.splitlines() if not line.startswith("warning:")]
    assert code == 2, err
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in err
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    assert not out.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out")]


def test_missing_scenario_file(capsys, tmp_path):
    _expect_error(capsys, tmp_path, [str(tmp_path / "nope.yaml")], "nope.yaml", "not found")


def test_malformed_yaml(capsys, tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("name: x\nworkload: {trace: [unclosed\n")
    _expect_error(capsys, tmp_path, [str(path)], "bad.yaml", "malformed YAML")


@pytest.mark.parametrize("key,value,fragments", [
    ("model", "gpt-9", ("model", "gpt-9")),
    ("gpu", "tpu-v9", ("gpu", "tpu-v9")),
    ("colour", "blue", ("colour", "unknown key")),
    ("seed", -1, ("seed", "-1")),
])
def test_bad_top_level_values(capsys, tmp_path, write_scenario, key, value, fragments):
    path = write_scenario(synthetic_scenario(**{key: value}))
    _expect_error(capsys, tmp_path, [str(path)], "scenario.yaml", *fragments)


@pytest.mark.parametrize("section,key,value", [
    ("deployment", "replicas", 0),
    ("deployment", "max_running_requests", "many"),
    ("deployment", "tensor_parallel", 2),
    ("speculation", "method", "magic"),
    ("speculation", "block_size", 99),
    ("slo", "tpot_ms", -5),
])
def test_bad_section_values(capsys, tmp_path, write_scenario, section, key, value):
    path = write_scenario(synthetic_scenario(**{section: {key: value}}))
    _expect_error(capsys, tmp_path, [str(path)], f"{section}.{key}", repr(value) if isinstance(value, str) else str(value))


def test_negative_synthetic_length(capsys, tmp_path, write_scenario):
    data = synthetic_scenario()
    data["workload"]["synthetic"]["num_requests"] = -3
    _expect_error(capsys, tmp_path, [str(write_scenario(data))], "num_requests", "-3")


def test_missing_trace_file(capsys, tmp_path, write_scenario):
    data = synthetic_scenario()
    data["workload"] = {"trace": "missing.csv"}
    _expect_error(capsys, tmp_path, [str(write_scenario(data))], "workload.trace", "missing.csv")


@pytest.mark.parametrize("csv_text,fragments", [
    ("TIMESTAMP,ContextTokens\n2023-11-16 18:17:03.9799600,100\n", ("GeneratedTokens",)),
    (GOOD_TRACE.replace(",20\n", ",-20\n"), ("GeneratedTokens", "-20")),
    (GOOD_TRACE.replace(",200,", ",lots,"), ("ContextTokens", "lots")),
    (GOOD_TRACE.replace("18:17:04.0319600", "18:17:02.0319600"), ("TIMESTAMP",)),
])
def test_bad_trace(capsys, tmp_path, write_scenario, csv_text, fragments):
    path = _trace_scenario(tmp_path, write_scenario, csv_text)
    _expect_error(capsys, tmp_path, [str(path)], "t.csv", *fragments)


def test_console_script_exit_code_and_no_traceback(tmp_path, write_scenario):
    path = write_scenario(synthetic_scenario(model="no-such-model"))
    proc = subprocess.run([sys.executable, "-m", "dspark_sim.cli", "run", str(path), "--out", str(tmp_path / "o")],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert "no-such-model" in proc.stderr


@pytest.mark.parametrize("key", ["\r", "a\nb", "x\u2028y", "\x0bk", "z\r\n"])
def test_an_unknown_key_with_a_line_break_is_still_one_line(tmp_path, capsys, write_scenario, key):
    data = synthetic_scenario()
    data["speculation"] = {**(data.get("speculation") or {}), key: 1}
    out = tmp_path / "out"
    assert main(["run", str(write_scenario(data)), "--out", str(out), "--quiet"]) == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if not line.startswith("warning:")]
    assert len(lines) == 1 and "unknown key" in lines[0]
    assert not out.exists()
