"""Requests as columns of numpy arrays, so one engine step is a few array ops."""
from __future__ import annotations

import numpy as np

# Column name -> dtype. One row per request held by a replica.
COLUMNS: dict[str, type] = {
    "rid": np.int64,
    "arrival_s": np.float64,
    "prompt_tokens": np.int64,
    "output_tokens": np.int64,
    "domain": np.int64,
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
    """A growable set of rows with the columns above; rows keep insertion order.

    The columns live in two blocks, one per kind of number (float64, and int64 for the
    integers), a column a contiguous row of its block, so that adding, taking and dropping
    requests is one array operation per block, not one per column.
    """

    def __init__(self, capacity: int = 64):
        self.n = 0
        self._blocks = {np.float64: np.zeros((len(_FLOATS), capacity)),
                        np.int64: np.zeros((len(_INTS), capacity), dtype=np.int64)}
        self._views()

    def _views(self) -> None:
        floats, ints = self._blocks[np.float64], self._blocks[np.int64]
        self.cols = {name: floats[i] for i, name in enumerate(_FLOATS)}
        self.cols |= {name: ints[i] for i, name in enumerate(_INTS)}

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, name: str) -> np.ndarray:
        return self.cols[name][: self.n]

    def append(self, row: dict) -> None:
        """Add one row given as a mapping of every column to a scalar."""
        if self.n == self._blocks[np.float64].shape[1]:
            self._grow(2 * self.n)
        i = self.n
        self._blocks[np.float64][:, i] = [row[name] for name in _FLOATS]
        self._blocks[np.int64][:, i] = [row[name] for name in _INTS]
        self.n += 1

    def row(self, i: int) -> dict:
        """Row ``i`` as a mapping of column to Python scalar (in ``COLUMNS`` order)."""
        return {name: self.cols[name][i].item() for name in COLUMNS}

    def take(self, mask: np.ndarray) -> dict[str, np.ndarray]:
        """Copies of the selected rows' columns."""
        rows = mask.nonzero()[0]  # (taking by index beats a mask on the blocks' second axis)
        floats = self._blocks[np.float64].take(rows, axis=1)
        ints = self._blocks[np.int64].take(rows, axis=1)
        return {name: floats[i] for i, name in enumerate(_FLOATS)} | {name: ints[i] for i, name in enumerate(_INTS)}

    def remove(self, mask: np.ndarray) -> None:
        """Drop the selected rows, keeping the order of the rest."""
        drop, n = mask.nonzero()[0], self.n
        if drop.size == 1:  # the usual case: the rows after it move up, a copy cheaper than a gather
            i = int(drop[0])
            for block in self._blocks.values():
                block[:, i:n - 1] = block[:, i + 1:n]
            self.n = n - 1
            return
        keep = (~mask).nonzero()[0]
        for block in self._blocks.values():
            block[:, :keep.size] = block.take(keep, axis=1)
        self.n = keep.size

    def _grow(self, capacity: int) -> None:
        for kind, block in self._blocks.items():
            new = np.zeros((block.shape[0], max(capacity, 64)), dtype=kind)
            new[:, : self.n] = block[:, : self.n]
            self._blocks[kind] = new
        self._views()


_FLOATS = tuple(name for name, kind in COLUMNS.items() if kind is np.float64)
_INTS = tuple(name for name, kind in COLUMNS.items() if kind is not np.float64)
