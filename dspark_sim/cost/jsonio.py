"""Reading and writing the JSON files of the cost package, with errors that name the file."""
from __future__ import annotations

import json
from pathlib import Path

from dspark_sim import userfiles
from dspark_sim.errors import InputError
from dspark_sim.metrics.outdir import atomic_write_text


def read_json(path: str | Path) -> object:
    """Decoded JSON of ``path``; :class:`InputError` when it cannot be read or parsed."""
    return userfiles.read_json(path)


def write_json_atomic(path: str | Path, data: object, *, indent: int | None = 1) -> None:
    """Write ``data`` as JSON through a temporary file and a rename, so no reader sees half a file
    (:func:`dspark_sim.metrics.outdir.atomic_write_text`: nothing is left when it fails)."""
    atomic_write_text(path, json.dumps(data, indent=indent, allow_nan=False) + "\n")


def with_file(err: InputError, file, prefix: str = "") -> InputError:
    """``err`` re-addressed to ``file`` with ``prefix`` put before its key."""
    key = f"{prefix}.{err.key}" if prefix and err.key else (prefix or err.key)
    return InputError(file, key, err.value, err.why)
