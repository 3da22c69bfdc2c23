"""Overlapped steps (``engine: {overlap: true}``), hand-checked on the steps a run records: the
plan of a step is made while the step before it runs, so a request that arrives during a step
joins the step after the next; one that arrives while nothing runs, or during a step that
leaves nothing to run after it, is planned at once."""
import numpy as np
import pytest
from trace_runs import run_trace

US = 1.5e-6  # the record's times are written to the microsecond


def _run(tmp_path, name, requests, overlap, batching="mixed"):
    """``requests``: (arrival_s, prompt, output) each; returns (requests by id, steps)."""
    return run_trace(tmp_path, name, requests, overlap, batching=batching)


def _end(step):
    return step["start_s"] + step["step_s"]


def _during(steps, t):
    """Index of the step running at time ``t``."""
    return next(i for i, s in enumerate(steps) if s["start_s"] < t < _end(s))


@pytest.mark.parametrize("batching", ["mixed", "prefill_first"])
def test_a_request_arriving_during_a_step_joins_the_step_after_the_next(tmp_path, batching):
    trace = [(0.0, 700, 100), (0.1, 500, 20)]  # the second arrives while the first decodes
    off_req, off_steps = _run(tmp_path, "off", trace, False, batching)
    on_req, on_steps = _run(tmp_path, "on", trace, True, batching)
    # the first arrives idle: planned at once, the same either way
    assert on_req[0]["first_scheduled_s"] == off_req[0]["first_scheduled_s"] == 0.0
    assert on_req[0]["first_token_s"] == off_req[0]["first_token_s"] == pytest.approx(_end(on_steps[0]), abs=US)
    j = _during(off_steps, 0.1)
    assert _during(on_steps, 0.1) == j and on_steps[j] == off_steps[j]
    # without overlap: planned when step j ends, prefilled in step j + 1
    assert off_req[1]["first_scheduled_s"] == pytest.approx(_end(off_steps[j]), abs=US)
    assert off_steps[j + 1]["prefill_tokens"] == 500
    assert off_req[1]["first_token_s"] == pytest.approx(_end(off_steps[j + 1]), abs=US)
    # with it: step j + 1 was planned while step j ran, without it; the plan made when step
    # j + 1 starts takes it, and step j + 2 prefills it
    nxt = on_steps[j + 1]
    assert nxt["prefill_tokens"] == 0 and nxt["decode_reqs"] == 1
    assert on_req[1]["first_scheduled_s"] == pytest.approx(nxt["start_s"], abs=US)
    assert on_steps[j + 2]["prefill_tokens"] == 500
    assert on_req[1]["first_token_s"] == pytest.approx(_end(on_steps[j + 2]), abs=US)
    # one step later than without overlap, the queue delay the same
    assert on_req[1]["queue_delay_ms"] == pytest.approx(off_req[1]["queue_delay_ms"], abs=2e-3)
    assert on_req[1]["ttft_ms"] - off_req[1]["ttft_ms"] == pytest.approx(1e3 * nxt["step_s"], rel=0.05)


def test_a_request_arriving_during_the_last_step_is_planned_when_it_lands(tmp_path):
    """The step in flight leaves nothing to run after it: the engine plans anew once it lands."""
    _, alone = _run(tmp_path, "alone", [(0.0, 300, 3)], True)
    last = alone[-1]
    t = round(last["start_s"] + last["step_s"] / 2, 6)
    reqs, steps = {}, {}
    for overlap in (False, True):
        reqs[overlap], steps[overlap] = _run(tmp_path, f"o{overlap}", [(0.0, 300, 3), (t, 200, 3)], overlap)
    assert len(steps[True]) == len(steps[False])
    for a, b in zip(steps[True], steps[False]):
        assert a["start_s"] == b["start_s"] and a["step_s"] == b["step_s"]
    k = len(alone) - 1
    assert reqs[True][1]["first_scheduled_s"] == pytest.approx(_end(steps[True][k]), abs=US)
    assert steps[True][k + 1]["prefill_tokens"] == 200
    assert reqs[True][1]["ttft_ms"] == reqs[False][1]["ttft_ms"]


def test_overlap_moves_ttft_and_leaves_decode_steps(tmp_path):
    """Under steady traffic overlap delays first tokens (never advances them) and leaves the
    requests' token counts and step times physical."""
    trace = [(0.013 * i, 400 + 37 * (i % 5), 30 + 7 * (i % 3)) for i in range(40)]
    off, _ = _run(tmp_path, "off", trace, False)
    on, on_steps = _run(tmp_path, "on", trace, True)
    ttft_off = np.array([r["ttft_ms"] for r in off])
    ttft_on = np.array([r["ttft_ms"] for r in on])
    assert ttft_on.mean() > ttft_off.mean()
    assert all(r["queue_delay_ms"] >= 0 and r["ttft_ms"] >= r["queue_delay_ms"] for r in on)
    assert [r["output_tokens"] for r in on] == [r["output_tokens"] for r in off]
    for a, b in zip(on_steps, on_steps[1:]):
        assert b["start_s"] >= a["start_s"] + a["step_s"] - US
