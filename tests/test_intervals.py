"""Intervals: the corners come from the measured error sources, and the interval covers a
simulated truth whose cost model and acceptance are perturbed within them (and not one
perturbed well beyond them)."""
from __future__ import annotations

from dataclasses import replace

import pytest
from conftest import synthetic_scenario

from dspark_sim.capacity.plan import interval_fields, plan
from dspark_sim.capacity.search import offered_rate, probe_scenario
from dspark_sim.intervals import corners, error_sources
from dspark_sim.scenario import Scenario
from dspark_sim.slo import Slo

SLO = Slo(tpot_ms=12.0, max_queue_ms=5000.0, attainment=0.9)


def _scenario(**over) -> Scenario:
    over = {"speculation": {"method": "dspark", "block_size": 7}, **over}
    data = synthetic_scenario(num_requests=120, rate_per_s=4.0, prompt=400, output=60, **over)
    return Scenario.from_dict(data)


def test_error_sources_are_the_measured_ones():
    src = error_sources(_scenario())
    assert 0 < src.host_rel < 0.05 and "two NVIDIA H200 hosts" in src.host_from
    assert src.profile_rel > 0 and "verify" in src.profile_from
    assert src.cost_rel == pytest.approx((src.profile_rel ** 2 + src.host_rel ** 2) ** 0.5)
    assert (src.low_dataset, src.high_dataset) == ("aime25", "gsm8k")  # math's least / most accepted
    low, high = corners(_scenario(), src)
    assert low.cost_scale == pytest.approx(1 + src.cost_rel) and high.cost_scale == pytest.approx(1 - src.cost_rel)
    assert low.speculation.acceptance.dataset == "aime25"
    # a borrowed preset has no Table 1 row: no acceptance corner, and it says why
    mtp = error_sources(_scenario(speculation={"method": "static", "drafter": "mtp", "block_size": 3}))
    assert mtp.low_dataset is None and "no Table 1 row" in mtp.acceptance_note


def _rate(scenario: Scenario) -> float:
    p = plan(scenario, "h200", "dspark", SLO, 1.0, offered_rate(scenario), max_requests=None, tp_choices=(1,),
             precision=0.05, max_sims=10)
    return p, p.best.search.rate_rps


def test_interval_covers_a_truth_perturbed_within_the_error_sources():
    base = _scenario()
    nominal, _ = _rate(base)
    fields = interval_fields(nominal)
    lo, hi = fields["rate_per_replica_rps_interval"]
    assert lo < hi
    src = error_sources(probe_scenario(base, 1.0, tp=1))
    inside = [replace(base, cost_scale=1 + 0.7 * src.cost_rel,
                      speculation=replace(base.speculation, acceptance=replace(base.speculation.acceptance,
                                                                               dataset="math500"))),
              replace(base, cost_scale=1 - 0.7 * src.cost_rel)]
    for truth in inside:
        _, rate = _rate(truth)
        assert lo * 0.95 <= rate <= hi * 1.05, (truth.cost_scale, rate, lo, hi)  # 0.05: the search's precision
    # a truth far outside the measured errors falls outside: the check can fail
    _, slow = _rate(replace(base, cost_scale=1.6))
    assert slow < lo * 0.95
