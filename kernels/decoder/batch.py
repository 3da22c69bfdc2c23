"""Forward metadata of one ragged step, padded to a fixed tier.

Two builders: :func:`make_batch` on the host with numpy (a handful of vectorised ops,
sent to the device in one copy) when the host knows every request's token count, and
:func:`ragged_batch` on the device from device tensors (inside a CUDA graph, with no
host synchronisation) when the counts come from the GPU (verify lengths, positions
that the last step moved). Padded tokens belong to no request: their row is the
all-zero dummy row, so their keys land in the trash page 0; padded requests have
``q_len = 0`` and the attention kernel skips them.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

ALIGN = 4  # int32 elements in 16 bytes, the pointer alignment Triton specialises on
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
    # every int32 part starts on a 16-byte boundary: Triton specialises a kernel on the
    # alignment of its pointers, so parts at offsets that vary with T and R would compile
    # new binaries for the same step shape in the middle of serving
    ta, ra = -(-tp // ALIGN) * ALIGN, -(-rp // ALIGN) * ALIGN
    ints = np.zeros(2 * ta + 4 * ra, np.int64)
    ints[:tp], ints[ta:ta + tp] = pos, tok_rows
    req = ints[2 * ta:].reshape(4, ra)
    req[0] = pages.dummy_row
    req[0, :R], req[2, :R], req[3, :R] = rows, q_len, kv_len
    req[1, :rp] = q_start
    flat = torch.from_numpy(np.concatenate([ids_p, ints]))
    flat = flat.to(pages.table.device, non_blocking=True)
    ints = flat[tp:].to(torch.int32)
    parts = [ints[o:o + n] for o, n in ((0, tp), (ta, tp), (2 * ta, rp), (2 * ta + ra, rp),
                                        (2 * ta + 2 * ra, rp), (2 * ta + 3 * ra, rp))]
    return Batch(flat[:tp], *parts, page_table=pages.table, page_size=pages.page_size)


def expand(counts: torch.Tensor, n: int):
    """Ragged layout of ``n`` slots over owners holding ``counts [R]`` (int32) slots each, in
    order: ``(owner [n] int64 clamped to R - 1, index within the owner [n], valid [n] (slots
    past sum(counts) are padding), each owner's first slot [R])``. Graph-safe."""
    R = counts.shape[0]
    ends = torch.cumsum(counts, 0, dtype=torch.int32)
    first = ends - counts
    t = torch.arange(n, dtype=torch.int32, device=counts.device)
    owner = torch.searchsorted(ends, t, right=True, out_int32=True)
    own = owner.clamp(max=R - 1).long()
    return own, t - first[own], owner < R, first


def ragged_batch(q_len: torch.Tensor, start: torch.Tensor, rows: torch.Tensor, num_tokens: int,
                 src_start: torch.Tensor, pages) -> Batch:
    """Device-side :func:`make_batch`: request ``r`` runs ``q_len[r]`` tokens at positions
    ``start[r] ..`` (all ``[R]`` int tensors on the device, padded requests with
    ``q_len = 0``), the step padded to ``num_tokens``. ``input_ids`` holds, per token, its
    index into the step's flat id source: ``src_start[owner] + j`` (0 for padding).
    Graph-safe: fixed shapes, no host synchronisation."""
    q_len = q_len.to(torch.int32)
    own, j, valid, q_start = expand(q_len, num_tokens)
    positions = torch.where(valid, start[own].to(torch.int32) + j, 0)
    token_rows = torch.where(valid, rows[own].to(torch.int32), pages.dummy_row)
    src = torch.where(valid, src_start[own].long() + j, 0)
    return Batch(src, positions, token_rows, rows.to(torch.int32), q_start, q_len,
                 start.to(torch.int32) + q_len, pages.table, pages.page_size)
