"""The decoder's own Triton kernels against their torch references (interpreter on CPU)."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

from dspark_sim.kernels.decoder.attention import attention, attention_ref, plan  # noqa: E402
from dspark_sim.kernels.decoder.batch import make_batch  # noqa: E402
from dspark_sim.kernels.decoder.cache import Pages  # noqa: E402
from dspark_sim.kernels.decoder.fused import add_rms_norm, norm_rope_, silu_mul  # noqa: E402


class _Seq:
    row = None
    pages = None


@pytest.mark.parametrize("heads,kvh,q_lens,ctx,causal", [
    (4, 2, [3, 1, 5], 40, True),     # verify windows, split keys
    (6, 2, [1, 1], 70, True),        # decode, a group of 3 (padded to 4)
    (4, 4, [37], 37, True),          # a prefill chunk spanning several query tiles
    (4, 2, [4, 4], 25, False),       # the DSpark block: bidirectional
])
def test_attention_matches_reference(heads, kvh, q_lens, ctx, causal):
    torch.manual_seed(0)
    pages = Pages(64, 4, 4, 32, "cpu")
    seqs = [_Seq() for _ in q_lens]
    for s in seqs:
        pages.attach(s)
        assert pages.reserve(s, ctx)
    pages.flush()
    q_len = np.array(q_lens)
    kv_len = np.array([ctx - i for i in range(len(q_lens))])
    batch = make_batch(np.zeros(q_len.sum(), np.int64), q_len, kv_len, np.array([s.row for s in seqs]),
                       pages)
    qkv = torch.randn(int(q_len.sum()), heads + 1, 16)  # a strided view, as in the layer
    q = qkv[:, :heads]
    k, v = torch.randn(64 * 4, kvh, 16), torch.randn(64 * 4, kvh, 16)
    shape = plan(int(q_len.max()), len(q_lens), kvh, heads // kvh, num_sms=2, causal=causal)
    out = attention(q, k, v, batch, shape, "triton")
    torch.testing.assert_close(out, attention_ref(q, k, v, batch, causal), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("q_lens,pad", [([3, 1, 5], None), ([7], None), ([2, 2, 1], (13, 7)), ([1] * 6, None)])
def test_batch_parts_are_16_byte_aligned_and_hold_their_values(q_lens, pad):
    # Triton specialises on pointer alignment: parts whose offsets vary with T and R would
    # compile new kernels mid-serving
    pages = Pages(64, 4, 8, 32, "cpu")
    seqs = [_Seq() for _ in q_lens]
    for s in seqs:
        pages.attach(s)
        assert pages.reserve(s, 20)
    q_len = np.array(q_lens)
    kv_len = q_len + 3
    rows = np.array([s.row for s in seqs])
    ids = np.arange(1, q_len.sum() + 1)
    batch = make_batch(ids, q_len, kv_len, rows, pages, *(pad or ()))
    for name in ("input_ids", "positions", "token_rows", "rows", "q_start", "q_len", "kv_len"):
        assert getattr(batch, name).data_ptr() % 16 == 0, name
    T, R = int(q_len.sum()), len(q_lens)
    assert batch.input_ids[:T].tolist() == ids.tolist()
    assert batch.q_len[:R].tolist() == q_lens and batch.kv_len[:R].tolist() == kv_len.tolist()
    assert batch.rows[:R].tolist() == rows.tolist()
    assert batch.q_start[:R].tolist() == [0, *np.cumsum(q_lens)[:-1].tolist()]
    assert batch.positions[:T].tolist() == sum(([k + 3 - n + i for i in range(n)] for n, k in
                                                zip(q_lens, q_len.tolist())), [])
    if pad:
        assert batch.num_tokens == pad[0] and batch.rows.shape[0] == pad[1]
        assert batch.q_len[R:].tolist() == [0] * (pad[1] - R)


def test_fused_elementwise_match_torch():
    torch.manual_seed(0)
    x, r, w = torch.randn(5, 48), torch.randn(5, 48), torch.randn(48)
    for res in (r, None):
        got, want = add_rms_norm(x, res, w, 1e-6, "triton"), add_rms_norm(x, res, w, 1e-6, "torch")
        torch.testing.assert_close(got[0], want[0])
        torch.testing.assert_close(got[1], want[1])
    g = torch.randn(3, 2 * 1100)
    torch.testing.assert_close(silu_mul(g, "triton"), silu_mul(g, "torch"))
    cos, sin = torch.randn(64, 8), torch.randn(64, 8)
    pos = torch.tensor([0, 5, 63], dtype=torch.int32)
    for wq, wk in ((torch.randn(16), torch.randn(16)), (None, None)):
        a = torch.randn(3, 8, 16)
        b = a.clone()
        norm_rope_(a[:, :6], 4, wq, wk, cos, sin, pos, 1e-6, "triton")
        norm_rope_(b[:, :6], 4, wq, wk, cos, sin, pos, 1e-6, "torch")
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("width", [1, 4, 8, 16])
def test_the_profiles_key_splits_are_the_attention_plans(width):
    """dspark_sim.cost models the decode attention's key splits without importing the
    decoder: its constants must give the plan's split count at every request count."""
    from dataclasses import replace

    from dspark_sim.profiling.fit import DECODER_MAX_SPLITS, DECODER_SPLIT_PROGRAMS_PER_SM
    from dspark_sim.cost.shapes import SCALAR
    from dspark_sim.kernels.decoder.graphs import request_tier
    from test_cost_profile import KNOWN_TARGET

    sms, kv_heads, group = 132, 8, 4
    target = replace(KNOWN_TARGET, split_target=DECODER_SPLIT_PROGRAMS_PER_SM * sms / kv_heads,
                     max_splits=DECODER_MAX_SPLITS)
    for reqs in range(1, 257):
        shape = plan(width, request_tier(reqs, 256), kv_heads, group, sms)
        assert shape.chunks == 1 and shape.splits == target.splits(reqs, SCALAR), reqs


def test_releasing_a_sequence_without_a_row_changes_nothing():
    pages = Pages(16, 4, 4, 8, "cpu")
    s = _Seq()
    pages.attach(s)
    assert pages.reserve(s, 9)
    pages.release(s)
    rows, free = list(pages.free_rows), list(pages.free)
    pages.release(s)  # already released
    pages.release(_Seq())  # never attached
    assert list(pages.free_rows) == rows and list(pages.free) == free and None not in rows
