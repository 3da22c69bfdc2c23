"""Where the committed H200 validation files lie: the decoder's runs and their comparisons
(``benchmarks/fidelity.py`` writes them, the docs' pages are made from them)."""
from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VALIDATION = ROOT / "profiles" / "h200" / "validation"
TTFT_JSON, TTFT_DOC = VALIDATION / "ttft_parts.json", ROOT / "docs" / "validation_ttft.md"
SWEEP_JSON, SWEEP_DOC = VALIDATION / "sweep_errors.json", ROOT / "docs" / "validation_sweeps.md"
LOCKSTEP = (ROOT / "docs" / "bench" / "lockstep_before.json", ROOT / "docs" / "bench" / "lockstep.json")


def lockstep_data() -> tuple[dict, dict] | None:
    """``benchmarks/lockstep.py``'s data before and after the in-flight step (docs/validation.md's
    section on it), or None while either is missing."""
    return tuple(json.loads(p.read_text()) for p in LOCKSTEP) if all(p.is_file() for p in LOCKSTEP) else None
