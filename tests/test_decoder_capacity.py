"""The decoder's capacity search and its page: bisection on the rate, several processes' runs."""
import pytest

from dspark_sim.validation.capacity_check import capacity_row, merge_runs
from dspark_sim.validation.capacity_serve import MAX_PROBES, search


@pytest.mark.parametrize("threshold", [0.5, 0.97, 1.0, 1.3, 2.0])
def test_search_brackets_the_threshold_from_the_simulators_answer(threshold):
    served = []

    def serve_at(x):
        served.append(x)
        return {"passed": x <= threshold}
    found = search(serve_at, 1.0, deadline_s=float("inf"), precision=0.03)
    lo, hi = found["passed_multiplier"], found["failed_multiplier"]
    assert len(served) <= MAX_PROBES
    assert lo is not None and lo <= threshold and (hi is None or hi > threshold)
    if hi is not None and len(served) < MAX_PROBES:
        assert hi / lo - 1 <= 0.03


def _run(uuid, results, **extra):
    return {"what": "capacity", "provenance": {"gpu_uuid": uuid}, "precision": 0.03, "budget_s": 100.0,
            "results": results, **extra}


def test_merged_runs_keep_each_searchs_process_and_the_later_one_wins():
    first = _run("GPU-a", {"chat": {"dspark": {"rate_rps": 36.0}}, "long": {"dspark": {"rate_rps": 10.6}}})
    second = _run("GPU-b", {"chat": {"mtp3": {"rate_rps": 33.0}}}, wall_s=101.6)
    third = _run("GPU-c", {"long": {"dspark": {"rate_rps": 10.8}}})
    merged = merge_runs([first, second, third])
    assert merged["results"]["chat"]["dspark"] == {"rate_rps": 36.0, "provenance": {"gpu_uuid": "GPU-a"}}
    assert merged["results"]["chat"]["mtp3"]["provenance"] == {"gpu_uuid": "GPU-b"}
    assert merged["results"]["long"]["dspark"]["rate_rps"] == 10.8
    assert [p["methods"] for p in merged["parts"]] == [["dspark"], ["mtp3"], ["dspark"]]
    assert merge_runs([merged])["results"] == merged["results"]  # merging a merged file changes nothing
    assert merge_runs([merged])["parts"] == merged["parts"]


@pytest.mark.parametrize("sim, interval, within, covered", [
    (10.4, (9.8, 11.0), True, True), (10.45, (10.5, 11.5), True, False), (12.0, (9.0, 13.0), False, True)])
def test_a_capacity_row_is_within_and_covered_only_by_its_own_measure(sim, interval, within, covered):
    row = capacity_row("chat", "dspark", {"rate_rps": 10.0, "provenance": {}},
               {"rate_rps": sim, "interval_rps": interval})
    assert (row["within"], row["covered"]) == (within, covered)
    assert row["rel_error"] == pytest.approx(sim / 10.0 - 1)


def test_each_decoder_probe_is_set_beside_the_simulators_at_the_same_rate():
    from pathlib import Path

    from dspark_sim.validation.capacity_check import probe_pairs

    cases = Path(__file__).resolve().parents[1] / "profiles" / "h200" / "validation" / "capacity"
    real = {"rate_per_s_at_x1": 6.0, "probes": [
        {"multiplier": 1.5, "rate_rps": 9.0, "passed": False, "p99_tpot_ms": 50.0, "p99_ttft_ms": 900.0},
        {"multiplier": 0.5, "rate_rps": 3.0, "passed": True, "p99_tpot_ms": 20.0, "p99_ttft_ms": 300.0}]}
    pairs = probe_pairs("cap-long", "none", real, cases)
    assert [p["rate_rps"] for p in pairs] == [3.0, 9.0]  # by rate
    assert pairs[0]["real"] == {"passed": True, "p99_tpot_ms": 20.0, "p99_ttft_ms": 300.0}
    low, high = pairs[0]["sim"], pairs[1]["sim"]
    assert low["passed"] and 0 < low["p99_tpot_ms"] < high["p99_tpot_ms"]  # a third of the load against 1.5x


def test_a_second_hosts_capacity_is_set_beside_the_same_answer_and_the_first_hosts():
    from dspark_sim.validation.capacity_check import page_text

    sim = {"rate_rps": 10.4, "interval_rps": (9.8, 11.0)}
    first = capacity_row("chat", "dspark", {"rate_rps": 10.0, "provenance": {"gpu": "H200"}}, sim)
    second = capacity_row("chat", "dspark", {"rate_rps": 9.5, "provenance": {"gpu": "H200"}}, sim)
    second["host_to_host"] = 9.5 / 10.0 - 1
    data = {"made_by": "test", "simulator_commit": "x", "traces": {}, "rows": [first],
            "real": [{"provenance": {"gpu": "H200", "gpu_uuid": "GPU-a"}}],
            "replicate": {"rows": [second], "real": [{"provenance": {"gpu": "H200", "gpu_uuid": "GPU-b"}}]}}
    text = page_text(data)
    head, rep = text.split("## The same on a second H200")
    assert "| chat | dspark | 10.00" in head and "+4.0% | yes | yes |" in head
    assert "GPU-b" in rep and "| chat | dspark | 9.50" in rep and "+9.5% | no | no | -5.0% |" in rep
    assert "second H200" not in page_text({k: v for k, v in data.items() if k != "replicate"})


def test_a_second_gpus_searches_must_have_been_served_on_that_gpu(tmp_path):
    import json

    from dspark_sim.errors import InputError
    from dspark_sim.validation.capacity_check import replicate_section

    path = tmp_path / "capacity.json"
    path.write_text(json.dumps(_run("GPU-a", {"cap-chat": {"none": {"rate_rps": 20.0}}}) | {
        "provenance": {"gpu": "NVIDIA H200", "gpu_uuid": "GPU-a"}}))
    with pytest.raises(InputError, match="provenance.gpu"):
        replicate_section([path], "h100", tmp_path, [], {})


def test_a_probes_run_record_is_found_in_its_archive_and_its_steps_priced(tmp_path):
    """The simulator's own run of a probe stands in for the decoder's: unpacked from an archive
    by name, at any depth, its steps priced by the profile they were simulated with come out at
    the time they took, to the microsecond a second."""
    import tarfile
    from pathlib import Path

    from dspark_sim.run import run_scenario
    from dspark_sim.scenario import load_scenario
    from dspark_sim.validation.capacity_check import probe_records, replay_busy_error

    cases = Path(__file__).resolve().parents[1] / "profiles" / "h200" / "validation" / "capacity"
    run = tmp_path / "capacity_runs" / "none" / "cap-long__none__x1.0000"
    run_scenario(load_scenario(cases / "cap-long__none.yaml"), run, plots=False, show_progress=False)
    with tarfile.open(tmp_path / "capacity_runs.tgz", "w:gz") as tar:
        tar.add(tmp_path / "capacity_runs", arcname="capacity_runs")
    found = probe_records(tmp_path / "capacity_runs.tgz", tmp_path / "unpacked")
    assert list(found) == ["cap-long__none__x1.0000"]
    assert abs(replay_busy_error(found["cap-long__none__x1.0000"] / "steps.csv", "none")) < 1e-6
    assert probe_records(tmp_path / "missing.tgz", tmp_path / "none") == {}
