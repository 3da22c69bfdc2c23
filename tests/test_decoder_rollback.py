"""KV rollback: after rejected drafts the cache equals one that never saw them."""
import pytest

torch = pytest.importorskip("torch")

from dspark_sim.kernels.decoder import step as steps  # noqa: E402
from dspark_sim.kernels.decoder.sequence import Sequence  # noqa: E402
from dspark_sim.kernels.decoder.tiny import tiny_decoder  # noqa: E402

PROMPT = [5, 3, 8, 1, 9, 2, 7]


def _prefilled(dec):
    seq = Sequence(0, PROMPT, max_tokens=64)
    dec.admit(seq)
    assert dec.pages.reserve(seq, len(seq.tokens))
    dec.prefill([(seq, len(seq.tokens))])
    return seq


def _verify(dec, seq, window):
    """Verify ``window`` (anchor + drafts) for ``seq`` and commit like a decode step: the
    device moves the anchor, the host appends the tokens and returns the pages past them."""
    n = len(window)
    assert dec.pages.reserve(seq, len(seq.tokens) + n)
    dec.pages.flush()
    rows, vlen, win = torch.tensor([seq.row]), torch.tensor([n], dtype=torch.int32), torch.tensor([window])
    logits = dec._verify(win, vlen, rows, n, 1)
    tab = {"rows": rows, "nl": vlen, "temp": torch.zeros(1)}
    accepted, out = steps._accept(dec, logits, tab, win, None, 1, 1, greedy=True)
    steps._commit(dec, tab, accepted, out, 1)
    a = int(accepted[0])
    seq.extend(out[0, :a + 1].tolist())
    seq.num_cached = len(seq.tokens) - 1
    dec.pages.truncate(seq, seq.num_cached)
    return a


def test_rollback_leaves_cache_as_if_never_verified():
    dec = tiny_decoder("none", agreeable=False)
    a = _prefilled(dec)
    truth = int(dec.score(a.tokens)[-1].argmax())
    wrong = (truth + 1) % dec.spec.vocab_size
    free_before = len(dec.pages.free)
    # anchor + [correct draft, wrong draft, junk]: exactly one draft survives
    assert _verify(dec, a, [a.tokens[-1], truth, wrong, wrong, wrong, wrong]) == 1
    b_dec = tiny_decoder("none", agreeable=False)
    b = _prefilled(b_dec)
    assert _verify(b_dec, b, [b.tokens[-1], truth]) == 1  # never sees the rejected tokens
    assert a.tokens == b.tokens and a.num_cached == b.num_cached == len(a.tokens) - 1
    ka, va = dec.cached_kv(a)
    kb, vb = b_dec.cached_kv(b)
    torch.testing.assert_close(ka, kb, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(va, vb, rtol=1e-5, atol=1e-6)
    assert len(a.pages) == dec.pages.pages_for(a.num_cached)
    assert len(dec.pages.free) == free_before - (len(a.pages) - dec.pages.pages_for(len(PROMPT)))
    # and decoding on from both gives the same tokens
    for d, s in ((dec, a), (b_dec, b)):
        s.max_tokens = len(s.outputs) + 5
        while not s.done:
            d.pages.reserve(s, len(s.tokens) + d.conf.block_size)
            d.decode([s])
    assert a.tokens == b.tokens


def test_pages_return_to_the_pool():
    dec = tiny_decoder("dspark")
    total = len(dec.pages.free)
    from dspark_sim.kernels.decoder.tiny import generate

    generate(dec, [[1, 2, 3], list(range(20))], max_tokens=10)
    assert len(dec.pages.free) == total
    assert len(dec.pages.free_rows) == dec.conf.max_running_requests
