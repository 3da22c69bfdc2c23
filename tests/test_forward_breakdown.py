"""The served-step breakdowns measured on a GPU render from their committed files, and the
kernels are sorted into kinds by name (the FP8 grouped GEMM is the MoE's, not a product's)."""
import subprocess
import sys
from pathlib import Path

import pytest

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
    code = ("import sys; sys.path.insert(0, 'benchmarks'); from forward_breakdown import kind_of; "
            "print(kind_of('_gemm_fp8_kernel'), kind_of('_grouped_gemm_kernel'), kind_of('nvjet_sm90_tst_64x8'), "
            "kind_of('_sparse_attn_kernel'), kind_of('something_else'))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert done.stdout.split() == ["moe", "moe", "products", "v4", "attention", "other"]
