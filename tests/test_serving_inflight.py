"""What the step in flight holds while an overlapping engine plans the next (serving/inflight.py),
hand-checked on the steps a run records: a finished request's place is free one step later than
without overlap, an unsure finish is decoded once more, and a decoding request takes its whole
window from the batch's token budget."""
import pytest
from trace_runs import run_trace


def _run(tmp_path, name, requests, overlap, speculation=None, **deployment):
    return run_trace(tmp_path, name, requests, overlap, speculation, **{"max_running_requests": 2, **deployment})


def test_a_finished_request_holds_its_place_through_the_next_plan(tmp_path):
    # two places: A (4 tokens) and C (40) take them at once; B waits for A's. A's last token comes
    # in step 3 (the first in step 0's prefill). Without overlap B is prefilled in step 4, beside
    # C; with it, step 4 was planned while step 3 ran, when A still held its place: B in step 5
    trace = [(0.0, 64, 4), (0.0, 64, 40), (1e-4, 64, 10)]
    for overlap, first in ((False, 4), (True, 5)):
        reqs, steps = _run(tmp_path, f"o{overlap}", trace, overlap)
        assert [s["prefill_tokens"] for s in steps[:first + 1]] == [128] + [0] * (first - 1) + [64]
        assert [s["decode_reqs"] for s in steps[3:first + 1]] == [2] + [1] * (first - 3)  # A surely done: left out
        assert reqs[0]["finish_s"] == pytest.approx(steps[3]["start_s"] + steps[3]["step_s"], abs=2e-6)
        assert reqs[2]["first_token_s"] == pytest.approx(steps[first]["start_s"] + steps[first]["step_s"], abs=2e-6)


def test_an_unsure_finish_is_decoded_once_more(tmp_path):
    # MTP-3 accepting every draft: a step emits 4 tokens. A (9 tokens: 1 from its prefill, then
    # 4 and 4) finishes in step 2 with 4 left when it was planned: the plan of step 3, made while
    # step 2 ran, could not know it, and step 3 decodes A again beside C (its tokens dropped)
    spec = {"method": "static", "drafter": "mtp", "block_size": 3, "acceptance": {"fixed_accept_prob": 1.0}}
    trace = [(0.0, 64, 9), (0.0, 64, 40)]
    on_reqs, on = _run(tmp_path, "on", trace, True, spec)
    off_reqs, off = _run(tmp_path, "off", trace, False, spec)
    assert [s["decode_reqs"] for s in off[1:5]] == [2, 2, 1, 1]
    assert [s["decode_reqs"] for s in on[1:5]] == [2, 2, 2, 1]
    assert on[3]["verify_tokens"] == 8 and off[3]["verify_tokens"] == 4
    assert on[3]["step_s"] > off[3]["step_s"]  # the ghost's window costs
    assert [r["output_tokens"] for r in on_reqs] == [9, 40]  # it emits nothing more
    assert on_reqs[0]["finish_s"] == pytest.approx(on[2]["start_s"] + on[2]["step_s"], abs=2e-6)


def test_a_decoding_request_takes_its_whole_window_from_the_token_budget(tmp_path):
    # DSpark (block 7): eight requests decode; a long prompt arriving then gets the budget less
    # 8 x 8 window tokens, whatever the scheduler verifies
    spec = {"method": "dspark", "drafter": "dspark", "block_size": 7}
    trace = [(0.0, 64, 300)] * 8 + [(0.3, 3000, 10)]
    _, steps = _run(tmp_path, "window", trace, True, spec, max_running_requests=16, max_batched_tokens=512)
    chunks = [s for s in steps if s["prefill_tokens"] and s["decode_reqs"] == 8]
    assert chunks and all(s["prefill_tokens"] == 512 - 8 * 8 for s in chunks[:-1])
    assert all(s["verify_tokens"] < 8 * 8 for s in chunks)  # the budget counts what may be verified
