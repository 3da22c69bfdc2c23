"""SGLang's STS calibration JSON: one temperature per draft position (DSPARK.md section 5)."""
from __future__ import annotations

import json
import math
from pathlib import Path

from dspark_sim.errors import InputError


def load_sts_temperatures(path: str | Path, *, file=None, key: str = "speculation.sts") -> tuple[float, ...]:
    """Temperatures from an STS JSON file; every problem is one InputError naming file and key."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise InputError(file or path, key, str(path), "file not found") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise InputError(path, None, None, f"not valid JSON ({type(err).__name__})") from None
    temps = data.get("temperatures") if isinstance(data, dict) else None
    if not isinstance(temps, list) or not temps:
        raise InputError(path, "temperatures", temps, "expected a non-empty list, one per position")
    for i, t in enumerate(temps):
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t) or t <= 0:
            raise InputError(path, f"temperatures[{i}]", t, "every temperature must be a finite number > 0")
    return tuple(float(t) for t in temps)
