"""Which ``schedule_verify`` implementation runs a batch of a given shape.

Pure arithmetic on the padded shape, with no torch or Triton, so that reports (the kernel
tables in docs/kernels.md) can say which path a batch takes on a machine without the
``[gpu]`` extra.
"""
from __future__ import annotations

__all__ = ["SINGLE_MAX", "PAIRWISE_MAX", "block_shape", "multi_path", "path_for"]

SINGLE_MAX = 1024  # padded R x gamma up to which one program does it all: on the H200 it won to 1,024, lost at 2,048
# Padded survivals up to which counting against every key beats ranking in chunks and merging.
# On the H200 (profiles/h200/kernels_vs_sglang.json) pairwise won at 2,048-4,096 survivals and the
# merge from 8,192 (44 against 49 us at 1,024 x 8; 54 against 61 us at 512 x 16).
PAIRWISE_MAX = 4096


def _next_pow2(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


def block_shape(R: int, gamma: int) -> tuple[int, int]:
    """``(block_r, block_g)``: the padded request and position counts a launch works on."""
    return max(16, _next_pow2(R)), max(2, _next_pow2(gamma))


def multi_path(n: int) -> str:
    """``pairwise`` or ``merge`` for ``n`` padded survivals."""
    return "pairwise" if n <= PAIRWISE_MAX else "merge"


def path_for(R: int, gamma: int) -> str:
    """Which implementation runs a batch: ``single`` (one program) up to :data:`SINGLE_MAX`
    padded survivals, else ``pairwise`` or ``merge`` (:mod:`.schedule_verify_multi`)."""
    block_r, block_g = block_shape(R, gamma)
    return "single" if block_r * block_g <= SINGLE_MAX else multi_path(block_r * block_g)
