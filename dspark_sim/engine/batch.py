"""Requests as columns of numpy arrays, so one engine step is a few array ops."""
from __future__ import annotations

import numpy as np

# Column name -> dtype. One row per request held by a replica.
COLUMNS: dict[str, type] = {
    "rid": np.int64,
    "arrival_s": np.float64,
    "prompt_tokens": np.int64,
    "output_tokens": np.int64,
    "domain": np.int8,
    "difficulty": np.float64,
    "prefill_len": np.int64,  # tokens to prefill: prompt, plus generated after a preemption
    "prefilled": np.int64,
    "generated": np.int64,
    "kv_base": np.int64,  # tokens generated before the current prefill started
    "first_scheduled_s": np.float64,
    "first_token_s": np.float64,
    "last_token_s": np.float64,
    "num_steps": np.int64,
    "num_preemptions": np.int64,
    "accepted_tokens": np.int64,
    "verified_drafts": np.int64,
    "cached_tokens": np.int64,  # prompt tokens its first prefill read from the prefix cache
}


class Table:
    """A growable set of rows with the columns above; rows keep insertion order."""

    def __init__(self, capacity: int = 64):
        self.n = 0
        self.cols = {name: np.zeros(capacity, dtype=dt) for name, dt in COLUMNS.items()}

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, name: str) -> np.ndarray:
        return self.cols[name][: self.n]

    def append(self, row: dict) -> None:
        """Add one row given as a mapping of column to scalar."""
        if self.n == self.cols["rid"].size:
            self._grow(2 * self.n)
        i = self.n
        for name, value in row.items():
            self.cols[name][i] = value
        self.n += 1

    def row(self, i: int) -> dict:
        """Row ``i`` as a mapping of column to Python scalar."""
        return {name: col[i].item() for name, col in self.cols.items()}

    def take(self, mask: np.ndarray) -> dict[str, np.ndarray]:
        """Copies of the selected rows' columns."""
        return {name: col[: self.n][mask] for name, col in self.cols.items()}

    def remove(self, mask: np.ndarray) -> None:
        """Drop the selected rows, keeping the order of the rest."""
        keep = ~mask
        m = int(keep.sum())
        for col in self.cols.values():
            col[:m] = col[: self.n][keep]
        self.n = m

    def _grow(self, capacity: int) -> None:
        for name, col in self.cols.items():
            new = np.zeros(max(capacity, 64), dtype=col.dtype)
            new[: self.n] = col[: self.n]
            self.cols[name] = new
