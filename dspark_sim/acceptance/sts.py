"""SGLang's STS calibration JSON: one temperature per draft position (DSPARK.md section 5)."""
from __future__ import annotations

import math
from pathlib import Path

from dspark_sim.errors import InputError
from dspark_sim.userfiles import read_json


def load_sts_temperatures(path: str | Path, *, file=None, key: str = "speculation.sts") -> tuple[float, ...]:
    """Temperatures from an STS JSON file; every problem is one InputError naming file and key."""
    path = Path(path)
    if not path.exists():
        raise InputError(file or path, key, str(path), "file not found")
    data = read_json(path)
    temps = data.get("temperatures") if isinstance(data, dict) else None
    if not isinstance(temps, list) or not temps:
        raise InputError(path, "temperatures", temps, "expected a non-empty list, one per position")
    for i, t in enumerate(temps):
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t) or t <= 0:
            raise InputError(path, f"temperatures[{i}]", t, "every temperature must be a finite number > 0")
    return tuple(float(t) for t in temps)
