"""The TTFT decomposition of the fidelity cases (dspark_sim/validation/ttft.py) on hand-made run records."""
import pytest

from dspark_sim.metrics.record import write_record
from dspark_sim.validation.ttft import PARTS, decompose, markdown, request_parts, summary


def _request(rid, arrival, scheduled, first, finish):
    return {"request_id": rid, "arrival_s": arrival, "prompt_tokens": 100, "output_tokens": 3, "domain": "chat",
            "first_scheduled_s": scheduled, "first_token_s": first, "finish_s": finish,
            "queue_delay_ms": (scheduled - arrival) * 1e3, "ttft_ms": (first - arrival) * 1e3, "tpot_ms": 1.0,
            "e2el_ms": (finish - arrival) * 1e3, "num_steps": 3, "num_preemptions": 0, "accepted_tokens": 0,
            "verified_drafts": 0, "cached_tokens": 0}


def _steps(bounds):
    return [{"step": i, "start_s": a, "step_s": b - a} for i, (a, b) in enumerate(zip(bounds, bounds[1:]))]


def _write(path, overlap):
    """Request 0 arrives idle at 0 (prefill 0-10 ms, its token read at 10.6 ms); request 1
    arrives at 12 ms, during the decode step 10-15 ms: with overlap the plan made at 15 ms takes
    it and the step 20-50 ms prefills it; without, the step 15-45 ms does."""
    if overlap:
        reqs = [_request(0, 0.0, 0.0, 0.0106, 0.06), _request(1, 0.012, 0.015, 0.050, 0.07)]
        bounds = [0.0, 0.010, 0.015, 0.020, 0.050, 0.055, 0.060, 0.065, 0.070]
    else:
        reqs = [_request(0, 0.0, 0.0, 0.010, 0.06), _request(1, 0.012, 0.015, 0.045, 0.065)]
        bounds = [0.0, 0.010, 0.015, 0.045, 0.050, 0.055, 0.060, 0.065]
    write_record(path, reqs, _steps(bounds))


def test_the_parts_are_read_off_the_steps_and_sum_to_the_ttft(tmp_path):
    _write(tmp_path, overlap=True)
    p = request_parts(tmp_path)
    assert p["queue"] == pytest.approx([0.0, 3.0], abs=1e-3)
    assert p["to_step"] == pytest.approx([0.0, 5.0], abs=1e-3)  # the step in flight at 15 ms
    assert p["step"] == pytest.approx([10.0, 30.0], abs=1e-3)
    assert p["read"] == pytest.approx([0.6, 0.0], abs=1e-3)
    assert sum(p[k] for k in PARTS) == pytest.approx(p["ttft"], abs=2e-3)
    assert list(p["idle"]) == [True, False] and list(p["first"]) == [True, False]


def test_each_parts_error_adds_up_to_the_ttft_error(tmp_path):
    _write(tmp_path / "case" / "real", overlap=True)
    _write(tmp_path / "case" / "sim", overlap=False)
    (row,) = decompose(tmp_path, ["case"])
    real_ttft = (10.6 + 38.0) / 2
    assert row["real"]["ttft"] == pytest.approx(real_ttft, abs=1e-3)
    assert row["error"]["to_step"] == pytest.approx(-2.5 / real_ttft, abs=1e-4)
    assert row["error"]["read"] == pytest.approx(-0.3 / real_ttft, abs=1e-4)
    assert sum(row["error"][k] for k in PARTS) == pytest.approx(row["error"]["ttft"], abs=1e-4)
    assert row["error"]["ttft_rest"] == pytest.approx(33.0 / 38.0 - 1, abs=1e-4)  # request 1 alone
    text = markdown({"command": "cmd", "simulated": "sim", "summary": summary([row]), "cases": [row]})
    assert "| case | 24.3 / 21.5 |" in text
