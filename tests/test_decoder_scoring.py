"""Target logits laid out four ways (kernels/decoder/scoring.py): one forward of the whole
sequence, the prompt chunked then one token a forward, several sequences packed in one forward,
several sequences stepped together as mixed batching steps them.
They are the same logits computed in other orders, so in fp32 they agree to rounding; a layout
that read the wrong keys (an off-by-one position, another sequence's row) would not."""
import os

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from dspark_sim.kernels.decoder.scoring import chunked, interleaved, packed, score_steps, whole  # noqa: E402
from dspark_sim.kernels.decoder.tiny import tiny_decoder  # noqa: E402

SEQS = [[(j * 7 + 3) % 31 for j in range(23)], [(j * 5 + 1) % 29 for j in range(9)], [4, 2, 8]]


@pytest.fixture(scope="module")
def dec():
    return tiny_decoder("none", kernels="triton", attention="triton", max_running_requests=4)


def test_the_layouts_are_spans_over_every_position_once():
    assert whole(5) == [[(0, 0, 5)]]
    assert chunked(7, 5, 2) == [[(0, 0, 2)], [(0, 2, 4)], [(0, 4, 5)], [(0, 5, 6)], [(0, 6, 7)]]
    assert packed([3, 1]) == [[(0, 0, 3), (1, 0, 1)]]
    # two short prompts and a long one, 4 tokens a forward: decode rows first, then chunks in order
    assert interleaved([4, 3, 9], [2, 2, 7], 4) == [
        [(0, 0, 2), (1, 0, 2)], [(0, 2, 3), (1, 2, 3), (2, 0, 2)], [(0, 3, 4), (2, 2, 5)], [(2, 5, 7)],
        [(2, 7, 8)], [(2, 8, 9)]]
    assert interleaved([4, 3, 9], [2, 2, 7], 4, prefill_first=True) == [
        [(0, 0, 2), (1, 0, 2)], [(2, 0, 4)], [(2, 4, 7)], [(0, 2, 3), (1, 2, 3), (2, 7, 8)], [(0, 3, 4), (2, 8, 9)]]


def test_interleaved_runs_every_position_once_within_the_budget():
    lengths, prompts = [30, 12, 5, 61], [20, 3, 4, 50]
    plan = interleaved(lengths, prompts, 16)
    ran = [[] for _ in lengths]
    for step in plan:
        assert sum(b - a for _, a, b in step) <= 16
        for i, a, b in step:
            assert a >= prompts[i] and b == a + 1 or b <= prompts[i]  # a decode row is one token
            ran[i] += range(a, b)
    assert ran == [list(range(n)) for n in lengths]
    for step in interleaved(lengths, prompts, 16, prefill_first=True):  # no decode row beside a chunk
        assert all(b <= prompts[i] for i, _, b in step) or all(b == a + 1 > prompts[i] for i, a, b in step)
    with pytest.raises(ValueError):
        interleaved([3], [3], 0)


@pytest.mark.parametrize("chunk", [4, 40])
def test_chunked_and_packed_logits_equal_the_whole_forward(dec, chunk):
    """Each sequence's last rows (its prompt's last position onwards) three ways."""
    at = [range(len(s) - 6, len(s)) if len(s) > 6 else range(len(s)) for s in SEQS]
    wholes = [score_steps(dec, [s], whole(len(s)), [w])[0] for s, w in zip(SEQS, at)]
    packs = score_steps(dec, SEQS, packed([len(s) for s in SEQS]), at)
    together = score_steps(dec, SEQS, interleaved([len(s) for s in SEQS], [w.start + 1 for w in at], chunk), at)
    for s, w, ref, pack, mixed in zip(SEQS, at, wholes, packs, together):
        torch.testing.assert_close(mixed, ref, rtol=1e-4, atol=1e-4)
        steps = chunked(len(s), w.start + 1, chunk)
        torch.testing.assert_close(score_steps(dec, [s], steps, [w])[0], ref, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(pack, ref, rtol=1e-4, atol=1e-4)
    assert wholes[0].shape == (6, dec.spec.vocab_size)
    torch.testing.assert_close(dec.score(SEQS[0], last=6), wholes[0])


def test_a_layout_that_skips_a_token_gives_other_logits(dec):
    """The comparison can fail: the chunked layout with one prompt token never forwarded."""
    s, w = SEQS[0], range(17, 23)
    ref = score_steps(dec, [s], whole(len(s)), [w])[0]
    steps = [span for span in chunked(len(s), 18, 4) if span != [(0, 8, 12)]] + [[(0, 8, 11)]]
    steps.sort(key=lambda step: step[0][1])
    assert not torch.allclose(score_steps(dec, [s], steps, [w])[0], ref, atol=1e-3)


def test_every_page_and_row_is_back_after_scoring(dec):
    free, rows = len(dec.pages.free), len(dec.pages.free_rows)
    score_steps(dec, SEQS, packed([len(s) for s in SEQS]), [range(0)] * 3)
    assert (len(dec.pages.free), len(dec.pages.free_rows)) == (free, rows)
