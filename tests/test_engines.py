"""The scenario's ``engine:``: defaults, runtime limits, host terms, and their use in every command."""
import json
from dataclasses import replace

import pytest
from conftest import synthetic_scenario

from dspark_sim.catalog import get_gpu
from dspark_sim.cli import main
from dspark_sim.cost import scenario_cost
from dspark_sim.cost.base import StepWork
from dspark_sim.serving.simulator import build_context
from dspark_sim.engines.model import Engine, EngineTerms
from dspark_sim.provenance import scenario_provenance
from dspark_sim.errors import InputError
from dspark_sim.metrics.collector import Collector
from dspark_sim.run import run_scenario
from dspark_sim.scenario import Scenario, load_scenario


def _scenario(deployment=None, **over) -> Scenario:
    data = synthetic_scenario(num_requests=4, **over)
    if deployment is not None:  # as written, without the helper's budgets
        data["deployment"] = deployment
    return Scenario.from_dict(data)


def test_no_engine_key_is_the_decoder_with_the_scenario_as_written():
    plain = _scenario()
    assert plain.engine == Engine()
    assert plain.engine.is_decoder
    assert plain.deployment.max_running_requests == 256 and plain.deployment.chunked_prefill_tokens is None


def test_sglang_defaults_fill_only_what_the_scenario_leaves_out():
    dep = {"replicas": 1, "tp": 1}
    sglang = _scenario(engine={"name": "sglang"}, deployment=dep).deployment
    # memory_hook.py: 8192-token chunks between 90 and 160 GiB; max_prefill_tokens 16384; no mixed chunk
    assert sglang.chunked_prefill_tokens == 8192 and sglang.max_batched_tokens == 16384
    assert sglang.batching == "prefill_first"
    assert 0.8 < sglang.gpu_memory_fraction < 0.95
    given = _scenario(engine={"name": "sglang"}, deployment={**dep, "chunked_prefill_tokens": 2048}).deployment
    assert given.chunked_prefill_tokens == 2048 and given.batching == "prefill_first"


def test_vllm_defaults_depend_on_the_gpu():
    h200 = _scenario(engine="vllm", deployment={"replicas": 1, "tp": 1}).deployment
    assert (h200.max_batched_tokens, h200.max_running_requests, h200.gpu_memory_fraction) == (8192, 1024, 0.92)
    a100 = Engine("vllm").deployment_defaults(get_gpu("a100"), 1)
    assert (a100["max_batched_tokens"], a100["max_running_requests"]) == (2048, 256)


@pytest.mark.parametrize("engine, key, why", [
    ({"name": "tgi"}, "engine.name", "expected one of"),
    ({"name": "vllm", "version": "latest"}, "engine.version", "release number"),
    ({"name": "vllm", "speed": 2}, "engine.speed", "unknown key"),
    ({"name": "decoder", "calibration": "x.json"}, "engine.calibration", "decoder"),
    ({"name": "sglang", "overlap": "yes"}, "engine.overlap", "true or false"),
    ({"name": "sglang", "multi_step": 4}, "engine.multi_step", "vLLM setting"),
    ({"name": "vllm", "multi_step": 0}, "engine.multi_step", "from 1 to 64"),
])
def test_bad_engine_names_the_key(write_scenario, engine, key, why):
    path = write_scenario(synthetic_scenario(engine=engine))
    with pytest.raises(InputError) as err:
        load_scenario(path)
    assert err.value.key == key and why in str(err.value)


def test_any_release_runs_on_the_nearest_modelled_ones_defaults_and_says_so():
    old = _scenario(engine={"name": "vllm", "version": "0.11.0"})
    modelled = _scenario(engine={"name": "vllm"})
    assert old.engine.label == "vllm 0.11.0 (defaults of 0.33.0)"
    assert old.deployment == modelled.deployment  # the modelled release's defaults apply
    assert not old.engine.overlapped and modelled.engine.overlapped  # as 0.11 did (asynchronous scheduling later)
    prov = scenario_provenance(old)
    assert "0.33.0, the nearest modelled release" in prov["cost_model"]["engine_release"]
    assert any("0.11.0 is not modelled" in c for c in prov["caveats"])
    assert "engine_release" not in scenario_provenance(modelled)["cost_model"]
    assert _scenario(engine={"name": "sglang", "version": "0.3.0"}).engine.overlapped is False
    assert _scenario(engine={"name": "sglang", "version": "0.5.16"}).engine.overlapped is True
    assert _scenario(engine={"name": "vllm", "version": "0.11.0", "overlap": True}).engine.overlapped


def test_overlap_is_the_engines_unless_the_scenario_says():
    from dspark_sim.engines.model import OVERLAP

    for name in OVERLAP:
        assert _scenario(engine=name).engine.overlapped == OVERLAP[name]
        for on in (True, False):
            engine = _scenario(engine={"name": name, "overlap": on}).engine
            assert engine.overlapped is on
            assert build_context(_scenario(engine={"name": name, "overlap": on}), Collector(None)).overlap is on


def test_sglang_caps_running_requests_by_its_kv_pool():
    scenario = _scenario(engine="sglang", deployment={"replicas": 1, "tp": 1})
    ctx = build_context(scenario, Collector(None))
    kv = ctx.kv_capacity_tokens
    assert ctx.max_running == min(4096, max(min(int(kv / ctx.admission.max_context * 512), 4096), 2048), kv // 2)
    assert build_context(_scenario(), Collector(None)).max_running == 0  # the decoder: the deployment's


def _with_terms(scenario, **terms):
    return replace(scenario, engine=replace(scenario.engine, terms=EngineTerms(**terms)))


def test_engine_host_terms_replace_the_decoders_host_time():
    work = StepWork(decode_reqs=8, verify_tokens=8, decode_context_tokens=8 * 1000, running_reqs=8)
    decoder = scenario_cost(_scenario(), warn=False).breakdown(work)
    sglang = _with_terms(_scenario(engine={"name": "sglang", "overlap": False}), step_host_s=1e-3,
                         step_host_s_per_req=1e-5)
    parts = scenario_cost(sglang, warn=False).breakdown(work)
    assert parts["host_s"] == 0.0 and parts["sched_s"] == 0.0
    assert parts["engine_s"] == pytest.approx(1e-3 + 8e-5)
    gpu = ("overhead_s", "linear_s", "per_req_s", "attn_s")
    assert [parts[k] for k in gpu] == [decoder[k] for k in gpu]


@pytest.mark.parametrize("host_s", [1e-3, 0.5])
def test_an_overlapped_step_lasts_the_longer_of_gpu_and_host_work(host_s):
    """With overlap the host's work runs while the GPU's does: only what exceeds it shows."""
    work = StepWork(decode_reqs=8, verify_tokens=8, decode_context_tokens=8 * 1000, running_reqs=8)
    steps = {}
    for overlap in (False, True):
        scenario = _with_terms(_scenario(engine={"name": "sglang", "overlap": overlap}), step_host_s=host_s)
        steps[overlap] = scenario_cost(scenario, warn=False).step_s(work)
    gpu_s = steps[False] - host_s
    assert steps[True] == pytest.approx(max(gpu_s, host_s))


def test_a_multi_step_schedule_spreads_its_work_per_request_over_its_decode_steps():
    decode = StepWork(decode_reqs=8, verify_tokens=8, decode_context_tokens=8 * 1000, running_reqs=8)
    prompt = StepWork(prefill_tokens=512, prefill_reqs=1, running_reqs=1)
    parts = {}
    for steps in (1, 10):
        scenario = _with_terms(_scenario(engine={"name": "vllm", "overlap": False, "multi_step": steps}),
                               step_host_s=1e-3, step_host_s_per_req=1e-4)
        cost = scenario_cost(scenario, warn=False)
        parts[steps] = (cost.breakdown(decode)["engine_s"], cost.breakdown(prompt)["engine_s"])
    assert parts[1][0] == pytest.approx(1e-3 + 8e-4) and parts[10][0] == pytest.approx(1e-3 + 8e-4 / 10)
    assert parts[10][1] == parts[1][1] == pytest.approx(1.1e-3)  # a prompt step is scheduled alone


def test_projection_moves_gpu_work_and_leaves_engine_time():
    work = StepWork(decode_reqs=32, verify_tokens=32, decode_context_tokens=32 * 2000, running_reqs=32)
    h200 = _with_terms(_scenario(engine={"name": "vllm", "overlap": False}), step_host_s=2e-3)
    b200 = replace(h200, gpu="b200")
    on_h200 = scenario_cost(h200, warn=False).breakdown(work)
    on_b200 = scenario_cost(b200, warn=False).breakdown(work)
    assert on_h200["engine_s"] == on_b200["engine_s"] == pytest.approx(2e-3)
    assert on_b200["linear_s"] < on_h200["linear_s"]  # the kernels follow the GPU


def test_eager_floor_above_the_graph_limit():
    scenario = _with_terms(_scenario(engine="sglang", deployment={"replicas": 1, "tp": 1}), eager_step_s=0.5)
    cost = scenario_cost(scenario, warn=False)
    assert cost.graph_max_tokens == 256  # memory_hook.py: tp < 4 between 90 and 160 GiB
    below = cost.breakdown(StepWork(decode_reqs=256, verify_tokens=256, decode_context_tokens=256 * 100))
    above = cost.breakdown(StepWork(decode_reqs=257, verify_tokens=257, decode_context_tokens=257 * 100))
    assert below["eager_s"] == 0.0
    assert sum(above.values()) == pytest.approx(0.5)


def test_front_end_time_adds_to_ttft_only(tmp_path):
    base = Scenario.from_dict(synthetic_scenario(num_requests=1, engine="vllm"))
    runs = [run_scenario(_with_terms(base, frontend_s=f), tmp_path / str(f), plots=False, show_progress=False)[0]
            for f in (0.0, 0.04)]
    assert runs[1].mean_ttft_ms - runs[0].mean_ttft_ms == pytest.approx(40.0, abs=1e-6)
    assert runs[1].mean_tpot_ms == pytest.approx(runs[0].mean_tpot_ms)
    assert runs[0].engine == "vllm 0.33.0"


def test_every_command_takes_the_engine(write_scenario, tmp_path, capsys):
    data = synthetic_scenario(num_requests=6, rate_per_s=4.0, engine={"name": "sglang", "version": "0.5.23"})
    path = write_scenario(data)
    assert main(["run", str(path), "--out", str(tmp_path / "run"), "--no-plots", "--quiet"]) == 0
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["engine"] == "sglang 0.5.23"
    assert main(["compare", str(path), "--methods", "none", "--concurrency", "2", "--requests", "4",
                 "--out", str(tmp_path / "cmp"), "--quiet"]) == 0
    assert main(["capacity", str(path), "--gpus", "h200", "--methods", "none", "--tp", "1", "--max-requests", "8",
                 "--max-sims", "3", "--out", str(tmp_path / "cap"), "--no-plots", "--quiet"]) == 0
    from dspark_sim.tuner.objective import simulate

    tuned = simulate(data, [0])
    assert tuned[0].engine == "sglang 0.5.23"


def test_a_burst_queues_at_the_front_end(tmp_path):
    """Three requests at once through a 50 ms front end reach the scheduler 50, 100 and 150 ms in."""
    data = synthetic_scenario(num_requests=3, rate_per_s=1e9, prompt=64, output=2, engine="sglang")
    scenario = _with_terms(Scenario.from_dict(data), frontend_s=0.05)
    run_scenario(scenario, tmp_path / "r", plots=False, show_progress=False)
    import csv

    rows = list(csv.DictReader((tmp_path / "r" / "requests.csv").open()))
    waits = sorted(float(r["first_scheduled_s"]) - float(r["arrival_s"]) for r in rows)
    assert waits == pytest.approx([0.05, 0.10, 0.15], abs=1e-9)


def test_sglang_caps_running_requests_as_it_does_when_speculating():
    dep = {"replicas": 1, "tp": 1}
    assert _scenario(engine="sglang", deployment=dep).deployment.max_running_requests == 4096
    for method in ("dspark", "static"):
        spec = _scenario(engine="sglang", deployment=dep, speculation={"method": method}).deployment
        assert spec.max_running_requests == 48  # SGLang resets it to 48 for speculative decoding
    given = _scenario(engine="sglang", deployment={**dep, "max_running_requests": 200},
                      speculation={"method": "dspark"})
    assert given.deployment.max_running_requests == 200
    v4 = {"model": "deepseek-v4-flash", "gpu": "b300", "deployment": {"replicas": 1, "tp": 8}}
    assert _scenario(engine="sglang", **v4).deployment.max_running_requests == 256  # V4's own, set first
    assert _scenario(engine="sglang", speculation={"method": "dspark"}, **v4).deployment.max_running_requests == 256
    assert _scenario(engine="vllm", deployment=dep, speculation={"method": "dspark"}).deployment \
        .max_running_requests == 1024


def test_release_numbers_order_as_releases_do():
    from dspark_sim.engines.releases import release_of, version_key

    keys = [version_key(v) for v in ("0.5.6", "0.5.6.post1", "0.5.15", "0.5.23rc1", "0.5.23", "v0.6.0", "1.2.0rc1")]
    assert keys == sorted(keys) and None not in keys
    assert version_key("latest") is None
    assert release_of("vllm", "0.12.0").term("overlap", True) is True  # asynchronous scheduling by default
    assert release_of("vllm", "0.11.2").terms == (("overlap", False),)
    assert release_of("trtllm", "1.0.0").modelled == "1.2.0rc1" and not release_of("trtllm", "1.0.0").terms
