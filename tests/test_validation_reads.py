"""When a first token is read: the wait past the end of the step that prefilled its prompt."""
import pytest

from dspark_sim.metrics.record import write_record
from dspark_sim.validation.reads import first_reads, step_reads, table


def _request(i, prompt, sched, first):
    return {"request_id": i, "arrival_s": sched, "prompt_tokens": prompt, "output_tokens": 4, "domain": "chat",
            "first_scheduled_s": sched, "first_token_s": first, "finish_s": first + 0.1, "queue_delay_ms": 0.0,
            "ttft_ms": (first - sched) * 1e3, "tpot_ms": 30.0, "e2el_ms": 100.0, "num_steps": 4,
            "num_preemptions": 0, "accepted_tokens": 0, "verified_drafts": 0, "cached_tokens": 0}


def _steps():
    # 0: request 0's prompt alone, then an eager step (2048 prompt tokens); 2: request 1's prompt
    # alone, then a decode step (a graph); 4: two prompts in one step, which no request is placed by
    rows = [(0.00, 0.020, 300, 1, 0), (0.02, 0.060, 2048, 1, 8), (0.08, 0.020, 200, 1, 8),
            (0.10, 0.010, 0, 0, 8), (0.11, 0.030, 700, 2, 8), (0.14, 0.010, 0, 0, 8)]
    return [{"step": i, "start_s": s, "step_s": d, "prefill_tokens": p, "prefill_reqs": q, "decode_reqs": v,
             "verify_tokens": v, "running_reqs": v + q} for i, (s, d, p, q, v) in enumerate(rows)]


def test_a_first_token_read_after_the_next_eager_launch_waits_past_its_step(tmp_path):
    requests = [_request(0, 300, 0.0, 0.027), _request(1, 200, 0.08, 0.1), _request(2, 350, 0.11, 0.14)]
    write_record(tmp_path, requests, _steps())
    got = first_reads(tmp_path, graph_tokens=512)
    assert got["eager"] == [pytest.approx(7.0)]  # read 7 ms after its step's end: the next step was eager
    assert got["graph"] == [pytest.approx(0.0, abs=1e-9)]  # request 2 shared its step: not placed
    rows = [{"method": "none", "batching": "mixed", "first_reads": {"real": got, "sim": got}}]
    assert table(rows)[-1] == "| none | mixed | 0.0, 0.0 / 0.0, 0.0 (1 / 1) | 7.0, 7.0 / 7.0, 7.0 (1 / 1) |"


def test_a_record_that_times_every_read_gives_every_steps_wait(tmp_path):
    steps = _steps()
    for s in steps:
        s["read_s"] = s["start_s"] + s["step_s"] + {0: 0.007, 2: 0.003}.get(s["step"], 0.0)
    write_record(tmp_path, [_request(0, 300, 0.0, 0.027)], steps)
    got = step_reads(tmp_path, graph_tokens=512)
    assert got["eager"] == [pytest.approx(7.0), pytest.approx(0.0, abs=1e-6)]  # steps 0 and 3: an eager step next
    assert got["graph"] == [pytest.approx(0.0, abs=1e-6), pytest.approx(3.0), pytest.approx(0.0, abs=1e-6)]
    for s in steps:
        s["read_s"] = 0.0  # written before the column: no times
    write_record(tmp_path, [_request(0, 300, 0.0, 0.027)], steps)
    assert step_reads(tmp_path, graph_tokens=512) is None
