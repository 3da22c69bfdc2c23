"""Block-scaled FP8 experts: the quantisers and the fused MoE's FP8 path against a from-scratch
reference that quantises the same way (Triton interpreter at small sizes; on a GPU too)."""
from __future__ import annotations

import dataclasses
import os

import pytest

torch = pytest.importorskip("torch")
os.environ.setdefault("TRITON_INTERPRET", "1")

from dspark_sim.kernels.decoder.moe import fused_moe, route_softmax  # noqa: E402
from dspark_sim.kernels.decoder.moe_fp8 import FP8, quantize_blocks, quantize_moe_, quantize_rows  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
G = 16  # block edge at test sizes (the checkpoints': 128)
G_DOT = 32 if DEVICE == "cuda" else G  # the fused kernel's block edge is its dot's K: >= 32 on a GPU
TOL = {"rtol": 1e-3, "atol": 1e-3} if DEVICE == "cuda" else {"rtol": 1e-4, "atol": 1e-4}


def qdq_rows(x, g=G):
    """Per row and group of ``g``: amax / 448 scale, FP8 and back (fp32)."""
    v = x.float().view(x.shape[0], -1, g)
    s = v.abs().amax(-1, keepdim=True).clamp(min=1e-10) / 448.0
    return ((v / s).clamp(-448, 448).to(FP8).float() * s).view(x.shape)


def case(tokens, experts, k, hidden=64, inter=32, seed=0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(tokens, hidden, generator=gen).to(DEVICE)
    gate_up = (torch.randn(experts, 2 * inter, hidden, generator=gen) * 0.2).to(DEVICE)
    down = (torch.randn(experts, hidden, inter, generator=gen) * 0.2).to(DEVICE)
    weights, ids = route_softmax(x @ torch.randn(experts, hidden, generator=gen).to(DEVICE).T, k)
    return x, gate_up, down, weights, ids


def reference(x, gu, dn, weights, ids):
    """Every (token, expert) pair through FP8-rounded activations and dequantised blocks."""
    out = torch.zeros_like(x)
    wg, wd = gu.dequant(), dn.dequant()
    for t in range(x.shape[0]):
        for j in range(ids.shape[1]):
            e = int(ids[t, j])
            gate, up = (qdq_rows(x[t:t + 1], G_DOT) @ wg[e].T).chunk(2, -1)
            h = torch.nn.functional.silu(gate) * up
            out[t] += weights[t, j] * (qdq_rows(h, G_DOT) @ wd[e].T)[0]
    return out


def test_blocks_round_trip():
    w = torch.randn(3, 32, 48) * torch.logspace(-3, 1, 48)  # columns of very different scale
    b = quantize_blocks(w, G)
    assert b.q.dtype == FP8 and b.scale.shape == (3, 2, 3)
    err = (b.dequant() - w).abs() / w.abs().view(3, 2, G, 3, G).amax((2, 4)).repeat_interleave(G, 1) \
        .repeat_interleave(G, 2)
    assert float(err.max()) <= 2 ** -4  # E4M3: 3 mantissa bits, relative to the block's amax
    with pytest.raises(ValueError, match="multiples of 16"):
        quantize_blocks(torch.randn(1, 24, 32), G)


def test_rows_quantised_per_group():
    x = torch.randn(5, 64, device=DEVICE) * torch.tensor([1e-3, 1.0, 30.0, 0.1], device=DEVICE).repeat_interleave(16)
    q, s = quantize_rows(x, G)
    assert q.dtype == FP8 and s.shape == (5, 4)
    back = q.float().view(5, 4, G) * s[..., None]
    assert torch.equal(s, x.view(5, 4, G).abs().amax(-1) / 448.0)
    # round to nearest, one FP8 step at most apart from torch's rounding (the interpreter's subnormals)
    step = x.view(5, 4, G).abs().amax(-1, keepdim=True) * 2 ** -4
    assert bool(((back - qdq_rows(x).view(5, 4, G)).abs() <= step).all())
    assert float((back.view(5, 64) == qdq_rows(x)).float().mean()) > 0.95


@pytest.mark.parametrize("tokens, experts, k", [(1, 4, 2), (9, 8, 2), (40, 8, 3)])
def test_fused_moe_fp8_matches_reference(tokens, experts, k):
    x, gate_up, down, weights, ids = case(tokens, experts, k)
    gu, dn = quantize_blocks(gate_up, G_DOT), quantize_blocks(down, G_DOT)
    got = fused_moe(x, gu, dn, weights, ids, "triton")
    torch.testing.assert_close(got, reference(x, gu, dn, weights, ids), **TOL)
    full = fused_moe(x, gate_up, down, weights, ids, "triton")  # the same layer unquantised
    assert float((got - full).norm() / full.norm()) < 0.08


def test_quantised_module_runs_both_paths():
    from dspark_sim.kernels.decoder.layers import Moe
    from dspark_sim.kernels.decoder.tiny import tiny_spec

    # the experts' widths a multiple of the block edge (a GPU's FP8 dot takes K >= 32)
    spec = dataclasses.replace(tiny_spec(moe=True), moe_intermediate_size=max(16, G_DOT))
    moe = Moe(spec, torch.float32)
    gen = torch.Generator().manual_seed(4)
    with torch.no_grad():
        for p in moe.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.3)
    moe = moe.to(DEVICE)
    x = torch.randn(6, spec.hidden_size, generator=gen).to(DEVICE)
    want = moe(x, "triton")
    quantize_moe_(moe, G_DOT)
    assert not isinstance(moe.gate_up, torch.Tensor) and moe.gate_up.q.dtype == FP8
    fast, ref = moe(x, "triton"), moe(x, "torch")
    assert float((fast - want).norm() / want.norm()) < 0.08
    assert float((ref - want).norm() / want.norm()) < 0.08
