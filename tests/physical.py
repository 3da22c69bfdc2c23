"""What a finished run's files must show, read back from disk (independent of the simulator's
own end-of-run check): every request counted once, no negative or non-finite latency, events
in order, no request longer than its model's context, KV within capacity, accepted <= verified."""
from __future__ import annotations

import csv
import json
import math
from pathlib import Path

from dspark_sim.catalog import get_model


def assert_physical(out: Path) -> dict:
    """Check the run directory ``out``; return its summary."""
    summary = json.loads((out / "summary.json").read_text())
    with (out / "requests.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    done = [r for r in rows if r["status"] == "completed"]
    rejected = [r for r in rows if r["status"] == "rejected"]
    assert len(done) + len(rejected) == len(rows), {r["status"] for r in rows}
    assert summary["completed"] == len(done) and summary["rejected"] == len(rejected), summary
    assert summary["completed"] + summary["rejected"] == summary["requests"], summary
    assert sum(summary["rejected_reasons"].values()) == summary["rejected"], summary
    assert all(r["reject_reason"] in summary["rejected_reasons"] for r in rejected)
    context = get_model(summary["model"]).max_context
    for r in done:
        arrival, first, finish = float(r["arrival_s"]), float(r["first_token_s"]), float(r["finish_s"])
        for name in ("queue_delay_ms", "ttft_ms", "e2el_ms"):
            value = float(r[name])
            assert math.isfinite(value) and value >= 0, (name, r)
        assert arrival <= float(r["first_scheduled_s"]) <= first <= finish, r
        prompt, output = int(r["prompt_tokens"]), int(r["output_tokens"])
        assert 1 <= output and 1 <= prompt and (not context or prompt + output <= context), r
        tpot = float(r["tpot_ms"])
        assert math.isnan(tpot) == (output == 1) and (math.isnan(tpot) or tpot >= 0), r
        assert 0 <= int(r["accepted_tokens"]) <= int(r["verified_drafts"]), r
    assert summary["total_output_tokens"] == sum(int(r["output_tokens"]) for r in done), summary
    with (out / "steps.csv").open(newline="") as f:
        steps = list(csv.DictReader(f))
    assert all(0 <= int(s["kv_tokens"]) <= summary["kv_capacity_tokens"] for s in steps)
    assert all(float(s["step_s"]) > 0 for s in steps)
    assert 0 <= summary["kv_peak_fraction"] <= 1, summary
    return summary
