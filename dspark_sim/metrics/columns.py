"""Numeric columns a run collects, and the typed views the collector gives of them.

:class:`Growing` (numpy arrays that double as they fill) and :class:`Columns` (``array.array``,
cheap to append one row at a time) hold them by name inside the collector; readers get
:class:`StepLog` and :class:`TokenGaps` (and :class:`~dspark_sim.metrics.record.RequestColumns`
for the finished requests), one attribute per column.
"""
from __future__ import annotations

from array import array
from dataclasses import dataclass

import numpy as np


class Growing:
    """Append-only numeric columns backed by numpy arrays that double as they fill."""

    def __init__(self, dtypes: dict[str, type]):
        self.n, self.capacity = 0, 1024
        self.cols = {k: np.zeros(self.capacity, dtype=t) for k, t in dtypes.items()}

    def extend(self, **values) -> None:
        size = len(next(iter(values.values())))  # arrays or lists, one entry per row
        end = self.n + size
        if end > self.capacity:
            self.capacity = max(2 * end, 1024)
            for k, col in self.cols.items():
                new = np.zeros(self.capacity, dtype=col.dtype)
                new[: self.n] = col[: self.n]
                self.cols[k] = new
        cols = self.cols
        for k, v in values.items():
            cols[k][self.n: end] = v
        self.n = end

    def append(self, **values) -> None:
        """One row, a number per column (cheaper than :meth:`extend` of one)."""
        if self.n == self.capacity:
            self.extend(**{k: [v] for k, v in values.items()})
            return
        cols = self.cols
        for k, v in values.items():
            cols[k][self.n] = v
        self.n += 1

    def __getitem__(self, key: str) -> np.ndarray:
        return self.cols[key][: self.n]


class Columns:
    """Append-one-row-at-a-time numeric columns (``array.array``: compact and cheap to append),
    each given by name."""

    def __init__(self, typecodes: dict[str, str]):
        self.cols = {k: array(t) for k, t in typecodes.items()}
        self._appends = {k: c.append for k, c in self.cols.items()}

    @property
    def n(self) -> int:
        return len(next(iter(self.cols.values())))

    def append(self, **values) -> None:
        """One row, a value per column."""
        self._check(values)
        appends = self._appends
        for name, v in values.items():
            appends[name](v)

    def extend(self, **columns) -> None:
        """Rows given as one sequence (list or array) per column."""
        self._check(columns)
        for name, values in columns.items():
            col = self.cols[name]
            if isinstance(values, np.ndarray):  # as its bytes in the column's type, not number by number
                col.frombytes(values.astype(col.typecode, copy=False).tobytes())
            else:
                col.extend(values)

    def _check(self, values: dict) -> None:
        if values.keys() != self.cols.keys():  # a fault of the caller
            raise ValueError(f"columns {', '.join(self.cols)} expected; missing {sorted(self.cols.keys() - values.keys())}, "
                             f"unknown {sorted(values.keys() - self.cols.keys())}")

    def __getitem__(self, key: str) -> np.ndarray:
        return np.frombuffer(self.cols[key], dtype=self.cols[key].typecode) if self.n else np.zeros(0)


@dataclass(frozen=True, slots=True)
class StepLog:
    """The simulator's steps as columns ``[S]`` (the summary's and the invariants'; the record's
    ``steps.csv`` holds more): start and duration (of which the drafter's and the scheduler's
    seconds), running and decode rows (an overlapping engine's ghost rows too), verify and
    prefill tokens, the DSpark budget K, tokens emitted (first tokens too), KV tokens held."""

    start_s: np.ndarray
    step_s: np.ndarray
    running: np.ndarray
    decode_reqs: np.ndarray
    verify_tokens: np.ndarray
    prefill_tokens: np.ndarray
    budget_k: np.ndarray
    emitted: np.ndarray
    draft_s: np.ndarray
    sched_s: np.ndarray
    kv_tokens: np.ndarray

    def __len__(self) -> int:
        return self.step_s.size


@dataclass(frozen=True, slots=True)
class TokenGaps:
    """Inter-token gaps as the client sees them: ``count[i]`` gaps of ``gap_s[i]`` seconds, ``[G]`` each."""

    gap_s: np.ndarray
    count: np.ndarray


# StepLog's columns as the collector appends them (``array.array`` typecodes)
STEP_TYPECODES = {"start_s": "d", "step_s": "d", "running": "i", "decode_reqs": "i", "verify_tokens": "i",
                  "prefill_tokens": "i", "budget_k": "i", "emitted": "i", "draft_s": "d", "sched_s": "d", "kv_tokens": "q"}
