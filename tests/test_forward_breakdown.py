"""The served-step breakdowns measured on a GPU render from their committed files, and the
kernels are sorted into kinds by name (the FP8 grouped GEMM is the MoE's, not a product's)."""
import subprocess
import sys
from pathlib import Path

import pytest

from dspark_sim.reports.forward_breakdown import kind_of

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "benchmarks" / "forward_breakdown.py"
FILES = sorted((REPO / "profiles" / "h100" / "raw").glob("components_*.json"))


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_a_committed_breakdown_renders_its_table(path):
    done = subprocess.run([sys.executable, str(SCRIPT), "--json", str(path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "| none | 1 |" in done.stdout and "| none | 64 |" in done.stdout
    assert "NVIDIA H100" in done.stdout  # the provenance line names the GPU it was measured on


def test_kernels_are_sorted_into_kinds_by_name():
    names = ("_gemm_fp8_kernel", "_grouped_gemm_kernel", "nvjet_sm90_tst_64x8", "_sparse_attn_kernel", "something_else")
    assert [kind_of(n) for n in names] == ["moe", "moe", "products", "v4 attention", "other"]
