"""The DeepSeek-V4 target in the decoder: cached steps against full recomputation, the
kernels against the torch path, and one attention layer against a from-scratch reference."""
from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from dspark_sim.catalog.v4 import CSA  # noqa: E402
from dspark_sim.kernels.decoder.tiny import generate, greedy_reference, tiny_decoder, tiny_v4_spec  # noqa: E402

LONG = 150  # past one HCA window of 128


def v4_decoder(attention="torch", **over):
    return tiny_decoder("none", spec=tiny_v4_spec(), agreeable=False, max_model_len=LONG + 40,
                        attention=attention, **over)


def prompt(n, seed=0):
    return np.random.default_rng(seed).integers(0, 32, n).tolist()


def test_cached_decode_matches_full_recompute():
    """Prefill in chunks, then decode through the rings and entry slabs: the greedy tokens of
    a full forward over the whole sequence at every step."""
    dec = v4_decoder(max_batched_tokens=64)  # prefill in chunks of 64
    p = prompt(LONG - 4)
    assert generate(dec, [p], max_tokens=6) == [greedy_reference(dec, p, 6)]


def test_triton_kernels_decode_like_torch():
    prompts = [prompt(131, 1), prompt(9, 2)]
    assert generate(v4_decoder("triton"), prompts, max_tokens=2) == generate(v4_decoder(), prompts, max_tokens=2)


def test_v4_needs_method_none():
    from dspark_sim.errors import InputError

    with pytest.raises(InputError, match="without a drafter"):
        tiny_decoder("dspark", spec=tiny_v4_spec(), agreeable=False)


def test_slice_spec():
    from dspark_sim.catalog import get_model

    flash = get_model("deepseek-v4-flash").sliced(4)
    assert flash.num_layers == 4 and flash.v4.compress_ratios == (4, 128, 4, 128)
    qwen = get_model("qwen3-30b-a3b").sliced(2)
    assert qwen.num_layers == 2 and qwen.num_experts == 128


# -- one CSA attention layer, from scratch ------------------------------------------------------
def rope(x, positions, theta, dim):
    """Interleaved rotation of the trailing ``dim`` channels of ``x [..., D]`` at ``positions``."""
    inv = 1.0 / theta ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    ang = positions.double()[:, None] * inv[None, :]
    c, s = ang.cos().float(), ang.sin().float()
    while c.dim() < x.dim():
        c, s = c.unsqueeze(1), s.unsqueeze(1)
    r = x[..., -dim:].unflatten(-1, (dim // 2, 2))
    a, b = r[..., 0], r[..., 1]
    return torch.cat([x[..., :-dim], torch.stack([a * c - b * s, b * c + a * s], -1).flatten(-2)], -1)


def rms(x, w=None, eps=1e-6):
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return y * w if w is not None else y


def pool(vals, gates, bias, w, ratio, series, dim):
    """Compressed entry ``w`` from all positions' projections (overlapping for series 2)."""
    rows = []
    for half in ((0, 1) if series == 2 else (1,)):
        start = (w - 1 + half) * ratio
        col = (half - (2 - series)) * dim
        for j in range(ratio):
            p = start + j
            if p < 0:
                continue
            rows.append((vals[p, col:col + dim], gates[p, col:col + dim] + bias[j, col:col + dim]))
    v, g = torch.stack([r[0] for r in rows]), torch.stack([r[1] for r in rows])
    return (g.softmax(0) * v).sum(0)


def reference_attention(layer, x, theta):
    """The CSA layer's output for every position of ``x [N, hidden]``, from the whole sequence."""
    v = layer.v
    N, d = x.shape[0], v.head_dim
    pos = torch.arange(N)
    parts = (x @ layer.w_in.T).split(layer.widths, dim=-1)
    q_res = rms(parts[0], layer.q_norm)
    q = rope(rms((q_res @ layer.q_b.T).view(N, v.num_heads, d)), pos, theta, v.rope_head_dim)
    kv = rope(rms(parts[1], layer.kv_norm), pos, theta, v.rope_head_dim)
    comp_buf, idx_buf = parts[2], parts[3]

    def entries(buf, comp, dim):
        out = [rms(pool(buf[:, :2 * dim], buf[:, 2 * dim:], comp.bias, w, CSA, 2, dim), comp.norm)
               for w in range(N // CSA)]
        return rope(torch.stack(out), torch.arange(len(out)) * CSA, theta, v.rope_head_dim)
    comp, keys = entries(comp_buf, layer.comp, d), entries(idx_buf, layer.index, v.index_head_dim)
    iq = rope((q_res @ layer.index_q.T).view(N, v.index_heads, -1), pos, theta, v.rope_head_dim)
    iw = parts[4] * (v.index_heads ** -0.5 * v.index_head_dim ** -0.5)
    out = []
    for t in range(N):
        n = (t + 1) // CSA
        chosen = torch.zeros(0, dtype=torch.long)
        if n:
            score = ((iq[t] @ keys[:n].T).clamp(min=0) * iw[t][:, None]).sum(0)
            chosen = score.topk(min(v.index_topk, n)).indices
        k = torch.cat([kv[max(0, t - v.sliding_window + 1):t + 1], comp[chosen]])
        s = torch.cat([q[t] @ k.T / math.sqrt(d), layer.sinks[:, None]], 1).softmax(-1)[:, :-1]
        out.append(s @ k)
    o = torch.stack(out)
    o = torch.cat([o[..., :-v.rope_head_dim], rope(o, -pos, theta, v.rope_head_dim)[..., -v.rope_head_dim:]], -1)
    grouped = torch.einsum("ngi,gio->ngo", o.view(N, v.o_groups, -1), layer.o_a)
    return grouped.reshape(N, -1) @ layer.o_b.T


@pytest.mark.parametrize("attention", ["torch", "triton"])
def test_csa_layer_matches_a_from_scratch_reference(attention):
    """A prefill chunk then two verify windows through one CSA layer equal the layer computed
    position by position from the whole sequence."""
    dec = tiny_decoder("none", spec=tiny_v4_spec().sliced(1), agreeable=False, max_model_len=64,
                       attention=attention)
    target = dec.target
    layer = target.layers[0].attn
    assert layer.ratio == CSA
    with torch.no_grad():
        layer.sinks.normal_()
    N = 41
    x = torch.randn(N, 64, generator=torch.Generator().manual_seed(5))
    want = reference_attention(layer, x, 160000.0)
    from dspark_sim.kernels.decoder.batch import make_batch
    from dspark_sim.kernels.decoder.sequence import Sequence

    seq = Sequence(0, [0] * N, 1)
    dec.pages.attach(seq)
    assert dec.pages.reserve(seq, N)
    dec.pages.flush()
    got = []
    for lo, hi in ((0, 30), (30, 36), (36, N)):  # a chunk, then two verify-like windows
        n = np.array([hi - lo])
        batch = make_batch(np.zeros(hi - lo, np.int64), n, np.array([hi]), np.array([seq.row]), dec.pages)
        with torch.no_grad():
            got.append(layer(x[lo:hi], batch, batch.slots(), dec.cache.k[0], target.ropes, attention))
    torch.testing.assert_close(torch.cat(got), want, rtol=2e-4, atol=2e-4)
