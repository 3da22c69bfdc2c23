"""What the GPU knows of each decoding request between steps: its anchor and where it sits.

With steps overlapped, the host schedules step n+1 before it has read step n's
accepted tokens, so the next step's inputs cannot come from the host. Each table row
keeps, on the device, the request's anchor (the last token, which the next step
feeds) and its position; a step reads them and moves them forward by its accepted
tokens. The host's copy of the tokens follows a step behind.
"""
from __future__ import annotations

import torch


class RowState:
    """``anchor [rows + 1]`` int64 and ``pos [rows + 1]`` int32 on the device (the last row
    is the dummy row of padded requests)."""

    def __init__(self, rows: int, device):
        self.anchor = torch.zeros(rows + 1, dtype=torch.int64, device=device)
        self.pos = torch.zeros(rows + 1, dtype=torch.int32, device=device)

    def put(self, seqs) -> None:
        """Set the rows of ``seqs`` from their host tokens: anchor ``tokens[-1]`` at
        position ``len(tokens) - 1`` (a prompt marked cached, a re-prefilled request)."""
        if not seqs:
            return
        host = torch.tensor([[s.row, s.tokens[-1], len(s.tokens) - 1] for s in seqs], dtype=torch.int64)
        dev = host.to(self.anchor.device, non_blocking=True)
        self.anchor[dev[:, 0]] = dev[:, 1]
        self.pos[dev[:, 0]] = dev[:, 2].to(torch.int32)

    def gather(self, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(anchor, pos)`` of ``rows [R]`` (graph-safe)."""
        return self.anchor[rows], self.pos[rows]

    def commit(self, rows: torch.Tensor, pos: torch.Tensor, anchor: torch.Tensor) -> None:
        """Write ``pos``/``anchor`` ``[R]`` at ``rows [R]`` (padded entries name the dummy row)."""
        self.pos[rows] = pos.to(torch.int32)
        self.anchor[rows] = anchor.to(torch.int64)
