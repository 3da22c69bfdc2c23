"""Serving loop: chunked prefill, admission cap, preemption, the simulator's CSV columns;
a scenario file read for the decoder; synthetic acceptance."""
import csv

import pytest
import yaml

torch = pytest.importorskip("torch")

from dspark_sim.errors import InputError  # noqa: E402
from dspark_sim.metrics.record import REQUEST_COLUMNS, STEP_COLUMNS  # noqa: E402
from dspark_sim.kernels.decoder.engine import serve, write_csvs  # noqa: E402
from dspark_sim.kernels.decoder.sequence import Sequence  # noqa: E402
from dspark_sim.kernels.decoder.launch import load_launch, trace_sequences  # noqa: E402
from dspark_sim.kernels.decoder.tiny import greedy_reference, tiny_decoder  # noqa: E402


def _seqs(n, prompt_len=9, out=6, gap_s=0.0):
    return [Sequence(i, [(i * 7 + j) % 31 for j in range(prompt_len + i)], out, arrival_s=i * gap_s)
            for i in range(n)]


def test_chunked_prefill_cap_and_csvs(tmp_path):
    dec = tiny_decoder("dspark", max_running_requests=2, max_batched_tokens=5)
    seqs = _seqs(4, gap_s=0.01)
    run = serve(dec, seqs)
    assert all(s.done and len(s.outputs) == 6 for s in seqs)
    assert max(r["running_reqs"] for r in run.steps) <= 2
    assert max(r["prefill_tokens"] for r in run.steps) <= 5
    assert any(0 < r["prefill_tokens"] < 9 for r in run.steps)  # prompts were chunked
    ref = greedy_reference(tiny_decoder("none"), seqs[1].tokens[:seqs[1].prompt_len], 6)
    assert seqs[1].outputs == ref
    write_csvs(run, tmp_path)
    with open(tmp_path / "requests.csv") as f:
        rows = list(csv.DictReader(f))
    assert tuple(rows[0]) == REQUEST_COLUMNS and len(rows) == 4
    assert all(float(r["ttft_ms"]) >= float(r["queue_delay_ms"]) >= 0 for r in rows)
    with open(tmp_path / "steps.csv") as f:
        assert tuple(next(csv.reader(f))) == STEP_COLUMNS


@pytest.mark.parametrize("overlap", [False, True])
def test_step_rows_cover_the_whole_cycle_and_record_the_work(overlap):
    """Back-to-back steps tile the timeline (a row starts where the last one ended, the
    gap before the GPU work in ``sched_s``); each row carries the work the cost model
    prices; the garbage collector is left as it was."""
    import gc

    dec = tiny_decoder("dspark", max_running_requests=3, max_batched_tokens=8)
    seqs = _seqs(3, out=5)
    steps = serve(dec, seqs, overlap=overlap).steps
    for a, b in zip(steps, steps[1:]):
        assert b["start_s"] == pytest.approx(a["start_s"] + a["step_s"], abs=1e-9)
    # without overlap the gap lies inside the row; with it, it ran while the last step did
    assert all(0 <= r["sched_s"] < r["step_s"] if not overlap else 0 <= r["sched_s"] <= r["step_s"]
               for r in steps)
    pre = [r for r in steps if r["prefill_tokens"]]
    assert pre and all(r["prefill_reqs"] >= 1 and r["decode_context_tokens"] == 0 for r in pre)
    assert all(r["prefill_attn_tokens2"] >= r["prefill_tokens"] ** 2 / (2 * r["prefill_reqs"]) for r in pre)
    # each chunk's pairs n * (cached before it + n / 2) add up to L^2 / 2 over a prompt of L
    assert sum(r["prefill_attn_tokens2"] for r in pre) == pytest.approx(sum(s.prompt_len ** 2 / 2 for s in seqs))
    dec_rows = [r for r in steps if r["decode_reqs"]]
    assert dec_rows and all(r["prefill_reqs"] == 0 for r in dec_rows)
    assert all(9 <= r["decode_max_context"] <= r["decode_context_tokens"]
               <= r["decode_reqs"] * r["decode_max_context"] for r in dec_rows)
    assert gc.get_freeze_count() == 0


def test_the_serving_clock_starts_after_the_collector_is_frozen(monkeypatch):
    """A slow collection before serving (a model's heap) is not in the first request's wait."""
    import time

    from dspark_sim.kernels.decoder import engine

    collect = engine.gc.collect
    monkeypatch.setattr(engine.gc, "collect", lambda: (time.sleep(0.5), collect())[1])
    run = serve(tiny_decoder("none"), _seqs(1, out=2))
    assert run.requests[0]["queue_delay_ms"] < 250


def test_preemption_recomputes_and_keeps_outputs():
    dec = tiny_decoder("dspark", kv_tokens=64, max_running_requests=3)  # 16 pages of 4 tokens
    seqs = _seqs(3, prompt_len=10, out=12)
    serve(dec, seqs)
    assert sum(s.num_preemptions for s in seqs) > 0
    for s in seqs:
        assert s.outputs == greedy_reference(tiny_decoder("none"), s.tokens[:s.prompt_len], 12)


def test_synthetic_acceptance_runs_the_loop():
    dec = tiny_decoder("dspark", synthetic=True)
    seqs = [Sequence(i, [1, 2, 3, 4], 20, temperature=1.0) for i in range(3)]
    serve(dec, seqs)
    assert all(len(s.outputs) == 20 for s in seqs)
    assert sum(s.accepted for s in seqs) > 20  # the preset accepts most drafts


def _write(tmp_path, **over):
    (tmp_path / "sps.json").write_text('{"sample_batch_tokens": [1, 64], "sample_steps_per_sec": '
                                       '[100, 50], "max_batch_tokens": 4096}')
    (tmp_path / "sts.json").write_text('{"temperatures": [1.1, 1.2, 1.3, 1.4, 1.5, 1.6, 1.7]}')
    (tmp_path / "t.csv").write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                                    "2023-11-16 18:17:03.0,40,10\n2023-11-16 18:17:04.0,30,8\n")
    data = {"model": "qwen3-8b", "gpu": "h200",
            "deployment": {"max_running_requests": 32, "max_batched_tokens": 4096, "batching": "prefill_first"},
            "speculation": {"method": "dspark", "block_size": 7, "sps_table": "sps.json",
                            "sts": "sts.json", "acceptance": {"drafter": "dspark"}},
            "workload": {"trace": "t.csv", "domain": "math"}}
    for key, value in over.items():
        section, _, name = key.partition("__")
        if name:
            data[section][name] = value
        else:
            data[section] = value
    path = tmp_path / "dspark.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_the_decoder_reads_a_scenario_file(tmp_path):
    launch = load_launch(_write(tmp_path), "qwen3-8b", device="cpu")
    assert launch.conf.block_size == 7 and launch.conf.max_running_requests == 32
    assert launch.conf.sts_temperatures[0] == 1.1 and launch.sps.max_batch_tokens == 4096
    seqs = trace_sequences(launch, vocab_size=100)
    assert [(len(s.tokens), s.max_tokens, s.domain, s.arrival_s) for s in seqs] == [(40, 10, 0, 0.0), (30, 8, 0, 1.0)]


def test_the_whole_block_verified_is_static_with_the_dspark_drafter(tmp_path):
    path = _write(tmp_path, speculation={"method": "static", "drafter": "dspark", "block_size": 7})
    assert load_launch(path, device="cpu").conf.scheduler == "full"
    path = _write(tmp_path, speculation={"method": "static", "block_size": 3})
    assert load_launch(path, device="cpu").conf.method == "static"


def test_the_decoder_batches_as_the_scenario_says(tmp_path):
    assert load_launch(_write(tmp_path), device="cpu").conf.batching == "prefill_first"
    path = _write(tmp_path, deployment={"max_running_requests": 32, "max_batched_tokens": 4096})
    assert load_launch(path, device="cpu").conf.batching == "mixed"  # the scenario's default


@pytest.mark.parametrize("over,key", [
    ({}, "model"),  # --model differs from the file
    ({"deployment__tp": 2}, "deployment.tp"),
    ({"deployment__kv_cache_dtype": "fp8"}, "deployment.kv_cache_dtype"),
    ({"deployment__routing_skew": 0.5}, "deployment.routing_skew"),
    ({"speculation__method": "threshold"}, "speculation.method"),
    ({"speculation__block_size": 5}, "sts"),  # 7 STS temperatures for a block of 5
    ({"speculation__max_verify_len": 12}, "max_verify_len"),
    ({"speculation__color": 1}, "speculation.color"),
    ({"deployment__batching": "chunky"}, "deployment.batching"),
    ({"speculation__sps_table": None}, "speculation.sps_table"),  # the scheduler needs a table
    ({"speculation__drafter": "eagle3"}, "speculation.drafter"),
])
def test_the_decoder_rejects_what_it_cannot_run(tmp_path, over, key):
    model = "qwen3-4b" if key == "model" else "qwen3-8b"
    with pytest.raises(InputError) as err:
        load_launch(_write(tmp_path, **over), model, device="cpu")
    assert key in str(err.value) and "\n" not in str(err.value)


def test_cli_prints_one_line_and_exits_2(tmp_path, capsys):
    from dspark_sim.kernels.decoder.cli import main

    code = main(["--config", str(_write(tmp_path, deployment__tp=4)), "--device", "cpu"])
    assert code == 2
    assert capsys.readouterr().err.count("\n") == 1


@pytest.mark.parametrize("method", ["none", "static", "dspark", "dspark-production"])
def test_warmup_meets_every_tier_and_leaves_the_decoder_as_it_was(method):
    """The start-up warm-up runs every (token tier, request tier) verify shape, gives its
    pages back, and serving afterwards gives the same tokens as without it."""
    from dspark_sim.kernels.cases import synthetic_sps_table
    from dspark_sim.kernels.decoder.warmup import verify_points

    kw = dict(max_running_requests=4, max_batched_tokens=32, max_model_len=128, kv_tokens=2048)
    if method == "dspark":
        kw["scheduler"] = "full"
    if method == "dspark-production":
        method, kw["sps"] = "dspark", synthetic_sps_table()
    warm, cold = tiny_decoder(method, **kw), tiny_decoder(method, **kw)
    free = len(warm.pages.free)
    stats = warm.warmup()
    assert stats["verify_points"] == len(verify_points(4, warm.conf.window)) > 0
    assert stats["prefill_steps"] > 0 and len(warm.pages.free) == free
    runs = [serve(d, _seqs(3)).sequences for d in (warm, cold)]
    assert [s.outputs for s in runs[0]] == [s.outputs for s in runs[1]]


def test_verify_points_reach_every_graph_key():
    """Each (token tier, request tier) a step of R <= 8 requests and windows of <= 4 tokens
    can use appears once, with R and N inside the tier's bounds."""
    from dspark_sim.kernels.decoder.graphs import request_tier, token_tier
    from dspark_sim.kernels.decoder.warmup import verify_points

    pts = verify_points(8, 4)
    keys = {(token_tier(n), rp) for rp, r, n in pts}
    assert len(keys) == len(pts)
    want = {(token_tier(n), request_tier(r, 8)) for r in range(1, 9) for n in range(r, 4 * r + 1)}
    assert keys == want
    assert all(request_tier(r, 8) == rp and r <= n <= 4 * r for rp, r, n in pts)


def test_on_step_sees_every_row_and_production_sizes_the_budget_from_lagged_confidences():
    """The kernel sizes the budget from the current confidences until two steps have passed;
    then the host sizes it from the confidences of two steps before (no wait: they came back
    then) and the kernel takes that many of the current ones."""
    from dspark_sim.kernels.decoder.decoder import host_budget

    dec = tiny_decoder("dspark", synthetic=True, scheduler="production", lag_steps=2, kernels="triton")
    calls, schedule, lags = [], dec._schedule, []

    def recording(conf, *args, lag_conf=None, budget_k=None, **kw):
        calls.append((conf.shape[0], None if lag_conf is None else lag_conf.shape[0], budget_k))
        lags.append([x.copy() for x in dec.lag])
        return schedule(conf, *args, lag_conf=lag_conf, budget_k=budget_k, **kw)
    dec._schedule = recording
    seen = []
    seqs = [Sequence(i, [1, 2, 3, 4 + i], 10 + 3 * i, temperature=1.0) for i in range(3)]
    run = serve(dec, seqs, on_step=seen.append)
    assert seen == run.steps and len(seen) > 3
    assert calls[0] == (3, 3, None) and calls[1] == (3, 3, None)  # the current confidences size it
    assert all(k is not None and lag is None for _, lag, k in calls[2:])
    for (r, _, k), lag in zip(calls[2:], lags[2:]):  # K from the confidences two steps before
        assert k == host_budget(lag[0], r, dec.temps_host, dec.sps_host, dec.sps.max_batch_tokens, dec.conf)
    assert any(len(lag[0]) != r for (r, _, _), lag in zip(calls[2:], lags[2:]))  # requests finished


@pytest.mark.parametrize("checkpoint,synthetic,meaningful", [(None, True, False), ("ckpt", True, False),
                                                             ("ckpt", False, True)])
def test_decode_run_says_what_it_is(tmp_path, checkpoint, synthetic, meaningful):
    """Random weights and synthetic acceptance are named in the run's metadata and its start
    line; only real weights with real acceptance make outputs worth writing."""
    from argparse import Namespace

    from dspark_sim.kernels.decoder.cli import run_provenance

    launch = load_launch(_write(tmp_path), "qwen3-8b", device="cpu", synthetic=synthetic)
    args = Namespace(checkpoint=checkpoint, draft_checkpoint=None, temperature=1.0)
    meta = run_provenance(args, launch, synthetic)
    assert meta["outputs_meaningful"] is meaningful
    assert meta["acceptance"]["kind"] == ("synthetic" if synthetic else "real")
    assert ("random (no --checkpoint)" in meta["summary"]) is (checkpoint is None)
    if synthetic:
        assert "synthetic acceptance" in meta["summary"] and "dspark/qwen3-8b" in meta["acceptance"]["detail"]
