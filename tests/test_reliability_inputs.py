"""Hostile files end in one bounded line, before they are expensive: YAML alias bombs and deep
nesting, /dev/zero, symbolic-link loops, bytes that are not UTF-8, JSON nested past the parser,
huge numbers; Mooncake lines take integers only, as a scenario's YAML does."""
from __future__ import annotations

import json

import pytest
import yaml
from conftest import synthetic_scenario

from dspark_sim.cli import main
from dspark_sim.config import MAX_YAML_DEPTH, parse_yaml
from dspark_sim.errors import MAX_LINE_CHARS, InputError
from dspark_sim.userfiles import MAX_BYTES, read_text

# 780 bytes that expand to 9**9 (387 million) strings: PyYAML shares them, a repr does not.
BOMB = "name: bomb\n" + 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n' + "".join(
    f"{b}: &{b} [{','.join(['*' + a] * 9)}]\n" for a, b in zip("abcdefgh", "bcdefghi"))
# A smaller one (9**5 values, within the bound) whose unknown key must still print briefly.
SMALL_BOMB = "\n".join(BOMB.splitlines()[:6]) + "\n"


def one_line(capsys, code: int, expect: int = 2) -> str:
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if not line.startswith("warning:")]
    assert code == expect, err
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err, err
    assert len(lines[0]) <= MAX_LINE_CHARS + 100
    return lines[0]


def run(capsys, tmp_path, *argv) -> str:
    return one_line(capsys, main([*argv, "--quiet"] if argv[0] in ("run", "compare") else list(argv)))


def test_an_alias_bomb_is_refused_before_it_expands(capsys, tmp_path):
    path = tmp_path / "bomb.yaml"
    path.write_text(BOMB)
    assert len(BOMB) < 800
    line = run(capsys, tmp_path, "run", str(path), "--out", str(tmp_path / "o"))
    assert "aliases" in line and "1,000,000" in line
    table = tmp_path / "bomb_table.yaml"
    table.write_text(BOMB.replace("name: bomb\n", "accept_len:\n  gsm8k: 6.0\n"))
    assert "aliases" in run(capsys, tmp_path, "calibrate", "--table", str(table), "--out", str(tmp_path / "c"))


def test_an_unknown_key_holding_many_values_prints_a_short_line(capsys, tmp_path):
    path = tmp_path / "small.yaml"
    path.write_text(SMALL_BOMB)
    line = run(capsys, tmp_path, "run", str(path))
    assert len(line) < 600, line


@pytest.mark.parametrize("text,why", [
    ("x: " + "[" * 5000 + "]" * 5000, "levels deep"),
    ("x: " + "{a: " * 200 + "1" + "}" * 200, "levels deep"),
    ("a: &a [*a]\n", "inside the value it names"),
    ("seed: " + "9" * 5000 + "\n", "malformed YAML"),
    ("\x1f", "special characters"),  # refused by the reader, before anything is parsed
])
def test_yaml_beyond_its_bounds_is_one_line(text, why):
    with pytest.raises(InputError, match=why):
        parse_yaml(text, "s.yaml")


def test_nesting_through_aliases_counts():
    levels = "a0: &a0 [1]\n" + "".join(f"a{i}: &a{i} [*a{i - 1}]\n" for i in range(1, MAX_YAML_DEPTH + 2))
    with pytest.raises(InputError, match="once YAML aliases"):
        parse_yaml(levels, "s.yaml")


def test_dev_zero_and_other_devices_are_not_read(capsys, tmp_path, write_scenario):
    assert "not a regular file" in run(capsys, tmp_path, "run", "/dev/zero")
    data = synthetic_scenario()
    data["workload"] = {"trace": "/dev/zero", "domain": "code"}
    assert "not a regular file" in run(capsys, tmp_path, "run", str(write_scenario(data)),
                                       "--out", str(tmp_path / "o"))
    (tmp_path / "z.csv").symlink_to("/dev/zero")
    assert "not a regular file" in run(capsys, tmp_path, "calibrate", "--log", str(tmp_path / "z.csv"),
                                       "--out", str(tmp_path / "c"))


def test_a_file_over_its_kind_cap_is_refused_unread(tmp_path):
    path = tmp_path / "big.yaml"
    with open(path, "wb") as f:
        f.truncate(MAX_BYTES["yaml"] + 1)  # sparse: nothing to read anyway
    with pytest.raises(InputError, match="too large"):
        read_text(path, "yaml")


def test_symbolic_link_loops_are_one_line(capsys, tmp_path, write_scenario):
    (tmp_path / "loop.yaml").symlink_to(tmp_path / "loop.yaml")
    assert "loops" in run(capsys, tmp_path, "run", str(tmp_path / "loop.yaml"))
    (tmp_path / "t.csv").symlink_to(tmp_path / "t.csv")
    data = synthetic_scenario()
    data["workload"] = {"trace": "t.csv", "domain": "code"}
    assert "loops" in run(capsys, tmp_path, "run", str(write_scenario(data)), "--out", str(tmp_path / "o"))


def test_bytes_that_are_not_utf8_name_their_line(capsys, tmp_path):
    log = tmp_path / "log.csv"
    log.write_bytes(b"c1,accepted\n" + b"0.5,1\n" * 150 + b"0.5,\xff\n")
    assert "not UTF-8" in run(capsys, tmp_path, "calibrate", "--log", str(log), "--out", str(tmp_path / "c"))
    jsonl = tmp_path / "log.jsonl"
    jsonl.write_bytes(b'{"confidences": [0.5], "accepted": 1}\n' * 150 + b"\xfe\n")
    line = run(capsys, tmp_path, "calibrate", "--log", str(jsonl), "--out", str(tmp_path / "c"))
    assert "line 151" in line and "not UTF-8" in line


def test_json_nested_past_the_parser_is_one_line(capsys, tmp_path, write_scenario):
    deep = "[" * 100_000 + "]" * 100_000
    trace = tmp_path / "m.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 5, "output_length": 2}\n{"x": ' + deep + "}\n")
    data = synthetic_scenario()
    data["workload"] = {"trace": "m.jsonl", "format": "mooncake", "domain": "code"}
    line = run(capsys, tmp_path, "run", str(write_scenario(data)), "--out", str(tmp_path / "o"))
    assert "line 2" in line and "nested too deeply" in line
    log = tmp_path / "deep.jsonl"
    log.write_text('{"confidences": [0.5], "accepted": 1}\n' * 150 + deep + "\n")
    assert "nested too deeply" in run(capsys, tmp_path, "calibrate", "--log", str(log), "--out", str(tmp_path / "c"))


@pytest.mark.parametrize("key,value,why", [
    ("input_length", "true", "expected an integer"), ("output_length", "true", "expected an integer"),
    ("input_length", "1e3", "expected an integer"), ("output_length", "12.0", "expected an integer"),
    ("input_length", '"12"', "expected an integer"), ("timestamp", "true", "expected a finite number"),
])
def test_mooncake_counts_are_integers_as_in_yaml(capsys, tmp_path, write_scenario, key, value, why):
    row = {"timestamp": 0, "input_length": 5, "output_length": 2}
    text = json.dumps(row) + "\n" + json.dumps(row).replace(f'"{key}": {row[key]}', f'"{key}": {value}') + "\n"
    (tmp_path / "m.jsonl").write_text(text)
    data = synthetic_scenario()
    data["workload"] = {"trace": "m.jsonl", "format": "mooncake", "domain": "code"}
    line = run(capsys, tmp_path, "run", str(write_scenario(data)), "--out", str(tmp_path / "o"))
    assert f"line 2: {key}" in line and why in line, line


def test_yaml_refuses_true_as_a_count_too(capsys, tmp_path, write_scenario):
    data = synthetic_scenario()
    data["workload"]["synthetic"]["num_requests"] = True
    assert "num_requests" in run(capsys, tmp_path, "run", str(write_scenario(data)), "--out", str(tmp_path / "o"))


def test_a_scenario_that_is_a_directory_or_unreadable(capsys, tmp_path):
    assert "is a directory" in run(capsys, tmp_path, "run", str(tmp_path))
    assert "not found" in run(capsys, tmp_path, "run", str(tmp_path / "absent.yaml"))


def test_a_long_unknown_key_is_cut(capsys, tmp_path, write_scenario):
    data = synthetic_scenario()
    data["k" * 100_000] = 1
    line = run(capsys, tmp_path, "run", str(write_scenario(data)), "--out", str(tmp_path / "o"))
    assert "unknown key" in line and len(line) < 600


def test_huge_integers_print_by_size():
    err = InputError("f.yaml", "seed", 10**5000, "too big")
    assert "5001 digits" in str(err) and len(str(err)) < 200
    assert yaml.safe_load("x: 1") == {"x": 1}
