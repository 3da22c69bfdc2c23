"""DeepSeek-V4 attention kernels against their torch references (Triton interpreter, fp32)."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from dspark_sim.kernels.decoder.batch import make_batch  # noqa: E402
from dspark_sim.kernels.decoder.cache import Pages  # noqa: E402
from dspark_sim.kernels.decoder.v4_kernels import compress, index_scores, sparse_attention  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
# fp32 tiles multiply in TF32 on a GPU (Triton's default), exactly in the interpreter
TOL = {"rtol": 3e-3, "atol": 3e-3} if DEVICE == "cuda" else {"rtol": 1e-4, "atol": 1e-4}
# index scores sum 16 heads of TF32 dot products of scores near 10-30: TF32's 2^-11 rounding of
# both operands leaves absolute errors up to ~1e-2 there (0.014 seen on an H200)
INDEX_TOL = {"rtol": 1e-2, "atol": 3e-2} if DEVICE == "cuda" else TOL


def step(q_len, kv_len, rows=(0, 1), pages_each=40, page_size=4):
    """A Batch of requests with ``q_len`` new tokens ending at ``kv_len``, pages given."""
    pages = Pages(1 + len(rows) * pages_each, page_size, 4, pages_each, DEVICE)
    for r in rows:
        pages.table[r, :pages_each] = torch.arange(1 + r * pages_each, 1 + (r + 1) * pages_each,
                                                   dtype=torch.int32)
    q_len, kv_len = np.array(q_len), np.array(kv_len)
    return make_batch(np.zeros(int(q_len.sum()), np.int64), q_len, kv_len, np.array(rows), pages)


@pytest.mark.parametrize("ratio, series", [(4, 2), (4, 1), (128, 1)])
def test_compress_matches_reference(ratio, series):
    gen = torch.Generator().manual_seed(ratio + series)
    dim, ring_size = 16, 256 if ratio == 128 else 32
    # request 0: a verify window crossing a boundary; request 1: a prefill chunk of several windows
    batch = step([6, 40 if ratio == 4 else 140], [131, 400])
    T = batch.positions.shape[0]
    buf = torch.randn(T, 2 * series * dim, generator=gen).to(DEVICE)
    ring = torch.randn(5 * ring_size, 2 * series * dim, generator=gen).to(DEVICE)
    bias = torch.randn(ratio, series * dim, generator=gen).to(DEVICE)
    args = (buf, ring, bias, batch.positions, batch.token_rows, ratio, series, dim, ring_size)
    got, want = compress(*args, impl="triton"), compress(*args, impl="torch")
    done = (batch.positions.long() + 1) % ratio == 0
    assert int(done.sum()) >= 2
    torch.testing.assert_close(got[done], want[done], **TOL)


def test_index_scores_match_reference():
    gen = torch.Generator().manual_seed(1)
    heads, dim, ratio, max_entries = 16, 16, 4, 130
    batch = step([3, 5], [9, 501])
    T = batch.positions.shape[0]
    q = torch.randn(T, heads, dim, generator=gen).to(DEVICE)
    w = torch.randn(T, heads, generator=gen).to(DEVICE)
    keys = torch.randn(5 * max_entries + 1, dim, generator=gen).to(DEVICE)
    args = (q, w, keys, batch.positions, batch.token_rows, ratio, max_entries)
    got, want = index_scores(*args, impl="triton"), index_scores(*args, impl="torch")
    torch.testing.assert_close(got, want, **INDEX_TOL)
    assert torch.isinf(got[0, 3:]).all() and torch.isfinite(got[-1, :125]).all()


@pytest.mark.parametrize("mode", ["window", "topk", "all"])
def test_sparse_attention_matches_reference(mode):
    gen = torch.Generator().manual_seed(2)
    heads, dim, window, ratio, max_entries = 20, 16, 8, 4, 40
    batch = step([3, 2], [7, 150])
    T = batch.positions.shape[0]
    q = torch.randn(T, heads, dim, generator=gen).to(DEVICE)
    k_cache = torch.randn(1 + 2 * 40 * 4, 1, dim, generator=gen).to(DEVICE)
    comp = torch.randn(5 * max_entries + 1, dim, generator=gen).to(DEVICE) if mode != "window" else None
    sinks = torch.randn(heads, generator=gen).to(DEVICE)
    topk = None
    if mode == "topk":
        topk = torch.randint(0, 38, (T, 6), generator=gen).to(DEVICE)
        topk[0, 2:] = -1  # an early token has fewer entries than k
    args = (q, k_cache, comp, topk, sinks, batch, window, ratio, max_entries)
    torch.testing.assert_close(sparse_attention(*args, impl="triton"), sparse_attention(*args, impl="torch"),
                               **TOL)


@pytest.mark.skipif(DEVICE != "cuda", reason="bf16 tiles: on a GPU (the interpreter multiplies them wrongly)")
def test_sparse_attention_bf16_at_v4_width():
    """V4-Flash's shapes: 64 heads of 512, a top-512 list, bf16 as the profiler runs them."""
    gen = torch.Generator().manual_seed(4)
    heads, dim, window, ratio, max_entries = 64, 512, 128, 4, 1100
    batch = step([4, 1], [4000, 900], pages_each=300, page_size=16)
    T = batch.positions.shape[0]
    q = torch.randn(T, heads, dim, generator=gen).to(DEVICE, torch.bfloat16)
    k_cache = torch.randn(1 + 2 * 300 * 16, 1, dim, generator=gen).to(DEVICE, torch.bfloat16)
    comp = torch.randn(5 * max_entries + 1, dim, generator=gen).to(DEVICE, torch.bfloat16)
    sinks = torch.randn(heads, generator=gen).to(DEVICE)
    topk = torch.randint(0, 225, (T, 512), generator=gen).to(DEVICE)
    args = (q, k_cache, comp, topk, sinks, batch, window, ratio, max_entries)
    torch.testing.assert_close(sparse_attention(*args, impl="triton").float(),
                               sparse_attention(*args, impl="torch").float(), rtol=2e-2, atol=2e-2)
