"""Requests as columns of numpy arrays, so one engine step is a few array ops."""
from __future__ import annotations

from dataclasses import dataclass, make_dataclass
from operator import attrgetter

import numpy as np

from dspark_sim.serving.request import Request

# Column name -> dtype (each a field of serving.request.Request). One row per request held by a replica.
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
        views = {name: floats[i] for i, name in enumerate(_FLOATS)} | {name: ints[i] for i, name in enumerate(_INTS)}
        self.cols = TableColumns(**views)

    def __len__(self) -> int:
        return self.n

    def append(self, requests: list[Request]) -> None:
        """Add a row per request, in order (one array write per block for them all)."""
        n, end = self.n, self.n + len(requests)
        if end > self._blocks[np.float64].shape[1]:
            self._grow(2 * end)
        if len(requests) == 1:
            self._blocks[np.float64][:, n] = _floats_of(requests[0])
            self._blocks[np.int64][:, n] = _ints_of(requests[0])
        else:
            self._blocks[np.float64][:, n:end] = np.array([_floats_of(r) for r in requests]).T
            self._blocks[np.int64][:, n:end] = np.array([_ints_of(r) for r in requests], dtype=np.int64).T
        self.n = end

    def row(self, i: int) -> Request:
        """Row ``i`` as a :class:`~dspark_sim.serving.request.Request`."""
        return Request(**{name: getattr(self.cols, name)[i].item() for name in COLUMNS})

    def take(self, rows: np.ndarray) -> Rows:
        """Copies of the rows selected by a mask, or given by indices (in their order)."""
        if rows.dtype == bool:
            rows = rows.nonzero()[0]  # (taking by index beats a mask on the blocks' second axis)
        return Rows(self._blocks[np.float64].take(rows, axis=1), self._blocks[np.int64].take(rows, axis=1))

    def remove(self, mask: np.ndarray) -> None:
        """Drop the selected rows, keeping the order of the rest."""
        drop, n = mask.nonzero()[0], self.n
        if not drop.size:
            return
        first = int(drop[0])  # the rows before it stay where they are
        if drop.size == 1:  # the rows after it move up, a copy cheaper than a gather
            for block in self._blocks.values():
                block[:, first:n - 1] = block[:, first + 1:n]
            self.n = n - 1
            return
        keep = (~mask).nonzero()[0]
        for block in self._blocks.values():
            block[:, first:keep.size] = block.take(keep[first:], axis=1)
        self.n = keep.size

    def _grow(self, capacity: int) -> None:
        for kind, block in self._blocks.items():
            new = np.zeros((block.shape[0], max(capacity, 64)), dtype=kind)
            new[:, : self.n] = block[:, : self.n]
            self._blocks[kind] = new
        self._views()


TableColumns = make_dataclass("TableColumns", [(name, np.ndarray) for name in COLUMNS], frozen=True, slots=True)
TableColumns.__module__ = __name__
TableColumns.__doc__ = """A :class:`Table`'s columns, one attribute per name of :data:`COLUMNS` (``cols.rid``): views
of its blocks over their whole capacity, the first ``table.n`` entries its rows (replaced when
the table grows: read them from ``table.cols`` again after :meth:`Table.append`)."""

_FLOATS = tuple(name for name, kind in COLUMNS.items() if kind is np.float64)
_INTS = tuple(name for name, kind in COLUMNS.items() if kind is not np.float64)
_floats_of, _ints_of = attrgetter(*_FLOATS), attrgetter(*_INTS)


@dataclass(frozen=True, slots=True)
class Rows:
    """Copies of some requests' rows (:meth:`Table.take`): their float64 ``[F, N]`` and int64
    ``[I, N]`` blocks, each column of :data:`COLUMNS` an attribute (``rows.rid``, a view)."""

    floats: np.ndarray
    ints: np.ndarray

    def __len__(self) -> int:
        return self.ints.shape[1]

    def part(self, lo: int, hi: int) -> Rows:
        """Rows ``lo`` to ``hi``."""
        return Rows(self.floats[:, lo:hi], self.ints[:, lo:hi])

    @staticmethod
    def joined(parts: list[Rows]) -> Rows:
        """``parts`` one after another."""
        return Rows(np.concatenate([p.floats for p in parts], axis=1), np.concatenate([p.ints for p in parts], axis=1))


def _column(block: str, i: int, name: str) -> property:
    return property(lambda rows: getattr(rows, block)[i], doc=f"The rows' ``{name}``.")


for _i, _name in enumerate(_FLOATS):
    setattr(Rows, _name, _column("floats", _i, _name))
for _i, _name in enumerate(_INTS):
    setattr(Rows, _name, _column("ints", _i, _name))
