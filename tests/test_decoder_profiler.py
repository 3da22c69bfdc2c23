"""The profiler's grid and step timers (tiny model on the CPU), and the bench table."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from dspark_sim.kernels.profiler.grid import MAX_WINDOW, mixed_points, spread_points, verify_points  # noqa: E402
from dspark_sim.kernels.profiler.steps import Stepper, run_part  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def test_verify_grid_is_coarse_first_and_bounded():
    pts = verify_points()
    assert len(set(pts)) == len(pts)
    assert all(r <= m <= MAX_WINDOW * r and m <= 2048 for r, m, _ in pts)
    first = pts[: len(pts) // 3]
    assert {c for _, _, c in first} == {512, 2048, 8192}  # every context early
    assert {r for r, _, _ in first} == {1, 2, 4, 8, 16, 32, 64, 128, 256}


def test_mixed_points_put_one_long_request_among_short_ones_long_first():
    pts = mixed_points()
    assert len(set(pts)) == len(pts) and pts[0][3] == max(p[3] for p in pts)
    assert all(r * 1 <= m <= r * 8 and short < long or short == long for r, m, short, long in pts)
    assert {p[3] for p in pts} == {256, 2048, 8192}  # 256: all equal, the baseline


def test_spread_points_draw_served_like_batches_within_the_token_cap():
    pts = spread_points()
    assert len(set(pts)) == len(pts) and pts[0][0] == 256
    assert all(t <= 2048 and t % r == 0 for r, t, _, _ in pts)


def test_stepper_times_each_part_and_skips_what_does_not_fit():
    from dspark_sim.kernels.decoder.tiny import tiny_decoder

    dec = tiny_decoder("dspark", block_size=8, kv_tokens=1024, max_model_len=256)
    dec.randomize_cache()
    free = len(dec.pages.free)
    st = Stepper(dec, reps=2)
    rows, skipped = run_part([(2, 6, 16), (4, 4, 8), (8, 8, 4096)], st.verify, float("inf"),
                             lambda *a: None)
    assert [p for p, _ in rows] == [(2, 6, 16), (4, 4, 8)] and skipped == [(8, 8, 4096)]
    assert all(s > 0 for _, s in rows)
    assert st.draft(3, 5, context=16) > 0 and dec.drafter.block_size == 8
    assert st.prefill(16, 8) > 0
    assert st.chain(2, 3, context=16) > 0 and dec.drafter.block_size == 8
    calls = []  # the drafter timed cold: the hook runs before every replay (warm-up included), untimed
    assert st.draft(3, 5, context=16, between=calls.append) > 0 and calls == [0, 1, 0, 1]
    calls.clear()
    assert st.chain(2, 3, context=16, between=calls.append) > 0 and calls == [0, 1, 0, 1]
    assert st.kernel("schedule_verify", 4, 7) > 0 and st.kernel("accept", 2, 3) > 0
    with pytest.raises(ValueError, match="unknown kernel"):
        st.kernel("sort", 1, 1)
    for kind in ("none", "chain", "block"):
        res = st.decode_step(kind, 2, 16, graphs=False, steps=2)
        assert len(res["steps"]) == 2 and res["step_s"] > 0
        n = {r[0] for r in res["steps"]}
        assert n == {2} if kind == "none" else (n == {8} if kind == "chain" else max(n) <= 16)
    mixed = st.verify_mixed(4, 12, 8, 40)
    assert mixed["step_s"] > 0 and mixed["context"] == 16 and mixed["max_context"] == 40
    assert st.verify_mixed(4, 4, 8, 4096) is None  # the long request does not fit
    spread = st.verify_spread(6, 12, 40, 0.6)
    assert spread["step_s"] > 0 and spread["uniform_s"] > 0 and spread["max_context"] > spread["context"]
    assert st.verify_spread(6, 12, 40, 0.6)["max_context"] == spread["max_context"]  # a fixed draw
    for kind in ("none", "block"):  # the serving loop's gaps with 3 requests running
        gaps = st.sched(kind, 3, steps=3, prompt=8)
        assert [n for n, _ in gaps["steps"]] == [3, 3, 3] and gaps["step_s"] > 0
    assert len(dec.pages.free) == free  # every point gave its pages back


def test_profiler_resumes_a_raw_file_and_replaces_a_part(tmp_path, monkeypatch):
    """A second run keeps the first run's points, times only the missing ones, and
    --replace re-times a part from scratch (the split-and-merge of a large grid)."""
    env = {"PYTHONHASHSEED": "0", "PATH": "/usr/bin:/bin"}
    import os
    env.update({k: v for k, v in os.environ.items() if k.startswith(("PYTHON", "VIRTUAL", "HOME"))})
    raw = tmp_path / "a" / "raw_tiny.json"
    old = {"provenance": {"date": "2026-01-01"},
           "verify": [{"reqs": 1, "tokens": 1, "context": 512, "step_s": 1.0}],
           "draft": [{"reqs": 1, "block_size": 4, "context": 1024, "step_s": 2.0}],  # no kind: the block drafter
           "prefill": [{"chunk": 64, "context": 0, "step_s": 3.0}]}
    raw.parent.mkdir()
    raw.write_text(json.dumps(old))
    from dspark_sim.kernels.profiler.__main__ import main
    import dspark_sim.kernels.profiler.__main__ as prof
    from dspark_sim.kernels.decoder.tiny import tiny_decoder, tiny_spec

    # the tiny model is not in the catalog: the profiler builds it and checks it by hand
    monkeypatch.setattr(prof, "build", lambda args: tiny_decoder("dspark", block_size=8, kv_tokens=4096,
                                                                 max_model_len=512))
    monkeypatch.setattr(prof, "model_spec", lambda args: tiny_spec())
    assert main(["--gpu", "cpu", "--model", "tiny", "--out", str(tmp_path / "b"),
                 "--part", "draft,prefill", "--resume", str(raw), "--replace", "prefill",
                 "--max-seconds", "0", "--device", "cpu"]) == 0
    new = json.loads((tmp_path / "b" / "raw_tiny.json").read_text())
    assert new["verify"] == old["verify"]  # untouched part kept
    kept = {"kind": "block", "reqs": 1, "block_size": 4, "context": 1024, "step_s": 2.0}
    assert kept in new["draft"]  # kept as the block drafter's row, not re-timed
    assert new["prefill"] == []  # replaced; no time left to re-time it
    assert new["provenance"]["merged_from"] == [old["provenance"]]
    assert new["provenance"]["pad_limits"] == [8, 64, 256]
    assert len(new["provenance"]["skipped"]["draft"]) == 35  # 36 points, one already measured
    assert new["kernels"] == [] and new["step"] == []
    # --add times a part's points again beside the old ones (a second process, pooled)
    assert main(["--gpu", "cpu", "--model", "tiny", "--out", str(tmp_path / "c"), "--part", "draft",
                 "--resume", str(raw), "--add", "draft", "--max-seconds", "0", "--device", "cpu"]) == 0
    again = json.loads((tmp_path / "c" / "raw_tiny.json").read_text())
    assert kept in again["draft"]
    assert len(again["provenance"]["skipped"]["draft"]) == 36  # every point due again


def test_bench_table_reports_checks_and_misses(tmp_path):
    data = {"provenance": {"gpu": "X"}, "rows": [
        {"method": "none", "reqs": 1, "tok_per_s_per_user": 100.0, "tok_per_s": 100.0,
         "tokens_per_step_per_user": 1.0, "step_ms": 10.0},
        {"method": "dspark", "reqs": 1, "tok_per_s_per_user": 250.0, "tok_per_s": 250.0,
         "tokens_per_step_per_user": 4.0, "step_ms": 16.0},
        {"method": "dspark", "reqs": 8, "error": "boom"}]}
    path = tmp_path / "b.json"
    path.write_text(json.dumps(data))
    doc = tmp_path / "decoder.md"
    doc.write_text("# Decoder\n")
    out = subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench_decoder.py"), "--json",
                          str(path), "--doc", str(doc)], capture_output=True, text=True, check=True)
    assert "2.50x no speculation (target >= 3x): MISSED" in out.stdout
    assert "error: dspark R=8: boom" in out.stdout
    assert doc.read_text().startswith("# Decoder") and "bench_decoder:begin" in doc.read_text()


def test_unknown_model_is_one_line_naming_the_flag(tmp_path, capsys):
    from dspark_sim.kernels.profiler.__main__ import main

    assert main(["--gpu", "h200", "--model", "nosuch", "--out", str(tmp_path / "o"), "--device", "cpu"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: dspark-profile: --model='nosuch': unknown model") and "\n" not in err
    assert not (tmp_path / "o").exists()


def test_prefill_idle_leaves_the_gpu_idle_after_each_timed_prefill(tmp_path, capsys):
    import time

    from dspark_sim.kernels.decoder.tiny import tiny_decoder
    from dspark_sim.kernels.profiler.__main__ import main
    from dspark_sim.kernels.profiler.steps import Stepper

    stepper = Stepper(tiny_decoder("none", kv_tokens=4096, max_model_len=512), reps=2, prefill_idle=2.0)
    t0 = time.perf_counter()
    samples = stepper.prefill_samples(32, 64)
    wall = time.perf_counter() - t0
    assert len(samples) >= 5
    assert wall >= 3.0 * sum(samples)  # each timed call (and warm-up) followed by twice its time idle
    assert max(samples) < wall / len(samples)  # the idle time is not in the samples
    with pytest.raises(SystemExit) as stop:
        main(["--gpu", "h200", "--model", "qwen3-8b", "--prefill-idle", "-1", "--out", str(tmp_path / "o"),
              "--device", "cpu"])
    assert stop.value.code == 2 and "--prefill-idle: -1.0 is not in" in capsys.readouterr().err and not (tmp_path / "o").exists()


def test_method_none_times_the_target_alone_and_tp_rank_times_one_rank(tmp_path, capsys):
    """--method none: decode verify points (one token a request) and kind none only; --tp-rank:
    the catalog model cut to one rank; parts that need a drafter are refused in one line."""
    from dspark_sim.kernels.decoder.tiny import tiny_decoder
    from dspark_sim.kernels.profiler.__main__ import main, model_spec, parse_args, plan
    from dspark_sim.kernels.profiler.steps import Stepper

    args = parse_args(["--gpu", "h200", "--model", "llama-3.1-70b", "--out", str(tmp_path), "--method", "none",
                       "--tp-rank", "4", "--part", "verify,prefill,step,sched"])
    spec = model_spec(args)
    assert (spec.num_heads, spec.num_kv_heads, spec.vocab_size) == (16, 2, 32064)
    stepper = Stepper(tiny_decoder("none", kv_tokens=1024, max_model_len=256), reps=1)
    points = {part: plan(stepper, part, False, args)[0] for part in args.parts}
    assert points["verify"] and all(r == t for r, t, _ in points["verify"])
    assert {p[0] for part in ("prefill", "step", "sched") for p in points[part]} == {"none"}
    assert main(["--gpu", "h200", "--model", "llama-3.1-8b", "--out", str(tmp_path / "o"), "--method", "none",
                 "--part", "verify,draft", "--device", "cpu"]) == 2
    assert "--method none times no drafter" in capsys.readouterr().err and not (tmp_path / "o").exists()


def test_long_contexts_extend_a_raw_file_with_only_the_new_points(tmp_path, monkeypatch):
    """``--verify-contexts`` and ``--prefill-cached`` past the grid, resumed from a raw file: the
    earlier points are kept, only the long ones are timed (long levels first), the decoder holds
    their contexts, and ``--shares`` splits the seconds as asked."""
    import dspark_sim.kernels.profiler.__main__ as prof
    from dspark_sim.kernels.decoder.tiny import tiny_decoder, tiny_spec
    from dspark_sim.kernels.profiler import grid

    raw = tmp_path / "raw_tiny.json"
    old = {"provenance": {"date": "2026-01-01"}, "verify": [{"reqs": 1, "tokens": 1, "context": 512, "step_s": 1.0}],
           "prefill": [{"kind": "none", "chunk": 16, "context": 0, "step_s": 3.0}]}
    raw.write_text(json.dumps(old))
    args = prof.parse_args(["--gpu", "cpu", "--model", "tiny", "--out", str(tmp_path / "b"), "--part", "verify,prefill",
                            "--resume", str(raw), "--verify-contexts", "96,48", "--prefill-cached", "96,64",
                            "--prefill-chunks", "16,32", "--prefill-kinds", "none", "--method", "none",
                            "--shares", "verify=1,prefill=3", "--reps", "2", "--device", "cpu", "--max-seconds", "600"])
    assert args.shares["verify"] == 1.0 and args.shares["prefill"] == 3.0
    with pytest.raises(SystemExit):
        prof.parse_args(["--gpu", "cpu", "--model", "tiny", "--out", str(tmp_path), "--shares", "verify=x"])
    built = []

    def build(a):
        built.append(a)
        return tiny_decoder("none", kv_tokens=4096, max_model_len=160, max_running_requests=4)
    monkeypatch.setattr(prof, "build", build)
    monkeypatch.setattr(prof, "model_spec", lambda a: tiny_spec())
    monkeypatch.setattr(grid, "REQS", (1, 2))
    assert prof.profile(args) == 0
    new = json.loads((tmp_path / "b" / "raw_tiny.json").read_text())
    assert old["verify"][0] in new["verify"] and old["prefill"][0] in new["prefill"]
    assert [(r["reqs"], r["context"]) for r in new["verify"][1:]] == [(1, 96), (2, 96), (1, 48), (2, 48)]
    assert [(r["chunk"], r["context"]) for r in new["prefill"][1:]] == [(16, 64), (32, 64), (16, 96), (32, 96)]
    assert built
    # the profiler's own decoder holds a request of the longest context timed
    real = prof.parse_args(["--gpu", "h200", "--model", "qwen3-8b", "--out", str(tmp_path), "--verify-contexts",
                            "32768,16384", "--prefill-cached", "32768", "--prefill-chunks", "64,8192"])
    assert prof.model_len(real) == 32768 + 8192 + 64
    assert prof.model_len(prof.parse_args(["--gpu", "h200", "--model", "qwen3-8b", "--out", str(tmp_path)])) \
        == 4096 + 8192 + 64  # the grid's own: as before
