"""The profiler over several processes on the CPU (gloo): collective curves and whole
tensor-parallel steps, through the same code the GPUs run."""
from __future__ import annotations

import pytest

pytest.importorskip("torch")

from dspark_sim.cost.comm_curves import load_comm_curves  # noqa: E402
from dspark_sim.kernels.decoder.tiny import tiny_spec  # noqa: E402
from dspark_sim.kernels.decoder.tp import run_ranks  # noqa: E402
from dspark_sim.kernels.profiler.tp import comm_main, comm_sizes, steps_job  # noqa: E402


def test_comm_curves_on_the_cpu_are_written_and_labelled_cpu(tmp_path, capsys):
    assert comm_main(["--gpu", "h200", "--tp", "2", "--device", "cpu", "--max-bytes", "16384", "--reps", "3",
                      "--out", str(tmp_path)]) == 0
    curves = load_comm_curves(tmp_path / "comm_tp2.json")
    assert curves.source == "cpu" and curves.tp == 2 and curves.provenance["backend"] == "gloo"
    for op in ("all_reduce", "all_to_all"):
        assert curves.curves[op].bytes == tuple(comm_sizes(16384)) == (1024, 4096, 16384)
        assert all(s > 0 for s in curves.curves[op].seconds)
    assert "wrote" in capsys.readouterr().out


def test_whole_tp_steps_run_through_the_leader():
    """The profiler's whole-step timing (fake requests marked cached, overlapped steps, graphs
    dropped after each point) replayed by rank 1 as rank 0 runs it."""
    rows = run_ranks(2, steps_job, (tiny_spec(), ("none", "block"), (1, 4), 32, 4,
                                    {"dtype": "float32", "kv_tokens": 2048, "kv_block_tokens": 4,
                                     "draft_layers": 1, "markov_rank": 32}), timeout_s=120)
    assert [(r["kind"], r["reqs"], r["tp"]) for r in rows] == [("none", 1, 2), ("none", 4, 2),
                                                               ("block", 1, 2), ("block", 4, 2)]
    for r in rows:
        assert r["step_s"] > 0 and len(r["steps"]) == 4
        verify = [s[0] for s in r["steps"]]
        assert all(v == r["reqs"] for v in verify) if r["kind"] == "none" else all(v >= r["reqs"] for v in verify)
