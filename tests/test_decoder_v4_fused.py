"""DeepSeek-V4's fused hyper-connection, merge and RoPE kernels against the torch path,
and the launches a V4 layer makes with them (the decode step was launch-bound without)."""
from __future__ import annotations

import os

import pytest

torch = pytest.importorskip("torch")
os.environ.setdefault("TRITON_INTERPRET", "1")

from dspark_sim.kernels.decoder.v4 import HyperConnection, RopeTable, merge  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
# fp32 on a GPU: the GEMM before the mix may run in TF32
TOL = {"rtol": 2e-3, "atol": 2e-3} if DEVICE == "cuda" else {"rtol": 1e-5, "atol": 1e-5}


def _hc(final: bool, m=4, h=48, iters=5):
    g = torch.Generator().manual_seed(1)
    hc = HyperConnection(m, h, iters, 1e-6, final=final)
    with torch.no_grad():
        for p in hc.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.3)
    return hc.to(DEVICE), torch.randn(5, m, h, generator=g).to(DEVICE)


@pytest.mark.parametrize("final", [False, True])
def test_hc_mix_matches_torch(final):
    hc, streams = _hc(final)
    want, got = hc(streams, "torch"), hc(streams, "triton")
    for w, g in zip(want if not final else [want], got if not final else [got]):
        torch.testing.assert_close(g, w, **TOL)


def test_hc_comb_is_doubly_stochastic_after_sinkhorn():
    hc, streams = _hc(False, iters=20)
    _, comb, _ = hc(streams, "triton")
    torch.testing.assert_close(comb.sum(-2), torch.ones(5, 4, device=DEVICE), atol=1e-4, rtol=0)
    torch.testing.assert_close(comb.sum(-1), torch.ones(5, 4, device=DEVICE), atol=2e-2, rtol=0)


def test_hc_merge_matches_torch():
    hc, streams = _hc(False)
    post, comb, x = hc(streams, "torch")
    y = torch.randn_like(x)
    torch.testing.assert_close(merge(streams, y, post, comb, "triton"), merge(streams, y, post, comb, "torch"), **TOL)


@pytest.mark.parametrize("norm,sign", [(None, 1.0), (1e-6, 1.0), (None, -1.0)])
@pytest.mark.parametrize("shape", [(6, 32), (6, 3, 32)])
def test_rope_matches_torch(norm, sign, shape):
    table = RopeTable(16, 10000.0, 64, DEVICE)
    x = torch.randn(shape, generator=torch.Generator().manual_seed(2)).to(DEVICE)
    pos = torch.tensor([0, 1, 5, 17, 40, 63], device=DEVICE)
    a, b = x.clone(), x.clone()
    table.apply_(a, pos, sign, "torch", norm)
    table.apply_(b, pos, sign, "triton", norm)
    torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-5)  # no product: exact up to the order of fp32 ops


def test_rope_there_and_back():
    table = RopeTable(16, 10000.0, 64, DEVICE)
    x = torch.randn(4, 2, 32, device=DEVICE)
    y = x.clone()
    pos = torch.tensor([3, 9, 27, 60], device=DEVICE)
    table.apply_(y, pos, 1.0, "triton")
    assert not torch.allclose(y, x)
    table.apply_(y, pos, -1.0, "triton")
    torch.testing.assert_close(y, x, rtol=1e-5, atol=1e-5)
