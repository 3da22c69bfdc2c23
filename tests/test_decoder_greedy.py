"""Greedy speculative decoding equals target-only greedy decoding, token for token."""
import pytest

torch = pytest.importorskip("torch")

from dspark_sim.kernels.decoder.tiny import generate, greedy_reference, tiny_decoder  # noqa: E402

PROMPTS = [[3, 1, 4], [1, 5, 9, 2, 6, 5, 3, 5, 8], [9, 7, 9, 3, 2, 3, 8, 4, 6, 2, 6, 4, 3, 3, 8, 3, 2]]
CASES = [("none", {}), ("static", {"block_size": 1}), ("static", {"block_size": 3}),
         ("dspark", {"scheduler": "full"}), ("dspark", {"scheduler": "production"}),
         ("dspark", {"scheduler": "algorithm1"}), ("dspark", {"scheduler": "production", "block_size": 7})]


@pytest.fixture(scope="module")
def reference():
    dec = tiny_decoder("none")
    return [greedy_reference(dec, p, 12) for p in PROMPTS]


@pytest.mark.parametrize("method,over", CASES)
def test_mixed_batch_matches_target_greedy(method, over, reference):
    dec = tiny_decoder(method, **over)
    assert generate(dec, PROMPTS) == reference


def test_drafts_are_accepted_and_rejected():
    """The agreeable tiny drafter exercises both outcomes (else the test above is vacuous)."""
    from dspark_sim.kernels.decoder.engine import serve
    from dspark_sim.kernels.decoder.sequence import Sequence

    dec = tiny_decoder("dspark", scheduler="full")
    seqs = [Sequence(i, p, 12) for i, p in enumerate(PROMPTS)]
    serve(dec, seqs)
    accepted = sum(s.accepted for s in seqs)
    verified = sum(s.verified for s in seqs)
    assert 0 < accepted < verified


def test_batch_equals_each_request_alone():
    """The production scheduler sizes windows from the whole batch; outputs must not move."""
    batch = generate(tiny_decoder("dspark"), PROMPTS)
    alone = [generate(tiny_decoder("dspark"), [p])[0] for p in PROMPTS]
    assert batch == alone


def test_triton_kernels_in_the_loop(reference):
    """Attention, schedule_verify and accept as Triton kernels (interpreter on CPU)."""
    dec = tiny_decoder("dspark", kernels="triton", attention="triton")
    assert generate(dec, PROMPTS[:2], max_tokens=6) == [r[:6] for r in reference[:2]]


@pytest.mark.parametrize("method,over", [("none", {}), ("static", {"block_size": 3}),
                                         ("dspark", {"scheduler": "production"})])
@pytest.mark.parametrize("pad", [False, True])
def test_mixed_batching_and_overlap_keep_greedy_outputs(method, over, pad, reference):
    """``mixed`` batching (prompt chunks beside decode windows in one forward), steps
    overlapped or not, prompt steps padded to graph tiers or exact: target greedy."""
    from dspark_sim.kernels.decoder.engine import serve
    from dspark_sim.kernels.decoder.sequence import Sequence

    for overlap in (True, False):
        dec = tiny_decoder(method, batching="mixed", max_batched_tokens=24, max_running_requests=3, **over)
        dec.pad_prefill = pad
        seqs = [Sequence(i, p, 12, arrival_s=0.001 * i) for i, p in enumerate(PROMPTS)]
        rows = serve(dec, seqs, overlap=overlap).steps
        assert [s.outputs for s in seqs] == reference
        assert any(r["decode_reqs"] and r["prefill_tokens"] for r in rows)  # steps mixed both
        assert max(r["prefill_tokens"] for r in rows) <= 24


@pytest.mark.parametrize("method,over", [("static", {"block_size": 3}), ("dspark", {"scheduler": "full"})])
def test_unwritten_buffers_never_reach_the_outputs(method, over, reference, monkeypatch):
    """Every fresh buffer holds NaN, as uninitialised memory may: the padded tokens, which
    the Triton attention leaves unwritten, still give the sink request finite logits (the
    reference accept judges them), and the outputs stay target greedy."""
    empty = torch.empty

    def nan_empty(*args, **kw):
        t = empty(*args, **kw)
        return t.fill_(float("nan")) if t.is_floating_point() else t
    monkeypatch.setattr(torch, "empty", nan_empty)
    dec = tiny_decoder(method, attention="triton", **over)
    assert generate(dec, PROMPTS[:2], max_tokens=6) == [r[:6] for r in reference[:2]]
