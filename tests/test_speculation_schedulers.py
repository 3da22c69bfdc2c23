"""DSpark schedulers against brute-force references on small batches (hypothesis), and every policy's
plan of K steps at once against K plans step after step."""
import copy
import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dspark_sim.cost import get_cost_model
from dspark_sim.cost.sps import sps_from_cost_model
from dspark_sim.speculation import dspark
from dspark_sim.speculation.config import ScheduleRule, Speculation
from dspark_sim.speculation.dspark import VerifyLimits
from dspark_sim.speculation.policy import make_policy


def sps_curve(kind: int):
    """A few step-time shapes: flat then linear (the ridge), jagged, and strictly linear."""
    def fn(batch_tokens, num_reqs):
        b = np.asarray(batch_tokens, dtype=float)
        if kind == 0:
            step = 0.005 + 0.0004 * np.maximum(b - 6, 0)
        elif kind == 1:
            step = 0.004 + 0.0003 * b + 0.002 * (b % 4 == 3)
        else:
            step = 0.001 * b
        return 1.0 / step
    return fn


batches = st.integers(1, 4).flatmap(lambda r: st.integers(1, 4).flatmap(
    lambda g: st.lists(st.floats(0.01, 0.999), min_size=r * g, max_size=r * g).map(
        lambda xs: np.array(xs).reshape(r, g))))
limits_st = st.builds(lambda lo, hi, eps: (lo, max(lo, hi), eps),
                      st.integers(0, 2), st.integers(0, 4), st.sampled_from([0.0, 1e-6, 0.2, 0.5]))


def brute_theta(surv, lengths, sps):
    """Theta of explicit verify lengths (anchor counted)."""
    tau = sum(1 + surv[r, : l - 1].sum() for r, l in enumerate(lengths))
    b = int(np.sum(lengths))
    return tau * sps(np.array([b]), len(lengths))[0]


def admissible(surv, lo, hi, eps):
    """Every verify-length vector a scheduler may return: prefix-closed, within limits."""
    r, g = surv.shape
    hi, lo = min(hi, g), min(lo, min(hi, g))
    options = []
    for row in surv:
        ok = [lo + k for k in range(hi - lo + 1) if all(row[j] >= eps for j in range(lo, lo + k))]
        options.append([1 + d for d in ok])
    return [np.array(c) for c in itertools.product(*options)]


@settings(max_examples=300, deadline=None)
@given(batches, limits_st, st.integers(0, 2))
def test_production_budget_is_argmax_of_theta(conf, lim, kind):
    lo, hi, eps = lim
    surv = dspark.survival_of(conf)
    limits = VerifyLimits(lo, hi, eps)
    sps = sps_curve(kind)
    cands = dspark.candidates(surv, limits)
    lengths, budget = dspark.production(cands, None, sps, limits)
    th = dspark.theta(cands, surv.shape[0], sps, limits)
    assert budget == int(np.argmax(th))
    # the chosen lengths reach the best Theta over all admissible vectors with that budget
    best = max(brute_theta(surv, v, sps) for v in admissible(surv, lo, hi, eps)
               if v.sum() == lengths.sum())
    assert np.isclose(brute_theta(surv, lengths, sps), best)
    _check_lengths(surv, lengths, lo, hi, eps)


@settings(max_examples=300, deadline=None)
@given(batches, limits_st, st.integers(0, 2))
def test_algorithm1_stops_at_first_non_improving(conf, lim, kind):
    lo, hi, eps = lim
    surv = dspark.survival_of(conf)
    limits = VerifyLimits(lo, hi, eps)
    sps = sps_curve(kind)
    lengths, budget = dspark.algorithm1(surv, sps, limits)
    # replay the admissions one at a time, as the paper describes
    r, g = surv.shape
    hi_c, lo_c = min(hi, g), min(lo, min(hi, g))
    order = sorted(((surv[i, j], i * g + j, i) for i in range(r) for j in range(lo_c, hi_c)
                    if surv[i, j] >= eps), key=lambda t: (-t[0], t[1]))
    current = np.full(r, 1 + lo_c)
    value = brute_theta(surv, current, sps)
    admitted = 0
    for _, _, i in order:
        trial = current.copy()
        trial[i] += 1
        new = brute_theta(surv, trial, sps)
        if not new > value:
            break
        current, value, admitted = trial, new, admitted + 1
    assert budget == admitted
    assert np.array_equal(lengths, current)
    _check_lengths(surv, lengths, lo, hi, eps)


def _check_lengths(surv, lengths, lo, hi, eps):
    r, g = surv.shape
    assert lengths.min() >= 1 + min(lo, g) and lengths.max() <= 1 + min(hi, g)
    for i, l in enumerate(lengths):
        # every verified draft beyond the forced ones has survival >= eps; prefix order holds
        assert all(surv[i, j] >= eps for j in range(min(lo, g), l - 1))


def test_lagged_budget_applies_to_current_survival():
    sps = sps_curve(0)
    limits = VerifyLimits(0, 3)
    lag = dspark.candidates(dspark.survival_of(np.full((2, 3), 0.99)), limits)
    now = dspark.candidates(dspark.survival_of(np.array([[0.9, 0.9, 0.9], [0.1, 0.1, 0.1]])), limits)
    lengths, budget = dspark.production(now, lag, sps, limits)
    assert budget == dspark.production_budget(lag, 2, sps, limits)
    # the top-K of current survival goes to the confident request first
    assert lengths[0] >= lengths[1]


def test_pad_to_graph_tier_fills_free_tokens():
    assert dspark.pad_to_tier(3, 10, 20, (8, 16, 32), 1000) == 6
    assert dspark.pad_to_tier(3, 10, 4, (8, 16, 32), 1000) == 4  # no more candidates
    assert dspark.pad_to_tier(30, 10, 50, (8, 16, 32), 1000) == 30  # beyond the largest tier


def _specs():
    specs = [Speculation(method="none"), Speculation(method="static", block_size=3),
             Speculation(method="schedule", schedule=(ScheduleRule(4, 3), ScheduleRule(None, 1))),
             Speculation(method="threshold", threshold=0.4, min_verify_len=2)]
    for sched, lag, lo, hi, eps, tiers in itertools.product(("production", "algorithm1"), (0, 1, 2, 3), (1, 3),
                                                          (None, 5), (1e-6, 0.3), ((), (8, 16, 32, 64, 128))):
        specs.append(Speculation(method="dspark", scheduler=sched, lag_steps=lag, min_verify_len=lo,
                                 max_verify_len=hi, survival_eps=eps, graph_tiers=tiers, pad_to_graph_tier=bool(tiers)))
    return specs


@pytest.fixture(scope="module")
def sps():
    cost = get_cost_model("h200", "qwen3-8b")
    return sps_from_cost_model(cost, max_batch_tokens=8192, additive=True, draft_kind="block").steps_per_sec_array


@pytest.mark.parametrize("spec", _specs(), ids=lambda s: f"{s.method}-{s.scheduler}-lag{s.lag_steps}-"
                         f"min{s.min_verify_len}-max{s.max_verify_len}-eps{s.survival_eps}-tiers{len(s.graph_tiers)}")
def test_plan_many_is_plan_step_after_step(spec, sps):
    rng = np.random.default_rng(abs(hash(repr(spec))) % 2**32)
    # the last case's confidences take few values: survivals tie across requests and positions
    for n, steps, levels in ((1, 6, None), (9, 20, None), (40, 5, None), (12, 8, 4)):
        seq = make_policy(spec, sps, 8192)
        for _ in range(3):  # history from batches of other sizes
            m = int(rng.integers(1, 12))
            seq.plan(rng.uniform(0.05, 1, (m, spec.block_size)), m)
        many = copy.deepcopy(seq)
        conf = rng.uniform(0.05, 1, (steps, n, spec.block_size)) ** 0.5
        if levels is not None:
            conf = np.ceil(conf * levels) / levels
        want = [seq.plan(conf[k], n) for k in range(steps)]
        verify_len, budget = many.plan_many(conf, steps, n)
        for k, (wl, wb) in enumerate(want):
            assert np.array_equal(verify_len[k], wl) and budget[k] == wb
        # only `taken` steps ran: later plans must see the history those steps leave
        taken = int(rng.integers(1, steps + 1))
        replay = copy.deepcopy(many)
        many.commit(taken)
        after = rng.uniform(0.05, 1, (3, n, spec.block_size))
        ref = make_policy(spec, sps, 8192)
        ref.__dict__.update(copy.deepcopy(replay.__dict__))
        for k in range(taken):
            ref.plan(conf[k], n)
        for k in range(3):
            a, b = many.plan(after[k], n), ref.plan(after[k], n)
            assert np.array_equal(a[0], b[0]) and a[1] == b[1]


def test_a_scenario_in_older_names_keeps_loading_under_block_size(tmp_path):
    """``num_draft_tokens``, block_size's older name in scenario files (the section's and a
    schedule rule's), still loads as block_size; both names at once must agree."""
    from dspark_sim.errors import InputError

    spec = Speculation.from_dict({"method": "schedule", "num_draft_tokens": 4,
                                  "schedule": [{"max_batch_size": 8, "num_draft_tokens": 4},
                                               {"max_batch_size": None, "num_draft_tokens": 1}]},
                                 file=tmp_path / "s.yaml")
    assert spec.block_size == 4 and spec.schedule == (ScheduleRule(8, 4), ScheduleRule(None, 1))
    with pytest.raises(InputError) as err:
        Speculation.from_dict({"method": "dspark", "block_size": 5, "num_draft_tokens": 6}, file=tmp_path / "s.yaml")
    assert err.value.key == "speculation.num_draft_tokens" and "s.yaml" in str(err.value)
