"""Paged KV storage and the page allocator the target and the drafter share.

A request owns one row of ``Pages.table`` (its page ids in position order) for
its whole life. The target's cache and the drafter's cache are indexed by the
same page ids, so one table serves both. Page 0 is never handed out: padded
tokens of a CUDA-graph tier write their keys there.
"""
from __future__ import annotations

from collections import deque

import torch


class KVCache:
    """Keys and values of ``layers`` layers: ``k[l]``, ``v[l]`` are ``[slots, KVH, D]``."""

    def __init__(self, layers: int, slots: int, kv_heads: int, head_dim: int,
                 dtype: torch.dtype, device: torch.device | str):
        shape = (layers, slots, kv_heads, head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)

    def bytes_per_token(self) -> int:
        """Bytes one cached token takes over all layers (keys and values)."""
        layers, _, kvh, d = self.k.shape
        return 2 * layers * kvh * d * self.k.element_size()


class Pages:
    """Free pages, free table rows, and the device page table ``[rows + 1, pages]``.

    The last table row is all zeros: the row of padded tokens and requests.
    """

    def __init__(self, num_pages: int, page_size: int, max_rows: int, max_pages: int,
                 device: torch.device | str):
        self.page_size = page_size
        self.max_pages = max_pages
        self.capacity_tokens = (num_pages - 1) * page_size  # what one request may hold (page 0 is the trash)
        self.free = deque(range(1, num_pages))
        self.free_rows = deque(range(max_rows))
        self.dummy_row = max_rows
        self.table = torch.zeros(max_rows + 1, max_pages, dtype=torch.int32, device=device)
        self._updates: list[tuple[int, int, int]] = []

    def pages_for(self, tokens: int) -> int:
        """Pages needed to hold ``tokens`` positions."""
        return -(-tokens // self.page_size)

    def attach(self, seq) -> None:
        """Give ``seq`` a table row (it keeps it until :meth:`release`)."""
        seq.row = self.free_rows.popleft()
        seq.pages = []

    def reserve(self, seq, tokens: int) -> bool:
        """Make room for positions ``0 .. tokens-1``; False (nothing taken) when short."""
        need = self.pages_for(tokens) - len(seq.pages)
        if need <= 0:
            return True
        if need > len(self.free) or self.pages_for(tokens) > self.max_pages:
            return False
        for _ in range(need):
            page = self.free.popleft()
            self._updates.append((seq.row, len(seq.pages), page))
            seq.pages.append(page)
        return True

    def truncate(self, seq, tokens: int) -> None:
        """Return the pages past position ``tokens - 1`` (KV rollback)."""
        keep = self.pages_for(tokens)
        while len(seq.pages) > keep:
            self.free.append(seq.pages.pop())

    def release(self, seq) -> None:
        """Return all of ``seq``'s pages and its row (nothing if it holds no row)."""
        if seq.row is None:
            return
        self.truncate(seq, 0)
        self.free_rows.append(seq.row)
        seq.row = None

    def match(self, seq) -> None:
        """Give a just-attached ``seq`` the cached pages its prompt starts with: none here
        (:class:`~.prefix.PrefixPages` shares them)."""

    def share(self, seqs) -> None:
        """Offer the pages a prefill step computed to other sequences: nothing here."""

    def drop_cached(self) -> None:
        """Forget pages kept for sharing: none here."""

    def flush(self) -> None:
        """Write the page ids handed out since the last flush into the device table."""
        if not self._updates:
            return
        idx = torch.tensor(self._updates, dtype=torch.int64)
        self._updates.clear()
        idx = idx.to(self.table.device, non_blocking=True)
        self.table[idx[:, 0], idx[:, 1]] = idx[:, 2].to(torch.int32)
