"""The vectorised pricing path (StepWorks -> breakdown_array) gives the scalar path's numbers, bit for bit."""
from __future__ import annotations

import warnings
import zlib
from dataclasses import replace

import numpy as np
import pytest

from dspark_sim.catalog import get_gpu, get_model
from dspark_sim.cost import ProfileCost, RooflineCost, StepWork, get_cost_model
from dspark_sim.cost import shapes
from dspark_sim.cost.base import DraftWork, StepWorks
from dspark_sim.cost.parallel import Parallel
from dspark_sim.cost.profile import load_profile, shipped_profile_path


def random_works(rng: np.random.Generator, kind: str | None, n: int = 400) -> list[StepWork]:
    """Steps of every shape the engine makes: decode only, mixed, prefill only, empty, with and
    without a drafter, the longest context given or not, the running requests given or not."""
    works = []
    for _ in range(n):
        dec = int(rng.integers(1, 300)) if rng.random() < 0.9 else 0
        verify = dec * int(rng.integers(1, 9))
        prefill = int(rng.integers(1, 8000)) if rng.random() < 0.3 else 0
        prefill_reqs = int(rng.integers(1, 5)) if prefill else 0
        ctx = dec * int(rng.integers(1, 4000))
        longest = int(ctx / dec * rng.uniform(1, 3)) if dec and rng.random() < 0.9 else 0
        block = int(rng.integers(0, 9)) if kind else 0
        draft = DraftWork(kind, dec, block, ctx) if kind and block else None
        running = dec + prefill_reqs + int(rng.integers(0, 5)) if rng.random() < 0.8 else 0
        works.append(StepWork(dec, verify, ctx, prefill, prefill_reqs, float(prefill * rng.uniform(0, 5000)),
                              draft, longest, running))
    return works


def _models():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        models = [get_cost_model(gpu, model, tp) for gpu in ("h200", "b300", "h100")
                  for model in ("qwen3-8b", "qwen3-32b") for tp in (1, 2)]
    models += [RooflineCost(get_model(m), get_gpu(g), tp) for m, g, tp in
               (("qwen3-8b", "h200", 1), ("qwen3-14b", "h100", 4), ("qwen3-30b-a3b", "h200", 1),
                ("deepseek-v4-flash", "b300", 4), ("deepseek-v3", "b300", 8))]
    # DeepSeek-V4's compressed attention under DP attention (the busiest rank's share, by step)
    models.append(RooflineCost(get_model("deepseek-v4-flash"), get_gpu("b300"), parallel=Parallel(8, 8, True)))
    return models


MODELS = _models()


def assert_same(cost, works: StepWorks) -> None:
    """Every part of every step, and the step totals summed in the engine's order, equal."""
    got = cost.breakdown_array(works)
    for i in range(len(works)):
        want = cost.breakdown(works.at(i))
        assert list(want) == list(got), (list(want), list(got))
        for name, value in want.items():
            assert got[name][i] == value, (cost.name, i, name, value, got[name][i], works.at(i))
    totals = sum(got.values())
    assert [sum(cost.breakdown(works.at(i)).values()) for i in range(len(works))] == totals.tolist()


@pytest.mark.parametrize("cost", MODELS, ids=lambda c: c.name)
@pytest.mark.parametrize("kind", [None, "block", "chain"])
def test_breakdown_array_is_the_scalar_breakdown(cost, kind):
    rng = np.random.default_rng(zlib.crc32(f"{cost.name}/{kind}".encode()))
    assert_same(cost, StepWorks.of(random_works(rng, kind)))


@pytest.mark.parametrize("cost", MODELS[:4] + MODELS[-2:], ids=lambda c: c.name)
@pytest.mark.parametrize("kind,block", [(None, 0), ("block", 7), ("chain", 3)])
def test_a_stretch_of_one_batch_prices_as_its_steps(cost, kind, block):
    # the engine's stretches pass the request count once for all steps (a scalar field)
    rng = np.random.default_rng(5)
    for n in (1, 7, 64, 256):
        k = 40
        verify = rng.integers(n, n * (block + 1) + 1, k) if block else n
        ctx = np.cumsum(rng.integers(n, n * 8, k)) + n * 500
        works = StepWorks(n, verify, ctx, draft_kind=kind, draft_reqs=n if block else 0, block_size=block,
                          draft_context_tokens=ctx, decode_max_context=ctx // n + rng.integers(0, 900, k),
                          running_reqs=n)
        assert_same(cost, works)


def test_the_c_library_power_path_agrees(monkeypatch):
    # on AVX-512 machines numpy's own pow may differ in the last bit; the element-wise path is used there
    monkeypatch.setattr(shapes, "_LIBM_POW", False)
    cost = get_cost_model("h200", "qwen3-8b")
    assert_same(cost, StepWorks.of(random_works(np.random.default_rng(1), "block", 120)))


def test_a_missing_drafter_is_priced_by_the_roofline_fallback():
    profile = load_profile(shipped_profile_path("h200", "qwen3-8b"))
    cost = ProfileCost(replace(profile, draft={"block": profile.draft["block"]}),
                       fallback=RooflineCost(get_model("qwen3-8b"), get_gpu("h200")), warn=False)
    assert_same(cost, StepWorks.of(random_works(np.random.default_rng(2), "chain", 150)))


def test_exact_shapes_are_the_scalar_shapes():
    rng = np.random.default_rng(3)
    knots, values = (1.0, 4.0, 10.0, 64.0), (0.1, -0.2, 0.05, 0.3)
    x = np.concatenate([rng.uniform(-5, 100, 500), np.array(knots), [0.0, 1e9]])
    assert shapes.interp_exact(knots, values, x).tolist() == [shapes.interp_clamped(knots, values, v)
                                                              for v in x.tolist()]
    table = ((0.0, 0.2, -0.1), (0.3, 0.1, 0.4), (-0.2, 0.0, 0.25))
    rx, wy = rng.uniform(0, 4, 400), rng.choice([0.0, 1.0, 2.0, 3.0, 4.0, 6.0, 8.0, 9.0], 400)
    assert shapes.interp2_exact((1.0, 2.0, 3.0), (1.0, 4.0, 8.0), table, rx, wy).tolist() == [
        shapes.interp2_clamped((1.0, 2.0, 3.0), (1.0, 4.0, 8.0), table, a, b) for a, b in zip(rx.tolist(), wy.tolist())]
    v = np.concatenate([rng.uniform(0, 300, 500), np.arange(0, 70) / 4.0])
    assert shapes.pow2_exact(v).tolist() == [shapes.pow2_scalar(a) for a in v.tolist()]
    b = rng.uniform(0, 1e-2, 300)
    assert shapes.power_exact(b, 2.86).tolist() == [a ** 2.86 for a in b.tolist()]


def test_stepworks_checks_its_shape():
    with pytest.raises(ValueError, match="as long as each other"):
        StepWorks(np.array([1, 2]), np.array([1, 2, 3]), 0)
    with pytest.raises(ValueError, match="1-D"):
        StepWorks(np.ones((2, 2), dtype=np.int64), 1, 0)
    works = StepWorks.of([StepWork(2, 5, 100, draft=DraftWork("block", 2, 3, 100)), StepWork(1, 1, 9)])
    assert len(works) == 2 and works.at(1) == StepWork(1, 1, 9)
    assert works.at(0) == StepWork(2, 5, 100, draft=DraftWork("block", 2, 3, 100))
    with pytest.raises(ValueError, match="one drafter kind"):
        StepWorks.of([StepWork(draft=DraftWork("block", 1, 1)), StepWork(draft=DraftWork("chain", 1, 1))])
