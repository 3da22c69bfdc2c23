"""schedule_verify: Triton kernel vs loop reference vs brute force (CPU: TRITON_INTERPRET=1)."""

import importlib
import itertools
import json
import os

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from dspark_sim.kernels import AdditiveSpsTensors, SpsTensors, schedule_verify, schedule_verify_ref  # noqa: E402
from dspark_sim.kernels.baseline import schedule_verify_torch  # noqa: E402
from dspark_sim.kernels.cases import schedule_case, synthetic_sps_table  # noqa: E402
from dspark_sim.kernels.reference import calibrated_survival_ref, steps_per_sec_ref  # noqa: E402
from dspark_sim.kernels.schedule_verify import path_for, run_schedule  # noqa: E402
from dspark_sim.errors import InputError  # noqa: E402
from dspark_sim.kernels.sps_tensors import sps_from_json_dict  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:divide by zero:RuntimeWarning")
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def additive_table(device=DEVICE, max_batch_tokens=None):
    return AdditiveSpsTensors.from_json_dict(
        {
            "bias_seconds": 0.004,
            "bs_probes": [1, 64, 256],
            "alpha_seconds": [0.0, 0.002, 0.006],
            "m_probes": [1, 128, 512, 2048],
            "theta_seconds": [0.006, 0.0065, 0.012, 0.05],
            **({} if max_batch_tokens is None else {"max_batch_tokens": max_batch_tokens}),
        },
        device,
    )


def assert_same(out, ref):
    lens, k, theta = out
    torch.testing.assert_close(lens.cpu(), ref[0].cpu(), rtol=0, atol=0)
    torch.testing.assert_close(k.cpu(), ref[1].cpu(), rtol=0, atol=0)
    torch.testing.assert_close(theta.cpu(), ref[2].cpu(), rtol=1e-5, atol=0)
    assert int(k) == int(lens.sum()) - lens.numel()


@pytest.mark.parametrize("R,block_size", [(1, 1), (5, 5), (40, 7)])
@pytest.mark.parametrize("mode", ["production", "algorithm1"])
@pytest.mark.parametrize("table", ["floor", "additive"])
def test_kernel_matches_reference(R, block_size, mode, table):
    sps = synthetic_sps_table(device=DEVICE) if table == "floor" else additive_table()
    case = schedule_case(R, block_size, DEVICE, seed=R + block_size, sps=sps)
    assert_same(schedule_verify(**case, mode=mode), schedule_verify_ref(**case, mode=mode))


def test_large_batch_sixteen_positions():
    case = schedule_case(64, 16, DEVICE, seed=3)
    assert_same(schedule_verify(**case), schedule_verify_ref(**case))


@pytest.mark.parametrize("r_lag", [9, 33])
def test_lagged_budget_and_clamps(r_lag):
    case = schedule_case(20, 7, DEVICE, seed=r_lag)
    case["lag_conf"] = schedule_case(r_lag, 7, DEVICE, seed=100 + r_lag)["conf"]
    kw = dict(min_verify_len=2, max_verify_len=5, survival_eps=0.2)
    out = schedule_verify(**case, **kw)
    assert_same(out, schedule_verify_ref(**case, **kw))
    assert int(out[0].min()) >= 2 and int(out[0].max()) <= 5


def test_max_batch_tokens_is_a_hard_cap():
    for sps in (synthetic_sps_table(max_batch_tokens=96, device=DEVICE), additive_table(max_batch_tokens=90)):
        case = schedule_case(32, 7, DEVICE, seed=5, sps=sps)
        for mode in ("production", "algorithm1"):
            out = schedule_verify(**case, mode=mode)
            assert_same(out, schedule_verify_ref(**case, mode=mode))
            assert int(out[0].sum()) <= sps.max_batch_tokens


@pytest.mark.parametrize("path", ["single", "pairwise", "merge"])
@pytest.mark.parametrize("R,block_size,mode,lag,table,kw", [
    (5, 5, "production", False, "floor", {}),
    (40, 7, "algorithm1", False, "floor", {}),
    (33, 7, "production", True, "additive", {}),
    (20, 16, "production", False, "additive", {"min_verify_len": 2, "max_verify_len": 9, "survival_eps": 0.05}),
    (61, 3, "algorithm1", False, "additive", {}),
])
def test_every_path_matches_reference(path, R, block_size, mode, lag, table, kw):
    """The one-program kernel and both many-program paths give the reference's schedule."""
    sps = synthetic_sps_table(device=DEVICE) if table == "floor" else additive_table()
    case = schedule_case(R, block_size, DEVICE, seed=R + block_size, lag=lag, sps=sps)
    out = run_schedule(**case, cfg=None, mode=mode, path=path, **kw)
    assert_same(out, schedule_verify_ref(**case, mode=mode, **kw))


@pytest.mark.parametrize("path", ["single", "pairwise", "merge"])
def test_budget_given_takes_the_top_k(path):
    """``budget_k`` (sized by the caller from lagged confidences) replaces the search;
    a budget above the admissible candidates takes them all."""
    case = schedule_case(30, 7, DEVICE, seed=4)
    for k in (0, 1, 17, 10_000):
        out = run_schedule(**case, cfg=None, path=path, budget_k=k, survival_eps=0.3)
        assert_same(out, schedule_verify_ref(**case, budget_k=k, survival_eps=0.3))
    with pytest.raises(ValueError, match="budget_k"):
        schedule_verify(**case, mode="algorithm1", budget_k=3)


def test_a_large_batch_takes_the_merge_path_and_equals_the_reference():
    """R = 1024 at block 16 (16,384 survivals over 64 programs, the many-program merge path that
    R = 4096 also takes) equals the loop reference, searching the budget and with a budget
    given, and repeats bit for bit."""
    assert path_for(4096, 16) == path_for(1024, 16) == "merge"
    assert path_for(256, 16) == "pairwise" and path_for(64, 8) == "single"
    sps = synthetic_sps_table(max_batch_tokens=20_000, device=DEVICE)
    case = schedule_case(1024, 16, DEVICE, seed=1, sps=sps)
    out = schedule_verify(**case)
    assert_same(out, schedule_verify_ref(**case))
    assert 0 < int(out[1]) < 1024 * 16
    for x, y in zip(out, schedule_verify(**case)):
        assert torch.equal(x, y)
    assert_same(schedule_verify(**case, budget_k=5_000), schedule_verify_ref(**case, budget_k=5_000))


def test_extreme_confidences_and_temperatures():
    conf = torch.tensor([[1.0, 1.0, 0.0, 0.5], [0.999999, 1e-7, 0.9, 0.9], [0.5, 0.5, 0.5, 0.5]], device=DEVICE)
    temps = torch.tensor([0.05, 20.0, 1.0, 3.0], device=DEVICE)
    sps = synthetic_sps_table(device=DEVICE)
    for mode in ("production", "algorithm1"):
        assert_same(schedule_verify(conf, temps, sps, mode=mode), schedule_verify_ref(conf, temps, sps, mode=mode))


def brute_force_theta(a, sps, eps, max_batch_tokens):
    """max over every verify-length vector of tau * SPS(B), inadmissible tokens excluded."""
    R, block_size = a.shape
    best = -1.0
    for extra in itertools.product(range(block_size + 1), repeat=R):
        if any(e > 0 and a[r, e - 1] < eps for r, e in enumerate(extra)) or R + sum(extra) > max_batch_tokens:
            continue
        tau = R + sum(float(a[r, :e].sum()) for r, e in enumerate(extra))
        best = max(best, tau * steps_per_sec_ref(sps, R, R + sum(extra)))
    return best


@pytest.mark.parametrize("seed", range(4))
def test_production_equals_brute_force_search(seed):
    g = torch.Generator().manual_seed(seed)
    R, block_size = 3, 3
    conf = torch.rand(R, block_size, generator=g).to(DEVICE)
    temps = (0.5 + torch.rand(block_size, generator=g)).to(DEVICE)
    # A jagged table whose cliffs sit inside the searched range, so the argmax is not trivially "all".
    sps = SpsTensors.from_json_dict(
        {"sample_batch_tokens": [1, 4, 6, 9], "sample_steps_per_sec": [100.0, 90.0, 55.0, 52.0], "max_batch_tokens": 11},
        DEVICE,
    )
    a = calibrated_survival_ref(conf, temps)
    best = brute_force_theta(a, sps, 1e-6, 11)
    lens, k, theta = schedule_verify(conf, temps, sps, mode="production")
    achieved = (R + sum(float(a[r, : int(n) - 1].sum()) for r, n in enumerate(lens.tolist()))) * steps_per_sec_ref(
        sps, R, int(lens.sum())
    )
    assert achieved == pytest.approx(best, rel=1e-6)
    assert float(theta) == pytest.approx(best, rel=1e-5)
    # Algorithm 1 stops early: never above the optimum.
    _, _, theta_a1 = schedule_verify(conf, temps, sps, mode="algorithm1")
    assert float(theta_a1) <= best * (1 + 1e-6)


@pytest.mark.parametrize("mode", ["production", "algorithm1"])
def test_torch_baseline_matches_reference(mode):
    for R, block_size, lag in [(1, 5, False), (37, 7, False), (50, 7, True)]:
        case = schedule_case(R, block_size, "cpu", seed=R, lag=lag and mode == "production")
        assert_same(schedule_verify_torch(**case, mode=mode), schedule_verify_ref(**case, mode=mode))


def test_deterministic():
    case = schedule_case(24, 7, DEVICE, seed=11)
    first, second = schedule_verify(**case), schedule_verify(**case)
    for x, y in zip(first, second):
        assert torch.equal(x, y)


def test_sps_json_forms_roundtrip(tmp_path):
    floor = synthetic_sps_table(max_batch_tokens=512)
    path = tmp_path / "sps.json"
    path.write_text(json.dumps(floor.to_json_dict()))
    again = sps_from_json_dict(json.loads(path.read_text()))
    assert isinstance(again, SpsTensors) and torch.equal(again.probes, floor.probes)
    add = additive_table("cpu")
    assert isinstance(sps_from_json_dict(add.to_json_dict()), AdditiveSpsTensors)
    with pytest.raises(InputError, match="strictly increasing"):
        SpsTensors.from_json_dict({"sample_batch_tokens": [4, 2], "sample_steps_per_sec": [1.0, 1.0],
                                   "max_batch_tokens": 8})
    with pytest.raises(InputError, match="max_batch_tokens"):
        SpsTensors.from_json_dict({"sample_batch_tokens": [1, 8], "sample_steps_per_sec": [1.0, 1.0], "max_batch_tokens": 4})


def test_argument_errors():
    case = schedule_case(4, 5, DEVICE, seed=0, lag=True)
    with pytest.raises(ValueError, match="production"):
        schedule_verify(**case, mode="algorithm1")
    case["lag_conf"] = None
    with pytest.raises(ValueError, match="min_verify_len"):
        schedule_verify(**case, min_verify_len=4, max_verify_len=3)
    with pytest.raises(ValueError, match="mode"):
        schedule_verify(**case, mode="greedy")
    with pytest.raises(ValueError, match="temperatures"):
        schedule_verify(case["conf"], case["temperatures"][:3], case["sps"])


def test_package_import_stays_light():
    """`import dspark_sim.kernels` must not import torch or triton (checked in a fresh interpreter)."""
    import subprocess
    import sys

    code = "import sys, dspark_sim.kernels; print('torch' in sys.modules or 'triton' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "False"
    mod = importlib.import_module("dspark_sim.kernels")
    assert callable(mod.schedule_verify) and callable(mod.accept)
