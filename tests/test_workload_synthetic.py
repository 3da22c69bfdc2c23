"""Synthetic workloads: arrival statistics, length distributions, determinism, config errors."""
from __future__ import annotations

import math

import numpy as np
import pytest

from dspark_sim.errors import InputError
from dspark_sim.workload import LengthDist, RequestChunk, SyntheticConfig, synthetic_requests
from dspark_sim.workload.synthetic import BLOCK_ROWS

CONST_100 = LengthDist("constant", mean=100)


def config(n=200_000, rate=50.0, arrival="poisson", cv=1.0, prompt=CONST_100, output=CONST_100):
    return SyntheticConfig(num_requests=n, rate_per_s=rate, arrival=arrival, cv=cv,
                           prompt_tokens=prompt, output_tokens=output)


def generate(cfg, seed=0, chunk_rows=65536) -> RequestChunk:
    return RequestChunk.concat(synthetic_requests(cfg, seed, chunk_rows=chunk_rows))


def gaps_s(chunk: RequestChunk) -> np.ndarray:
    return np.diff(chunk.arrival_s)


def test_poisson_rate_and_cv():
    c = generate(config(rate=50.0), seed=1)
    g = gaps_s(c)
    assert c.arrival_s[0] == 0.0 and np.all(g >= 0)
    assert 1 / g.mean() == pytest.approx(50.0, rel=0.01)
    assert g.std() / g.mean() == pytest.approx(1.0, rel=0.02)


@pytest.mark.parametrize("cv", [0.5, 3.0])
def test_gamma_cv(cv):
    g = gaps_s(generate(config(arrival="gamma", cv=cv, rate=20.0), seed=2))
    assert 1 / g.mean() == pytest.approx(20.0, rel=0.03)
    assert g.std() / g.mean() == pytest.approx(cv, rel=0.05)


def test_constant_arrivals():
    c = generate(config(n=1000, rate=4.0, arrival="constant"))
    np.testing.assert_allclose(c.arrival_s, np.arange(1000) / 4.0, rtol=0, atol=1e-9)


def test_lognormal_mean_is_the_distribution_mean():
    dist = LengthDist("lognormal", mean=800.0, sigma=0.8)
    c = generate(config(prompt=dist), seed=3)
    assert c.prompt_tokens.mean() == pytest.approx(800.0, rel=0.01)
    mu = math.log(800.0) - 0.8 ** 2 / 2
    assert np.median(c.prompt_tokens) == pytest.approx(math.exp(mu), rel=0.02)
    assert c.prompt_tokens.dtype == np.int64 and c.prompt_tokens.min() >= 1


def test_clamps_and_uniform():
    clamped = LengthDist("lognormal", mean=500.0, sigma=2.0, min_tokens=10, max_tokens=2000)
    uniform = LengthDist("uniform", min_tokens=3, max_tokens=7)
    c = generate(config(n=50_000, prompt=clamped, output=uniform))
    assert c.prompt_tokens.min() == 10 and c.prompt_tokens.max() == 2000
    assert set(np.unique(c.output_tokens)) == {3, 4, 5, 6, 7}


def test_empirical_values_and_weights():
    dist = LengthDist("empirical", values=(10, 20, 30), weights=(1, 0, 3))
    out = generate(config(n=40_000, output=dist), seed=4).output_tokens
    assert set(np.unique(out)) == {10, 30}
    assert (out == 30).mean() == pytest.approx(0.75, abs=0.01)


def test_empirical_from_trace_file(tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                     "2023-11-16 18:17:03.9799600,4808,10\n2023-11-16 18:17:04,77,20\n")
    raw = {"dist": "empirical", "file": "t.csv", "column": "GeneratedTokens"}
    dist = LengthDist.from_dict(raw, file=tmp_path / "scenario.yaml", key="w.output_tokens")
    assert dist.file == trace.resolve()
    out = generate(config(n=2000, output=dist)).output_tokens
    assert set(np.unique(out)) == {10, 20}


def test_same_seed_bit_identical_and_chunking_invariant():
    n = BLOCK_ROWS + 1234  # crosses an internal block boundary
    cfg = config(n=n, arrival="gamma", cv=2.0, prompt=LengthDist("lognormal", mean=300.0, sigma=1.0),
                 output=LengthDist("empirical", values=(5, 50, 500)))
    big = generate(cfg, seed=7, chunk_rows=65536)
    chunks = list(synthetic_requests(cfg, 7, chunk_rows=10))
    assert len(chunks) == math.ceil(n / 10) and {len(c) for c in chunks[:-1]} == {10}
    small = RequestChunk.concat(chunks)
    again = generate(cfg, seed=7, chunk_rows=999)
    for field in ("arrival_s", "prompt_tokens", "output_tokens"):
        a, b, c = getattr(big, field), getattr(small, field), getattr(again, field)
        assert a.tobytes() == b.tobytes() == c.tobytes()
    assert not np.array_equal(generate(cfg, seed=8).arrival_s, big.arrival_s)
    assert np.all(np.diff(big.arrival_s) >= 0)


def test_million_requests_stream_in_bounded_chunks():
    """A million requests come as chunks no longer than asked, in arrival order, all of them
    (the time it takes is bench_sim.py's million-request case, not a test's)."""
    cfg = config(n=1_000_000, arrival="gamma", cv=2.0, prompt=LengthDist("lognormal", mean=1000, sigma=1))
    total, last_s = 0, 0.0
    for chunk in synthetic_requests(cfg, 0, chunk_rows=65536):
        assert 0 < len(chunk) <= 65536 and chunk.arrival_s[0] >= last_s
        total, last_s = total + len(chunk), float(chunk.arrival_s[-1])
    assert total == 1_000_000


# -- from_dict ------------------------------------------------------------------------
GOOD = {"num_requests": 100, "rate_per_s": 2.5, "arrival": "gamma", "cv": 2,
        "prompt_tokens": {"dist": "lognormal", "mean": 1000, "sigma": 1.0, "max_tokens": 8192},
        "output_tokens": {"dist": "constant", "mean": 200}}


def test_from_dict_builds_config():
    cfg = SyntheticConfig.from_dict(GOOD, file="s.yaml")
    assert cfg.num_requests == 100 and cfg.cv == 2 and cfg.arrival == "gamma"
    assert cfg.prompt_tokens == LengthDist("lognormal", mean=1000, sigma=1.0, max_tokens=8192)
    minimal = {"num_requests": 5, "rate_per_s": 1,
               "prompt_tokens": {"dist": "uniform", "max_tokens": 9},
               "output_tokens": {"dist": "constant", "mean": 2}}
    assert SyntheticConfig.from_dict(minimal, file=None).arrival == "poisson"


def with_change(path: str, value):
    d = {k: (dict(v) if isinstance(v, dict) else v) for k, v in GOOD.items()}
    *parents, leaf = path.split(".")
    target = d
    for p in parents:
        target = target[p]
    if value is KeyError:
        del target[leaf]
    else:
        target[leaf] = value
    return d


@pytest.mark.parametrize("path, value, key, match", [
    ("rate", 3, "workload.synthetic.rate", "unknown key"),
    ("num_requests", KeyError, "workload.synthetic.num_requests", "missing key"),
    ("num_requests", 10.5, "workload.synthetic.num_requests", "integer"),
    ("rate_per_s", -1, "workload.synthetic.rate_per_s", "in [1e-06, "),
    ("arrival", "weibull", "workload.synthetic.arrival", "poisson"),
    ("arrival", "poisson", "workload.synthetic.cv", "only to arrival 'gamma'"),
    ("cv", 0, "workload.synthetic.cv", "in (0, "),
    ("prompt_tokens", 512, "workload.synthetic.prompt_tokens", "mapping"),
    ("prompt_tokens.dist", "zipf", "workload.synthetic.prompt_tokens.dist", "lognormal"),
    ("prompt_tokens.median", 3, "workload.synthetic.prompt_tokens.median", "unknown key"),
    ("output_tokens.sigma", 1, "workload.synthetic.output_tokens.sigma", "not used by dist 'constant'"),
    ("prompt_tokens.mean", 0, "workload.synthetic.prompt_tokens.mean", "mean > 0"),
    ("prompt_tokens.max_tokens", 0, "workload.synthetic.prompt_tokens.max_tokens", "in [min_tokens="),
    ("output_tokens.mean", "big", "workload.synthetic.output_tokens.mean", "finite number"),
])
def test_from_dict_errors_name_file_and_key(path, value, key, match):
    with pytest.raises(InputError) as err:
        SyntheticConfig.from_dict(with_change(path, value), file="s.yaml")
    assert err.value.file == "s.yaml" and err.value.key == key
    assert match in str(err.value)


@pytest.mark.parametrize("raw, key, match", [
    ({"dist": "empirical"}, "d.values", "exactly one of values and file"),
    ({"dist": "empirical", "values": [1, 2], "weights": [1]}, "d.weights", "one weight"),
    ({"dist": "empirical", "values": [0, 2]}, "d.values", "in [1, "),
    ({"dist": "empirical", "values": []}, "d.values", "non-empty list"),
    ({"dist": "empirical", "file": "missing.csv", "column": "prompt_tokens"}, "d.file", "not found"),
    ({"dist": "uniform"}, "d.max_tokens", "needs max_tokens"),
    ({"mean": 3}, "d.dist", "expected one of"),
])
def test_length_dist_errors(tmp_path, raw, key, match):
    with pytest.raises(InputError) as err:
        LengthDist.from_dict(raw, file=tmp_path / "s.yaml", key="d")
    assert err.value.key == key and match in str(err.value)


def test_bad_column_and_seed(tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:04,77,20\n")
    with pytest.raises(InputError, match="column"):
        LengthDist.from_dict({"dist": "empirical", "file": "t.csv", "column": "Tokens"},
                             file=tmp_path / "s.yaml", key="d")
    with pytest.raises(InputError, match="seed"):
        synthetic_requests(config(n=10), -1)
