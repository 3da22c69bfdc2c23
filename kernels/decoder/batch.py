"""Forward metadata of one ragged step, padded to a fixed tier.

Built on the host with numpy (a handful of vectorised ops), sent to the device
in one copy. Padded tokens belong to no request: their row is the all-zero
dummy row, so their keys land in the trash page 0; padded requests have
``q_len = 0`` and the attention kernel skips them.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

FIELDS = ("input_ids", "positions", "token_rows", "rows", "q_start", "q_len", "kv_len")


@dataclass(slots=True)
class Batch:
    """Device tensors of one forward (int32 unless noted).

    input_ids, positions, token_rows: ``[T]`` (input ids int64);
    rows, q_start, q_len, kv_len: ``[R]``; page_table: ``[rows+1, pages]``.
    """

    input_ids: torch.Tensor
    positions: torch.Tensor
    token_rows: torch.Tensor
    rows: torch.Tensor
    q_start: torch.Tensor
    q_len: torch.Tensor
    kv_len: torch.Tensor
    page_table: torch.Tensor
    page_size: int

    @property
    def num_tokens(self) -> int:
        """Padded token count T."""
        return self.positions.shape[0]

    def slots(self) -> torch.Tensor:
        """Cache slot of every token ``[T]`` int64 (device-side, graph-safe)."""
        pos = self.positions.long()
        page = self.page_table[self.token_rows.long(), pos // self.page_size]
        return page.long() * self.page_size + pos % self.page_size

    def copy_(self, other: "Batch") -> None:
        """Copy ``other``'s values into these (same-shape) tensors."""
        for name in FIELDS:
            getattr(self, name).copy_(getattr(other, name), non_blocking=True)


def make_batch(ids: np.ndarray, q_len: np.ndarray, kv_len: np.ndarray, rows: np.ndarray,
               pages, num_tokens: int | None = None, num_reqs: int | None = None) -> Batch:
    """Batch of requests with ``q_len[r]`` new tokens ending at position ``kv_len[r]-1``.

    ``ids``: the new tokens of all requests back to back ``[sum(q_len)]``.
    ``num_tokens`` / ``num_reqs`` pad T and R (defaults: no padding).
    """
    R = len(q_len)
    T = int(q_len.sum())
    tp, rp = num_tokens or T, num_reqs or R
    assert tp >= T and rp >= R
    q_start = np.zeros(rp, np.int64)
    q_start[1:R] = np.cumsum(q_len)[:-1]
    owner = np.repeat(np.arange(R), q_len)
    pos = np.zeros(tp, np.int64)
    pos[:T] = (kv_len - q_len)[owner] + np.arange(T) - q_start[owner]
    tok_rows = np.full(tp, pages.dummy_row, np.int64)
    tok_rows[:T] = rows[owner]
    ids_p = np.zeros(tp, np.int64)
    ids_p[:T] = ids
    req = np.zeros((4, rp), np.int64)
    req[0] = pages.dummy_row
    req[0, :R], req[2, :R], req[3, :R] = rows, q_len, kv_len
    req[1] = q_start
    flat = torch.from_numpy(np.concatenate([ids_p, pos, tok_rows, req.ravel()]))
    flat = flat.to(pages.table.device, non_blocking=True)
    ints = flat[tp:].to(torch.int32)
    parts = ints.split([tp, tp, rp, rp, rp, rp])
    return Batch(flat[:tp], *parts, page_table=pages.table, page_size=pages.page_size)
