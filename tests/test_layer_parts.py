"""The per-component layer profiler's dry run: tiny models on the CPU under the Triton interpreter."""
from __future__ import annotations

import json
import os

import pytest

torch = pytest.importorskip("torch")
os.environ.setdefault("TRITON_INTERPRET", "1")

from dspark_sim.kernels.profiler import layer_parts  # noqa: E402

V4_PARTS = {"layer", "layer_unfused", "hyper_connections", "queries", "store_key", "compression",
            "sparse_attention", "output", "projections"}


@pytest.mark.skipif(torch.cuda.is_available(), reason="the dry run is the CPU path")
def test_v4_dry_run_times_every_part(tmp_path):
    out = tmp_path / "parts.json"
    assert layer_parts.main(["--tiny", "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    assert "TINY CPU DRY RUN" in data["provenance"]["note"] and data["provenance"]["model"] == "tiny-v4"
    got = {(r["layer"], r["reqs"], r["part"]) for r in data["parts"]}
    for reqs in (1, 2, 4):
        assert {p for k, r, p in got if k == "hca" and r == reqs} >= V4_PARTS
        assert {p for k, r, p in got if k == "csa" and r == reqs} >= V4_PARTS | {"indexer", "moe_routed_bf16",
                                                                               "moe_routed_fp8", "shared_expert"}
    assert all(r["s"] > 0 for r in data["parts"])
    launches = {(k["layer"], k["part"]): k["launches"] for k in data["kernels"]}
    for kind in ("csa", "hca"):  # the fused small ops: fewer launches than the torch ops they replace
        assert launches[(kind, "layer")] < 0.6 * launches[(kind, "layer_unfused")]
    assert "R=4" in layer_parts.table(data)


def test_qwen_parts_at_both_precisions():
    from dspark_sim.kernels.decoder.tiny import tiny_spec

    device = "cuda" if torch.cuda.is_available() else "cpu"
    parts = layer_parts.qwen_parts(tiny_spec(moe=True), [3], torch.float32, device, 16)[3]
    bf16, fp8 = parts[("moe", "moe_routed_bf16")](), parts[("moe", "moe_routed_fp8")]()
    assert bf16.shape == fp8.shape == (3, 32)
    assert float((fp8 - bf16).norm() / bf16.norm()) < 0.1
