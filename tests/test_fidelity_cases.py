"""The fidelity suite's traces: what the decoder served is what the simulator replays."""
import csv
from pathlib import Path

import numpy as np
import pytest

from dspark_sim.speculation.config import Speculation
from dspark_sim.validation import cases, fidelity, report
from dspark_sim.validation.replay import step_replay
from dspark_sim.workload import read_trace

VALIDATION = Path(__file__).resolve().parents[1] / "profiles" / "h200" / "validation"


def test_trace_of_a_decoder_run_replays_its_requests(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    rows = [(2, 0.75, 300, 17), (0, 0.0, 1200, 40), (1, 0.125, 64, 5)]
    with open(run / "requests.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["request_id", "arrival_s", "prompt_tokens", "output_tokens"])
        w.writerows(rows)
    assert fidelity.trace_of_run(run, tmp_path / "t.csv") == 3
    [chunk] = list(read_trace(tmp_path / "t.csv", fmt="azure"))
    assert chunk.prompt_tokens.tolist() == [1200, 64, 300]  # in request-id order
    assert chunk.output_tokens.tolist() == [40, 5, 17]
    np.testing.assert_allclose(chunk.arrival_s, [0.0, 0.125, 0.75], atol=1e-6)


def test_synthetic_cases_are_deterministic_and_fit_the_decoder():
    a = cases.synthetic(50, 10.0, 3)
    b = cases.synthetic(50, 10.0, 3)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    arrival, prompt, output = a
    assert arrival[0] == 0.0 and np.all(np.diff(arrival) >= 0)
    assert (prompt + output).max() <= cases.MAX_MODEL_LEN - 16 and output.min() >= 64


def test_compare_simulates_the_requests_a_decoder_run_served(tmp_path):
    """A committed H200 decoder run, compared again: the simulator replays exactly its
    requests, both runs and the plot land under runs/<case>, and the errors are finite."""
    import shutil

    src = VALIDATION / "real" / "visit4"
    real = tmp_path / "real"
    shutil.copytree(src / "syn-light__dspark", real / "syn-light__dspark")
    shutil.copy(src / "sps_dspark.json", real / "sps_dspark.json")
    [row] = fidelity.compare_cases(VALIDATION / "cases", [real], tmp_path / "out")
    case = tmp_path / "out" / "runs" / "syn-light__dspark"
    assert row["case"] == "syn-light__dspark" and row["method"] == "dspark"
    assert (case / "sim" / "requests.csv").is_file() and (case / "validate.png").is_file()
    served = (real / "syn-light__dspark" / "requests.csv").read_text().count("\n")
    assert (case / "sim" / "requests.csv").read_text().count("\n") == served
    assert all(np.isfinite(m["rel_error"]) for m in row["metrics"].values())
    summary = fidelity.summarise([row])
    assert summary["output_throughput"]["cases"] == 1
    text = report.markdown([row], summary, {}, "x", ("elsewhere", [row]))
    assert "## Replicate on another machine (`elsewhere`)" in text and text.count("| syn-light__dspark |") == 2


def test_step_replay_prices_each_served_step_and_the_gap_before_it(tmp_path):
    """Steps whose GPU part is 10 % slower than the profile and whose gap is twice the
    profile's: the replay reports -9.1 % on decode and prefill steps and -50 % on the gap;
    runs that do not record their work give None."""
    from dataclasses import replace

    from dspark_sim.cost import ProfileCost, load_profile
    from dspark_sim.cost.base import DraftWork, StepWork
    from dspark_sim.cost.profile_format import ScheduleFit
    from dspark_sim.cost.profile import shipped_profile_path

    cost = ProfileCost(replace(load_profile(shipped_profile_path("h200", "qwen3-8b")),
                               schedule=ScheduleFit(1e-4, 4e-6)))
    cols = ["step", "start_s", "step_s", "running_reqs", "decode_reqs", "prefill_tokens", "verify_tokens",
            "budget_k", "accepted_tokens", "draft_s", "sched_s", "decode_context_tokens", "decode_max_context",
            "prefill_reqs", "prefill_attn_tokens2"]
    rows = []
    for i, (running, dec, verify, ctx, longest, pre, pre_reqs, attn2) in enumerate(
            [(8, 8, 40, 8000, 1500, 0, 0, 0.0), (200, 200, 900, 200_000, 4000, 0, 0, 0.0),
             (30, 0, 0, 0, 0, 2048, 3, 1.5e6)]):
        draft = DraftWork("block", dec, 7, ctx) if dec else None
        parts = cost.breakdown(StepWork(dec, verify, ctx, pre, pre_reqs, attn2, draft, longest, running))
        sched = 2 * parts.pop("sched_s")
        rows.append([i, 0.0, 1.1 * sum(parts.values()) + sched, running, dec, pre, verify, 0, dec, 0.0, sched,
                     ctx, longest, pre_reqs, attn2])
    run = tmp_path / "case"
    run.mkdir()
    with open(run / "steps.csv", "w", newline="") as f:
        csv.writer(f).writerows([cols] + rows)
    dspark = Speculation(method="dspark", drafter="dspark", block_size=7)
    got = step_replay(run, dspark, cost)
    assert got["decode"]["steps"] == 2 and got["prefill"]["steps"] == 1
    for kind in ("decode", "prefill"):
        assert got[kind]["median_error"] == pytest.approx(1 / 1.1 - 1)
    assert got["sched"]["median_error"] == pytest.approx(-0.5)
    assert set(got["decode"]["by_running"]) == {"5-16", "129-256"}
    with open(run / "steps.csv", "w", newline="") as f:  # an older run: no work columns
        csv.writer(f).writerows([cols[:10]] + [r[:10] for r in rows])
    assert step_replay(run, dspark, cost) is None


def test_a_sessions_run_replays_with_its_prefix_hash_ids(tmp_path):
    """A decoder run of a sessions case is replayed as a Mooncake trace: each request keeps the
    hash ids of the case's request with its id, so the simulator's cache sees its prefixes."""
    source = VALIDATION / "cases" / "sess-light.jsonl"
    [case] = list(read_trace(source, fmt="mooncake"))
    run = tmp_path / "run"
    run.mkdir()
    with open(run / "requests.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["request_id", "arrival_s", "prompt_tokens", "output_tokens"])
        for i in (3, 0, 2):
            w.writerow([i, round(float(case.arrival_s[i]), 3), int(case.prompt_tokens[i]), 9])
    assert fidelity.trace_of_run(run, tmp_path / "t.jsonl", source) == 3
    [chunk] = list(read_trace(tmp_path / "t.jsonl", fmt="mooncake"))
    assert chunk.hash_ids == [case.hash_ids[i] for i in (0, 2, 3)]
    assert chunk.prompt_tokens.tolist() == case.prompt_tokens[[0, 2, 3]].tolist()
    with open(run / "requests.csv", "a", newline="") as f:
        csv.writer(f).writerow([len(case), 9.0, 10, 1])
    with pytest.raises(Exception, match="request_id"):
        fidelity.trace_of_run(run, tmp_path / "u.jsonl", source)


def test_sessions_cases_share_prefixes_and_fit_the_decoder():
    for name in ("sess-light", "sess-mid"):
        [chunk] = list(read_trace(VALIDATION / "cases" / f"{name}.jsonl", fmt="mooncake"))
        assert (chunk.prompt_tokens + chunk.output_tokens).max() <= cases.MAX_MODEL_LEN - 16
        firsts = [tuple(h[:4]) for h in chunk.hash_ids]
        assert len(set(firsts)) < len(firsts) / 4  # most prompts start with a shared system prompt


def test_the_report_gives_the_shared_prefix_cases_their_own_summary():
    m = {"output_throughput": {"real": 100.0, "sim": 103.0, "rel_error": 0.03}}
    rows = [{"case": "sess-mid__none", "current_decoder": True, "metrics": m, "real_run": "v", "passes": 1,
             "prefix_hit": {"real": 0.78, "sim": 0.8}},
            {"case": "syn-mid__none", "current_decoder": True, "metrics": m, "real_run": "v", "passes": 1}]
    text = report.markdown(rows, fidelity.summarise(rows), {})
    assert "## Shared prefixes (prefix cache on)" in text and "| sess-mid__none | 78.0% / 80.0% |" in text
    assert "1 points: sess-mid__none." in text


def test_runs_on_a_host_the_profile_saw_are_reported_apart_from_the_headline(tmp_path):
    """Every GPU that timed part of the shipped profile (its provenance and the files merged into
    it) makes a run in-sample for the host: its cases get their own section, after the unseen
    host's headline; a run whose notes name no GPU is 'unknown'."""
    import json

    seen = sorted(report.profile_hosts())
    assert len(seen) >= 2  # the profile merges parts timed on several H200s
    for run, uuid in (("u", "GPU-never-profiled"), ("s", seen[-1]), ("n", None)):
        (tmp_path / run).mkdir()
        (tmp_path / run / "notes.json").write_text(json.dumps({"gpu_uuid": uuid, "profile_host": f"host of {run}"}))
    m = {"output_throughput": {"real": 100.0, "sim": 103.0, "rel_error": 0.03}}
    rows = [{"case": f"c{run}__none", "current_decoder": True, "metrics": m, "real_run": run, "passes": 1}
            for run in ("s", "u", "n")]
    assert [(k, [r["real_run"] for r in g]) for k, g in report.host_groups(rows, tmp_path)] == [
        ("unseen", ["u"]), ("seen", ["s"]), ("unknown", ["n"])]
    text = report.markdown(rows, fidelity.summarise(rows), {}, real_root=tmp_path)
    head, seen_part = text.split("## The current decoder on a host the profile saw")
    assert "one the profile never saw" in head and "1 points: cu__none." in head
    assert "- `s`: host of s" in seen_part and "1 points: cs__none." in seen_part
    assert "## The current decoder on a host its notes do not name" in seen_part


def test_the_shipped_tp2_cases_are_remade_exactly_and_the_decoder_reads_them_at_tp_2(tmp_path):
    """``benchmarks/fidelity.py cases --model qwen3-32b --tp 2 --traces syn-light syn-mid`` wrote them."""
    pytest.importorskip("torch")
    from dspark_sim.kernels.decoder.launch import load_launch

    shipped = VALIDATION / "cases_tp2"
    paths = cases.make_cases(tmp_path, Path(__file__).resolve().parents[1] / "examples" / "traces"
                             / "azure_llm_2023_code.csv", model="qwen3-32b", tp=2, traces=("syn-light", "syn-mid"))
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in shipped.iterdir())
    for p in tmp_path.iterdir():
        assert p.read_bytes() == (shipped / p.name).read_bytes(), p.name
    for p in paths:
        launch = load_launch(p, "qwen3-32b", 2, device="cpu")
        assert launch.scenario.deployment.tp == 2
