"""Repeated studies (``--repeats``): the spread over sampler seeds, a gain only above it, resume
and determinism on real SQLite storage."""
from __future__ import annotations

import json
from dataclasses import replace

import optuna
import pytest
from test_tuner_fixtures import complete_trials, run_tiny, sqlite_url, tune_args

from dspark_sim.tuner import repeats, runner
from dspark_sim.tuner.cli import main as tune_main
from dspark_sim.tuner.cli import settings_for, tune_parser
from dspark_sim.tuner.repeats import Spread, compare, describe
from dspark_sim.tuner.tune import stored_settings


def _spread(method: str, *values: float, budget: int = 10) -> Spread:
    return Spread(method, tuple(values), len(values), budget, (budget,) * len(values))


@pytest.mark.parametrize("ours,theirs,verdict", [
    ((110.0, 111.0, 109.0), (100.0, 101.0, 99.0), repeats.GAIN),     # +10 %, spread ~1.4 %
    ((101.0, 110.0, 92.0), (100.0, 109.0, 91.0), repeats.WITHIN),   # +1 %, spread ~13 %
    ((90.0, 91.0, 89.0), (100.0, 101.0, 99.0), repeats.LOSS),       # -10 %, spread ~1.4 %
    ((110.0,), (100.0,), repeats.UNMEASURED),                       # one repeat: no spread
])
def test_a_gain_is_called_one_only_above_the_combined_spread(ours, theirs, verdict):
    c = compare(_spread("dspark", *ours), _spread("static", *theirs))
    assert c["verdict"] == verdict
    mean_ours, mean_theirs = sum(ours) / len(ours), sum(theirs) / len(theirs)
    assert c["gain"] == pytest.approx(mean_ours / mean_theirs - 1)
    words = describe(c)
    if verdict == repeats.GAIN:
        assert "a gain (above the combined spread" in words and "no gain" not in words
    elif verdict == repeats.WITHIN:
        assert "within spread" in words and "no gain claimed" in words and "a gain" not in words
    elif verdict == repeats.LOSS:
        assert words.startswith("-") and "a loss" in words
    else:
        assert "not a measured gain" in words and "a gain (" not in words


def test_the_combined_spread_is_the_deviations_in_quadrature():
    ours, theirs = _spread("dspark", 100.0, 104.0, 108.0), _spread("static", 90.0, 93.0, 96.0)
    c = compare(ours, theirs)
    assert c["spread"] == pytest.approx((4.0 ** 2 + 3.0 ** 2) ** 0.5 / 93.0)
    # the same means with twice the scatter: +11.8 % against a spread of ~10.8 %, then ~21.5 %
    wide = compare(_spread("dspark", 96.0, 104.0, 112.0), _spread("static", 87.0, 93.0, 99.0))
    assert c["verdict"] == repeats.GAIN and wide["verdict"] == repeats.GAIN
    wider = compare(_spread("dspark", 88.0, 104.0, 120.0), _spread("static", 81.0, 93.0, 105.0))
    assert wider["gain"] == pytest.approx(c["gain"]) and wider["verdict"] == repeats.WITHIN


def test_a_baseline_that_never_meets_the_slo_is_not_compared_and_budgets_are_flagged():
    ours = _spread("dspark", 100.0, 101.0)
    missed = Spread("static", (), 2, 10, (10, 10))
    short = Spread("schedule", (90.0, 91.0), 2, 10, (10, 7))  # a timeout cut one repeat short
    data = repeats.summary({"dspark": ours, "static": missed, "schedule": short,
                            "none": _spread("none", 50.0, 51.0, budget=4)}, 2)
    assert data["methods"]["static"]["vs_dspark"]["verdict"] == repeats.NOT_COMPARABLE
    assert not data["methods"]["static"]["unequal_budget"]
    assert data["methods"]["schedule"]["unequal_budget"] and data["methods"]["none"]["unequal_budget"]
    text = "\n".join(repeats.table(data, "tok/s/GPU", {}))
    assert "| static | 10 | 0 of 2 | - | - | - | not comparable" in text
    assert "| schedule | 10 (UNEQUAL budget); completed 10, 7 |" in text


def test_repeats_resume_and_are_deterministic(tmp_path):
    """Each repeat is its own study with the next sampler seed; one repeat extended to two on
    resume holds the same trials as two in one go; report.md and report.json show the spread."""
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir(), two.mkdir()
    out = run_tiny(two, "rep", "--repeats", "2", "--baseline-trials", "1", trials=2, baselines="none")
    stored = stored_settings(sqlite_url(two), "rep")
    assert stored.repeats == 2
    for n in (1, 2):  # the same settings in another storage, one repeat, then resumed with two
        runner.run(replace(stored, repeats=n).jobs(sqlite_url(one), "rep"), workers=1, timeout_s=None,
                   show_progress=False)
    names = {s.study_name for s in optuna.get_all_study_summaries(sqlite_url(two))}
    assert names == {"rep", "rep.none", "rep.r1", "rep.none.r1"}
    for name in names:
        a, b = (complete_trials(sqlite_url(d), name) for d in (one, two))
        assert [(t.params, t.values) for t in a] == [(t.params, t.values) for t in b]
    assert [t.params for t in complete_trials(sqlite_url(two), "rep")] != \
        [t.params for t in complete_trials(sqlite_url(two), "rep.r1")]  # another sampler seed
    # --repeats on resume is a budget, as --trials is
    args = tune_parser().parse_args(["--study", "rep", "--repeats", "3"])
    assert settings_for(args, sqlite_url(two))[1].repeats == 3
    data = json.loads((out / "report.json").read_text())
    assert data["sampler_seeds"] == [0, 1] and data["comparison"]["repeats"] == 2
    winners = [optuna.load_study(study_name=n, storage=sqlite_url(two)).user_attrs["winner"] for n in ("rep", "rep.r1")]
    ours = data["comparison"]["methods"]["dspark"]
    assert ours["values"] == [w["values"][0] for w in winners if w["feasible"]]
    assert data["winners"]["dspark"]["value"] == max(ours["values"])  # the best over the repeats is exported
    report = (out / "report.md").read_text()
    assert "## Comparison over 2 repeats" in report and f"{ours['mean']:,.1f}" in report
    assert repeats.describe(data["comparison"]["methods"]["none"]["vs_dspark"]) in report
    assert f"study {data['winners']['dspark']['study']}" in (out / "dspark.yaml").read_text()


@pytest.mark.parametrize("value", ["0", "51"])
def test_repeats_out_of_bounds_is_one_line_exit_2(tmp_path, capsys, value):
    assert tune_main(tune_args(tmp_path, "bad", "--repeats", value)) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and "--repeats" in err and "\n" not in err
