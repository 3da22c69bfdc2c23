"""The product's numbers on fixed inputs are those in tests/golden/ (benchmarks/golden.py), in both
simulation modes (skip-ahead and step by step).

A change that moves them on purpose re-makes the files: ``python benchmarks/golden.py make``.
"""
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("mode", ["skip-ahead", "exact"])
@pytest.mark.parametrize("name", ["summary", "errors", "compare", "capacity", "tune"])
def test_output_is_golden(name, mode):
    # a process of its own: the commands set warning filters and caches the rest of the suite must not see
    flags = ["--exact"] if mode == "exact" else []
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "golden.py"), "check", "--only", name, *flags],
                          capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 0, done.stdout + done.stderr[-2000:]
