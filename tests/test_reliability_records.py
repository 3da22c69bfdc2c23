"""Counts that cannot happen are refused or never made: ``validate`` holds a real run to the
simulator's own request invariants, and the simulator counts accepted drafts the way the output
is counted (never more than the tokens a request's decode steps emitted)."""
from __future__ import annotations

import csv
import json
import math

import numpy as np
import pytest
from conftest import synthetic_scenario

from dspark_sim.cli import main
from dspark_sim.metrics.record import read_requests, read_steps


@pytest.fixture
def real_run(tmp_path, write_scenario):
    """A small run's record to play the real engine's, and its scenario."""
    path = write_scenario(synthetic_scenario(num_requests=12, rate_per_s=4.0, output=20,
                                             speculation={"method": "dspark"}))
    assert main(["run", str(path), "--out", str(tmp_path / "real"), "--quiet", "--no-plots"]) == 0
    return path, tmp_path / "real"


def _edit(path, edit) -> None:
    header, *body = list(csv.reader(path.open()))
    edit(header, body)
    with path.open("w", newline="") as f:
        csv.writer(f).writerows([header, *body])


def _set(column, value, row=0):
    return lambda header, rows: rows[row].__setitem__(header.index(column), value)


def _validate(capsys, scenario, real, out):
    code = main(["validate", "--scenario", str(scenario), "--real", str(real), "--out", str(out)])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if not line.startswith("warning:")]
    return code, lines, err


def test_a_real_run_within_the_invariants_validates(capsys, tmp_path, real_run):
    scenario, real = real_run
    code, lines, err = _validate(capsys, scenario, real, tmp_path / "v")
    assert code == 0, err
    rows = json.loads((tmp_path / "v" / "validate.json").read_text())["rows"]
    assert rows and all(math.isfinite(r["real"]) for r in rows)


@pytest.mark.parametrize("edit,fragment", [
    (lambda header, rows: rows.clear(), "no completed request"),
    (_set("output_tokens", "1.2e29"), "output_tokens is not a whole number"),
    (_set("output_tokens", "2.5"), "output_tokens is not a whole number"),
    (_set("finish_s", "0.000001", row=3), "finished before it arrived"),
    (_set("first_token_s", "0.0", row=3), "first token is before its arrival"),
    (_set("e2el_ms", "0.001", row=2), "out of order"),
    (lambda header, rows: rows[1].__setitem__(0, rows[0][0]), "request ids must be unique"),
    (_set("ttft_ms", "nan"), "ttft_ms"),
])
def test_an_impossible_real_run_is_refused_in_one_line(capsys, tmp_path, real_run, edit, fragment):
    scenario, real = real_run
    _edit(real / "requests.csv", edit)
    code, lines, err = _validate(capsys, scenario, real, tmp_path / "v")
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert fragment in lines[0] and "requests.csv" in lines[0], lines[0]
    assert not (tmp_path / "v").exists()


def test_a_real_run_without_a_decode_step_is_refused(capsys, tmp_path, real_run):
    scenario, real = real_run
    _edit(real / "steps.csv", lambda header, rows: rows.clear())
    code, lines, _ = _validate(capsys, scenario, real, tmp_path / "v")
    assert code == 2 and "no decode step" in lines[0]


def test_a_step_count_must_be_whole(capsys, tmp_path, real_run):
    scenario, real = real_run
    _edit(real / "steps.csv", _set("decode_reqs", "-3"))
    code, lines, _ = _validate(capsys, scenario, real, tmp_path / "v")
    assert code == 2 and "decode_reqs" in lines[0]


def test_non_utf8_bytes_in_a_real_record_are_one_line(capsys, tmp_path, real_run):
    scenario, real = real_run
    with (real / "requests.csv").open("ab") as f:
        f.write(b"\xff\xfe\n")
    code, lines, err = _validate(capsys, scenario, real, tmp_path / "v")
    assert code == 2 and "not UTF-8" in lines[0] and "Traceback" not in err


# -- accepted drafts ------------------------------------------------------------------------------
@pytest.mark.parametrize("exact", [False, True])
@pytest.mark.parametrize("spec", [{"method": "dspark", "block_size": 7},
                                  {"method": "static", "drafter": "mtp", "block_size": 4},
                                  {"method": "dspark", "block_size": 7, "scheduler": "algorithm1"}])
@pytest.mark.parametrize("overlap", [False, True])
def test_accepted_drafts_never_exceed_the_tokens_emitted(tmp_path, write_scenario, spec, exact, overlap):
    """Short outputs and long blocks: a request's last step accepts drafts past its output. Only the
    emitted ones count, so accepted + one per decode row is the tokens decode steps emitted; an
    overlapping engine's steps also decode rows of requests that finished in flight, which emit
    nothing (serving/inflight.py), so there the rows are more."""
    path = write_scenario(synthetic_scenario(num_requests=60, rate_per_s=20.0, prompt=200, output=6,
                                             speculation=spec, engine={"overlap": overlap}))
    out = tmp_path / "out"
    argv = ["run", str(path), "--out", str(out), "--quiet", "--no-plots"] + (["--exact"] if exact else [])
    assert main(argv) == 0
    req = read_requests(out / "requests.csv", ("output_tokens", "accepted_tokens", "verified_drafts"))
    steps = read_steps(out / "steps.csv", ("decode_reqs", "accepted_tokens"))
    assert np.all(req.accepted_tokens <= req.output_tokens - 1)
    assert np.all(req.accepted_tokens <= req.verified_drafts)
    emitted, decode = steps.accepted_tokens.sum(), steps.decode_reqs.sum()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["accepted_drafts"] == req.accepted_tokens.sum()
    assert summary["acceptance_rate"] == pytest.approx(req.accepted_tokens.sum() / req.verified_drafts.sum())
    if overlap:
        assert emitted - decode < summary["accepted_drafts"]  # these short outputs always leave a ghost row
    else:
        assert summary["accepted_drafts"] == emitted - decode
        assert summary["mean_accept_length"] == pytest.approx(emitted / decode)
