"""A block of consecutive requests as parallel numpy arrays (the unit every workload streams)."""
from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, slots=True)
class RequestChunk:
    """Consecutive requests of one stream; all arrays have the same length ``n``.

    arrival_s: float64 [n], seconds after the stream's first request (so the
        first chunk starts at 0.0), non-decreasing across the whole stream.
    prompt_tokens: int64 [n], prompt length, >= 1.
    output_tokens: int64 [n], tokens to generate, >= 1.
    hash_ids: Mooncake only: per request, the ids of its 512-token prefix
        blocks (requests sharing a prefix share ids); None for other sources.
    """

    arrival_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    hash_ids: list[list[int]] | None = None

    def __post_init__(self) -> None:
        n = self.arrival_s.shape[0] if self.arrival_s.ndim == 1 else -1
        for name, dtype in (("arrival_s", np.float64), ("prompt_tokens", np.int64),
                            ("output_tokens", np.int64)):
            arr = getattr(self, name)
            if not isinstance(arr, np.ndarray) or arr.dtype != dtype or arr.shape != (n,):
                raise ValueError(f"RequestChunk.{name} must be a 1-D {np.dtype(dtype).name} array "
                                 f"of the same length as arrival_s")
        if self.hash_ids is not None and len(self.hash_ids) != n:
            raise ValueError("RequestChunk.hash_ids must have one list per request")

    def __len__(self) -> int:
        return self.arrival_s.shape[0]

    def __getitem__(self, rows: slice) -> RequestChunk:
        """The requests in the slice ``rows`` (views, not copies)."""
        if not isinstance(rows, slice):
            raise TypeError("RequestChunk takes a slice of rows, e.g. chunk[:10]")
        hash_ids = None if self.hash_ids is None else self.hash_ids[rows]
        return RequestChunk(self.arrival_s[rows], self.prompt_tokens[rows], self.output_tokens[rows],
                            hash_ids)

    @staticmethod
    def concat(chunks: Iterable[RequestChunk]) -> RequestChunk:
        """All requests of ``chunks`` in one chunk (empty arrays for no chunks)."""
        chunks = list(chunks)
        if not chunks:
            empty_i = np.zeros(0, np.int64)
            return RequestChunk(np.zeros(0, np.float64), empty_i, empty_i.copy())
        hash_ids = None
        if all(c.hash_ids is not None for c in chunks):
            hash_ids = [h for c in chunks for h in c.hash_ids]
        return RequestChunk(np.concatenate([c.arrival_s for c in chunks]),
                            np.concatenate([c.prompt_tokens for c in chunks]),
                            np.concatenate([c.output_tokens for c in chunks]), hash_ids)


def rechunk(chunks: Iterable[RequestChunk], rows: int) -> Iterator[RequestChunk]:
    """The same requests regrouped into chunks of exactly ``rows`` (the last may be shorter)."""
    carry: RequestChunk | None = None
    for chunk in chunks:
        if carry is not None:
            chunk = RequestChunk.concat([carry, chunk])
        full = len(chunk) // rows * rows
        for start in range(0, full, rows):
            yield chunk[start:start + rows]
        carry = chunk[full:] if full < len(chunk) else None
    if carry is not None:
        yield carry


def arriving_by(chunks: Iterable[RequestChunk], until_s: float) -> Iterator[RequestChunk]:
    """The requests of ``chunks`` that arrive at or before ``until_s``: the stream up to its first
    later arrival (arrival times never decrease), which it does not read past."""
    for chunk in chunks:
        late = int(np.searchsorted(chunk.arrival_s, until_s, side="right"))
        if late:
            yield chunk if late == len(chunk) else chunk[:late]
        if late < len(chunk):
            return
