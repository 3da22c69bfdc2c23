"""The GPU benchmarks' tables from result files (dspark_sim/reports): the decoder's speed targets,
the kernels beside SGLang's and the mixed-step probe (the runs themselves need a GPU)."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from dspark_sim.reports import decoder_targets, kernels_vs_sglang, mixed_steps

REPO = Path(__file__).resolve().parents[1]


def _targets(scale: float = 1.0) -> dict:
    rows = [{"method": m, "reqs": r, "overlap": o, "step_ms": s * scale, "verify_ms": 1.0, "draft_ms": 0.0,
             "exposed_host_ms": h, "tok_per_s_per_user": t, "tok_per_s": t * r}
            for m, r, o, s, h, t in (("none", 1, True, 4.2, 0.01, 200.0), ("none", 64, True, 7.0, 0.2, 120.0),
                                     ("none", 1, False, 5.0, None, 180.0), ("dspark", 1, True, 6.0, 0.4, 900.0))]
    return {"provenance": {"model": "qwen3-8b", "context_tokens": 1024, "gpu_uuid": "GPU-x"},
            "copy": {"gbps": 4000.0}, "gemm": {"tflops": 800.0},
            "weights": {"total": 17e9, "read_per_step": 16e9}, "rows": rows}


def test_targets_are_judged_against_the_ceilings_of_the_same_run():
    other = _targets(1.02)
    other["rows"][2]["step_ms"] = 5.25  # steps waited for move more between machines
    got = {c["target"].split(":")[0]: c for c in decoder_targets.checks(_targets(), other)}
    weight = got["no speculation, R = 1"]
    assert weight["value"] == pytest.approx(4.2 / 4.0) and weight["met"]  # 16 GB at 4 TB/s: 4 ms
    # 64 requests of 1,024 tokens: weights 4 ms (memory-bound) + KV 64 x 1024 x 147,456 B / 4 TB/s
    roof = 4.0 + 64 * 1024 * 2 * 36 * 8 * 128 * 2 / 4e12 * 1e3
    assert got["no speculation, R = 64"]["value"] == pytest.approx(7.0 / roof) and got["no speculation, R = 64"]["met"]
    host = got["exposed host time per step, R <= 64 (worst method and R)"]
    assert host["value"] == pytest.approx(0.4) and not host["met"]
    ratio = got["DSpark / no speculation tok/s/user at R = 1 (math)"]
    assert ratio["value"] == pytest.approx(4.5) and ratio["met"]
    two = got["overlapped steps on two GPUs"]
    assert two["value"] == pytest.approx(2.0) and two["met"] and "5.0 %" in two["detail"]


def test_targets_table_and_doc_block(tmp_path):
    path, doc = tmp_path / "t.json", tmp_path / "decoder.md"
    path.write_text(json.dumps(_targets()))
    doc.write_text("# Decoder\n")
    out = subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench_targets.py"), "--json", str(path),
                          "--doc", str(doc)], capture_output=True, text=True, check=True).stdout
    assert "| none | 64 | yes | 7.00 |" in out and "| no speculation, R = 1: step / weight-read time | 1.050 |" in out
    assert "<!-- targets:begin -->" in doc.read_text()


def _vs(schedule_error: bool) -> dict:
    sched = {"R": 8, "block_size": 7, "auto_path": "single", "budget_k": 5, "mismatches": 0,
             "sglang": {"graph_us": 8.0, "launch_us": 20.0}, "ours": {"graph_us": 4.0, "launch_us": 15.0},
             "ours_search": {"graph_us": 5.0, "launch_us": 16.0}, "ours_single": {"graph_us": 4.0, "launch_us": 15.0}}
    acc = {"R": 8, "block_size": 7, "V": 151936, "greedy_mismatches": 0, "greedy_ours": {"graph_us": 10.0},
           "greedy_sglang": {"graph_us": 20.0}, "sampling_ours": {"graph_us": 30.0},
           "sampling_sglang": {"graph_us": 90.0}, "sampling_mean_accepted": {"ours": 1.5, "sglang": 1.25}}
    return {"provenance": {"date": "d2" if not schedule_error else "d1", "sglang_wheel": "w"},
            "schedule": [{"R": 8, "block_size": 7, "error": "boom"}] if schedule_error else [sched],
            "accept": [acc] if schedule_error else []}


def test_sglang_runs_merge_by_section_and_tabulate(tmp_path):
    first, second = tmp_path / "run1.json", tmp_path / "run2.json"
    first.write_text(json.dumps(_vs(schedule_error=True)))
    second.write_text(json.dumps(_vs(schedule_error=False)))
    merged = kernels_vs_sglang.merge([first, second])
    assert merged["section_provenance"]["schedule"]["date"] == "d2"
    assert merged["section_provenance"]["accept"]["date"] == "d1"
    text = kernels_vs_sglang.tables(merged)
    assert "| 7 | 8 | single | 5 | 8.0 | 4.0 | 2.00 | 5.0 |" in text
    assert "| 8 | 20.0 | 10.0 | 2.00 | 0 | 90.0 | 30.0 | 3.00 | 1.25 / 1.50 |" in text
    assert "schedule: measured d2" in kernels_vs_sglang.header(merged)


def test_mixed_steps_draw_the_profilers_contexts():
    pytest.importorskip("torch", reason="the profiler's Stepper (kernels/profiler/steps.py) imports torch")
    from dspark_sim.kernels.profiler.steps import Stepper

    class Recorder(Stepper):  # the lengths verify_spread hands the decoder, without one
        def __init__(self):
            self.seen = []

        def verify_lengths(self, lengths, tokens):
            self.seen.append(lengths)  # the draw, then every request at its mean
            return 1.0
    rec = Recorder()
    rec.verify_spread(64, 64, mixed_steps.CONTEXT_MEAN, mixed_steps.CONTEXT_SIGMA)
    assert mixed_steps.contexts(64) == rec.seen[0]


def test_mixed_steps_price_a_step_over_its_parts():
    point = lambda r, c, k, g: {"reqs": r, "chunk": c, "cached": k, "context_max": 0, "gpu_s": g,  # noqa: E731
                                "forward_s": g, "wall_s": g, "hidden": 1.0}
    data = {"points": [point(64, 0, 0, 0.010), point(0, 2048, 0, 0.050), point(64, 2048, 0, 0.0632)],
            "failed": [{"reqs": 256, "chunk": 8192, "cached": 0, "error": "skipped: budget"}]}
    rows = mixed_steps.table(data)
    assert "| +3.200 | +50.0 |" in rows[-2] and "failed: skipped: budget" in rows[-1]
