"""Fused MoE (routing, alignment, grouped GEMM) against the per-expert loop reference,
in Triton's interpreter at small sizes; on a GPU with ``TRITON_INTERPRET=0`` too."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from dspark_sim.kernels.decoder.moe import (align, block_m, fused_moe, moe_ref, route_softmax,  # noqa: E402
                                             route_sqrtsoftplus)

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
# fp32 tiles multiply in TF32 on a GPU (Triton's default), exactly in the interpreter
TOL = {"rtol": 3e-3, "atol": 3e-3} if DEVICE == "cuda" else {"rtol": 2e-4, "atol": 2e-4}


def case(tokens, experts, k, hidden=32, inter=16, dtype=torch.float32, seed=0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(tokens, hidden, generator=gen).to(DEVICE, dtype)
    gate_up = (torch.randn(experts, 2 * inter, hidden, generator=gen) * 0.2).to(DEVICE, dtype)
    down = (torch.randn(experts, hidden, inter, generator=gen) * 0.2).to(DEVICE, dtype)
    router = torch.randn(experts, hidden, generator=gen).to(DEVICE, dtype)
    weights, ids = route_softmax(x @ router.T, k)
    return x, gate_up, down, weights, ids


@pytest.mark.parametrize("tokens, experts, k", [(1, 4, 2), (5, 8, 2), (33, 8, 3), (64, 16, 4), (7, 16, 1)])
def test_fused_moe_matches_the_loop(tokens, experts, k):
    x, gate_up, down, weights, ids = case(tokens, experts, k)
    got = fused_moe(x, gate_up, down, weights, ids, "triton")
    want = moe_ref(x, gate_up, down, weights, ids)
    torch.testing.assert_close(got, want, **TOL)


# Triton 3.9's interpreter multiplies bf16 tiles wrongly (tl.dot): half precision there
HALF = torch.bfloat16 if torch.cuda.is_available() else torch.float16


def test_fused_moe_half_precision():
    x, gate_up, down, weights, ids = case(24, 8, 2, dtype=HALF, seed=3)
    got = fused_moe(x, gate_up, down, weights, ids, "triton").float()
    want = moe_ref(x.float(), gate_up.float(), down.float(), weights, ids)
    torch.testing.assert_close(got, want, rtol=3e-2, atol=3e-2)


def test_every_token_routed_to_one_expert():
    x, gate_up, down, weights, _ = case(20, 8, 2)
    ids = torch.tensor([[3, 5]] * 20, device=DEVICE)  # two experts carry every token
    torch.testing.assert_close(fused_moe(x, gate_up, down, weights, ids, "triton"),
                               moe_ref(x, gate_up, down, weights, ids), **TOL)


@pytest.mark.parametrize("impl", ["triton", "torch"])
@pytest.mark.parametrize("ranks", [2, 4])
def test_each_rank_runs_its_experts_and_the_ranks_sum_to_the_whole(impl, ranks):
    """Expert parallel: the tensors of experts ``r E/N ..`` alone, pairs routed elsewhere dropped
    (blocks of the drop bucket skipped); summed over ranks, the whole layer."""
    x, gate_up, down, weights, ids = case(33, 8, 3)
    share = 8 // ranks
    parts = [fused_moe(x, gate_up[r * share:(r + 1) * share], down[r * share:(r + 1) * share], weights, ids,
                       impl, first_expert=r * share) for r in range(ranks)]
    torch.testing.assert_close(sum(parts), moe_ref(x, gate_up, down, weights, ids), **TOL)
    mine = (ids >= 0) & (ids < share)  # rank 0's pairs alone, by the loop on their experts only
    want = moe_ref(x, gate_up[:share], down[:share], torch.where(mine, weights, 0), torch.where(mine, ids, 0))
    torch.testing.assert_close(parts[0], want, **TOL)


def test_align_layout():
    ids = torch.tensor([[2, 0], [2, 1], [0, 2]], device=DEVICE)
    bm = 4
    sorted_ids, block_expert, used = align(ids, 3, bm)
    assert sorted_ids.numel() % bm == 0 and sorted_ids.numel() >= 6 + 3 * (bm - 1)
    assert int(used) == 12  # three experts, one block each
    rows = sorted_ids.tolist()
    flat = ids.flatten().tolist()
    for b in range(int(used) // bm):
        block = [p for p in rows[b * bm:(b + 1) * bm] if p < 6]
        assert all(flat[p] == int(block_expert[b]) for p in block)
        assert block == sorted(block)  # stable: pairs keep token order within an expert
    assert sorted(p for p in rows if p < 6) == list(range(6))
    assert all(p == 6 for p in rows[int(used):])


def test_sqrtsoftplus_routing():
    logits = torch.tensor([[0.0, 1.0, 2.0, -1.0]])
    bias = torch.tensor([0.0, 0.0, -5.0, 0.0])
    weights, ids = route_sqrtsoftplus(logits, bias, 2, 1.5)
    assert set(ids[0].tolist()) == {0, 1}  # expert 2 scores highest but its bias pushes it out
    assert float(weights.sum()) == pytest.approx(1.5)


def test_block_sizes():
    assert block_m(1, 8, 128) == 16 and block_m(2048, 8, 128) == 64 and block_m(512, 8, 128) == 32


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a GPU")
def test_fused_moe_replays_in_a_cuda_graph():
    x, gate_up, down, weights, ids = case(48, 16, 4, dtype=torch.bfloat16)
    static = [t.clone() for t in (x, weights, ids)]
    fused_moe(*static[:1], gate_up, down, *static[1:])  # compile outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fused_moe(static[0], gate_up, down, static[1], static[2])
    x2, _, _, w2, i2 = case(48, 16, 4, dtype=torch.bfloat16, seed=7)
    for dst, src in zip(static, (x2, w2, i2)):
        dst.copy_(src)
    graph.replay()
    torch.testing.assert_close(out.float(), moe_ref(x2, gate_up, down, w2, i2).float(), rtol=3e-2, atol=3e-2)


@pytest.mark.parametrize("tokens, experts, k, bm", [(1, 8, 2, 16), (33, 9, 3, 16), (64, 16, 4, 32), (300, 256, 6, 16),
                                                    (7, 129, 1, 64)])
def test_one_launch_alignment_is_the_torch_one(tokens, experts, k, bm):
    """The fused alignment (one program) gives the torch ops' tensors exactly, stable order included."""
    gen = torch.Generator().manual_seed(tokens)
    ids = torch.stack([torch.randperm(experts, generator=gen)[:k] for _ in range(tokens)]).to(DEVICE)
    for want, got in zip(align(ids, experts, bm), align(ids, experts, bm, "triton")):
        assert torch.equal(want.to(torch.int32), got)


@pytest.mark.parametrize("experts, k", [(8, 2), (256, 6), (128, 8), (9, 3)])
def test_one_launch_routing_is_the_torch_one(experts, k):
    """Softmax (Qwen3) and sqrt-softplus with bias (V4) routing in one kernel: the same experts in
    the same order and the same weights as the torch ops (logits wide enough to reach softplus's ends)."""
    gen = torch.Generator().manual_seed(experts)
    logits = (torch.randn(13, experts, generator=gen) * 12).to(DEVICE)
    bias = (torch.randn(experts, generator=gen) * 0.5).to(DEVICE)
    for route in (lambda impl: route_softmax(logits, k, impl),
                  lambda impl: route_sqrtsoftplus(logits, bias, k, 1.5, impl)):
        (w0, i0), (w1, i1) = route("torch"), route("triton")
        assert torch.equal(i0, i1)
        torch.testing.assert_close(w1, w0, rtol=1e-5, atol=1e-6)
