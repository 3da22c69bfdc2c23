"""Sampled speculative outputs follow the target distribution (chi-square, small vocab)."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
stats = pytest.importorskip("scipy.stats")

from dspark_sim.kernels.decoder.engine import serve  # noqa: E402
from dspark_sim.kernels.decoder.sequence import Sequence  # noqa: E402
from dspark_sim.kernels.decoder.tiny import tiny_decoder, tiny_sps, tiny_spec  # noqa: E402

PROMPT = [1, 4, 2]
N = 1000


def _exact_pairs(dec) -> np.ndarray:
    """Target probabilities of the first two tokens, ``[V, V]``."""
    p1 = torch.softmax(dec.score(PROMPT)[-1], -1)
    return np.stack([(p1[a] * torch.softmax(dec.score(PROMPT + [a])[-1], -1)).numpy()
                     for a in range(len(p1))])


def _chi2_p(counts: np.ndarray, probs: np.ndarray) -> float:
    exp = probs.ravel() * counts.sum()
    obs = counts.ravel()
    big = exp >= 5  # pool rare cells so the test stays valid
    o = np.append(obs[big], obs[~big].sum())
    e = np.append(exp[big], exp[~big].sum())
    keep = e > 0
    return float(stats.chisquare(o[keep], e[keep] * o[keep].sum() / e[keep].sum()).pvalue)


@pytest.mark.parametrize("method,over", [("dspark", {"scheduler": "production"}),
                                         ("static", {"block_size": 2})])
def test_sampled_pairs_follow_target(method, over):
    torch.manual_seed(1)
    spec = tiny_spec(vocab=8)
    dec = tiny_decoder(method, spec=spec, max_running_requests=N, kv_tokens=N * 16,
                       sps=tiny_sps(scale=N // 6), **over)
    seqs = [Sequence(i, PROMPT, max_tokens=3, temperature=1.0) for i in range(N)]
    serve(dec, seqs)
    counts = np.zeros((8, 8))
    for s in seqs:
        counts[s.outputs[0], s.outputs[1]] += 1
    accepted = sum(s.accepted for s in seqs)
    assert 0 < accepted < sum(s.verified for s in seqs)  # both outcomes happened
    assert _chi2_p(counts, _exact_pairs(dec)) > 1e-3
