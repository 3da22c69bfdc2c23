"""Skip-ahead (stretches of steady decode steps) against step-by-step mode: the same numbers, bit for bit.

Skip-ahead draws the random words K steps would draw, in the order they would draw them, and
prices K steps with the scalar path's arithmetic, so there is no sampling noise between the
two modes: equivalence is tested as identity (tolerance zero) of summary.json, requests.csv
and steps.csv, for every method, both batching policies, both routers, one and two
replicas, light and saturated load, KV preemption, over many seeds.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from dspark_sim.serving.simulator import EXACT_ENV
from dspark_sim.serving.stretch import delay_to
from dspark_sim.metrics.collector import InOrder
from dspark_sim.run import run_scenario
from dspark_sim.scenario import Scenario

METHODS = {
    "none": {"method": "none"},
    "static": {"method": "static", "drafter": "mtp", "block_size": 3},
    "threshold": {"method": "threshold", "threshold": 0.4},
    "schedule": {"method": "schedule", "drafter": "eagle3",
                 "schedule": [{"max_batch_size": 4, "block_size": 5}, {"max_batch_size": 16, "block_size": 2},
                              {"max_batch_size": None, "block_size": 0}]},
    "algorithm1": {"method": "dspark", "scheduler": "algorithm1"},
    "production": {"method": "dspark", "scheduler": "production"},
}


def scenario(method: str, *, seed: int = 0, batching: str = "mixed", router: str = "round_robin",
             replicas: int = 1, load: str = "light", requests: int = 60, model: str = "qwen3-8b",
             gpu: str = "h200", memory: float | None = None, prompt_tokens: int | None = None,
             overlap: bool | None = None) -> Scenario:
    """Bursty traffic of mixed domains; ``light`` leaves replicas idle between bursts, ``heavy``
    queues requests behind a small cap, ``kv`` overflows a small KV cache (preemptions);
    ``prompt_tokens``: the prompts' mean length in place of the load's; ``overlap``: the
    engine's (None: the decoder's default, on)."""
    rate, cap, fraction, prompt, output = {"light": (4.0, 256, 0.9, 800, 120), "heavy": (60.0, 12, 0.9, 800, 120),
                                           "kv": (1000.0, 256, 0.13, 3000, 1500)}[load]
    memory = fraction if memory is None else memory
    prompt = prompt if prompt_tokens is None else prompt_tokens
    return Scenario.from_dict({
        "name": "skip", "model": model, "gpu": gpu, "seed": seed,
        "workload": {"synthetic": {"num_requests": requests, "rate_per_s": rate, "arrival": "gamma", "cv": 2.0,
                                   "prompt_tokens": {"dist": "lognormal", "mean": prompt, "sigma": 0.6},
                                   "output_tokens": {"dist": "lognormal", "mean": output, "sigma": 0.6}},
                     "domain": {"math": 0.3, "code": 0.3, "chat": 0.4}},
        "deployment": {"replicas": replicas, "router": router, "batching": batching, "max_running_requests": cap,
                       "gpu_memory_fraction": memory, "chunked_prefill_tokens": 2048},
        "speculation": METHODS[method], **({} if overlap is None else {"engine": {"overlap": overlap}})})


def outputs(sc: Scenario, exact: bool, tmp_path) -> tuple[dict, dict[str, bytes]]:
    out = tmp_path / ("exact" if exact else "skip")
    summary, _ = run_scenario(replace(sc, exact=exact), out, plots=False, show_progress=False)
    return summary, {name: (out / name).read_bytes() for name in ("summary.json", "requests.csv", "steps.csv")}


def assert_identical(sc: Scenario, tmp_path) -> dict:
    summary, exact = outputs(sc, True, tmp_path)
    _, skip = outputs(sc, False, tmp_path)
    for name in exact:
        assert skip[name] == exact[name], f"{name} differs between skip-ahead and step-by-step"
    return summary


CONFIGS = [(m, b, r, n, load) for m, b, (r, n), load in itertools.product(
    METHODS, ("mixed", "prefill_first"), (("round_robin", 1), ("round_robin", 2), ("least_outstanding", 2)),
    ("light", "heavy"))]


@pytest.mark.parametrize("method,batching,router,replicas,load", CONFIGS)
def test_skip_ahead_is_step_by_step(method, batching, router, replicas, load, tmp_path):
    seed = CONFIGS.index((method, batching, router, replicas, load))
    summary = assert_identical(scenario(method, seed=seed, batching=batching, router=router, replicas=replicas,
                                        load=load), tmp_path)
    assert summary.completed == 60


OVERLAP_CONFIGS = [(m, b, load) for m, b, load in itertools.product(METHODS, ("mixed", "prefill_first"),
                                                                    ("light", "heavy"))]


@pytest.mark.parametrize("method,batching,load", OVERLAP_CONFIGS)
def test_skip_ahead_is_step_by_step_with_overlapped_steps(method, batching, load, tmp_path):
    """A request that arrives during a step waits for the plan made after it (engine overlap):
    a stretch never runs past a step that plan could change."""
    sc = scenario(method, seed=200 + OVERLAP_CONFIGS.index((method, batching, load)), batching=batching,
                  load=load, replicas=2, router="least_outstanding")
    summary = assert_identical(replace(sc, engine=replace(sc.engine, overlap=True)), tmp_path)
    assert summary.completed == 60


@pytest.mark.parametrize("method", ["none", "production"])
def test_skip_ahead_is_step_by_step_with_overlap_through_preemptions(method, tmp_path):
    sc = scenario(method, seed=12, load="kv", requests=30)
    summary = assert_identical(replace(sc, engine=replace(sc.engine, overlap=True)), tmp_path)
    assert summary.num_preemptions > 0 and summary.completed == 30


@pytest.mark.parametrize("method", list(METHODS))
def test_skip_ahead_is_step_by_step_through_preemptions(method, tmp_path):
    summary = assert_identical(scenario(method, seed=11, load="kv", requests=30, replicas=2,
                                        router="least_outstanding"), tmp_path)
    assert summary.num_preemptions > 0 and summary.completed == 30


@pytest.mark.parametrize("method", ["none", "production"])
def test_skip_ahead_is_step_by_step_with_kv_every_request_holds(method, tmp_path):
    # DeepSeek-V4 holds its windows and compressor state besides its length: a small cache
    # (160k tokens on one B300) overflows, and the stretches must count that KV as a step does
    summary = assert_identical(scenario(method, seed=3, load="kv", requests=30, model="deepseek-v4-flash",
                                        gpu="b300", memory=0.505), tmp_path)
    assert summary.num_preemptions > 0 and summary.completed == 30


@pytest.mark.parametrize("method", ["none", "production"])
def test_skip_ahead_is_step_by_step_on_the_roofline(method, tmp_path, monkeypatch):
    # no profile shipped (neither measured nor projected): the roofline prices the stretches
    from dspark_sim.cost import profile

    monkeypatch.setattr(profile, "shipped_profile_path", lambda gpu, model: None)
    with pytest.warns(UserWarning, match="no measured profile"):
        summary = assert_identical(scenario(method, seed=4, gpu="a100"), tmp_path)
    assert summary.completed == 60


@pytest.mark.parametrize("method", ["none", "production"])
@pytest.mark.parametrize("replicas", [1, 2])
def test_skip_ahead_is_step_by_step_with_requests_rejected_on_arrival(method, replicas, tmp_path):
    # prompts around Qwen3-8B's context: the longer ones are rejected as they arrive, between
    # the others' stretches; their rows (status, reason) and every step's KV tokens must match
    sc = scenario(method, seed=5, replicas=replicas, load="heavy", requests=40, prompt_tokens=30000)
    with pytest.warns(UserWarning, match="rejected"):
        summary = assert_identical(sc, tmp_path)
    assert 0 < summary.rejected < 40 and summary.completed + summary.rejected == 40


@pytest.mark.parametrize("method", ["none", "production", "algorithm1"])
def test_skip_ahead_is_step_by_step_over_many_seeds(method, tmp_path):
    steps = []
    for seed in range(12):
        summary = assert_identical(scenario(method, seed=100 + seed, requests=25), tmp_path / str(seed))
        steps.append(summary.num_steps)
    assert len(set(steps)) > 6  # the seeds give different runs


def test_the_stretches_skip_most_steps(monkeypatch, tmp_path):
    # not a timing test: skip-ahead must actually advance steps in stretches, not one at a time
    from dspark_sim.serving import replica

    taken = []
    plan = replica.plan_stretch

    def spy(*args):
        st = plan(*args)
        taken.append(0 if st is None else st.steps)
        return st

    monkeypatch.setattr(replica, "plan_stretch", spy)
    for method in ("none", "production"):
        taken.clear()
        summary, _ = run_scenario(scenario(method, requests=40), tmp_path / method, plots=False, show_progress=False)
        assert sum(taken) > 0.6 * summary.num_steps, (method, sum(taken), summary.num_steps)
    taken.clear()  # step by step, through the scenario or the environment: not one stretch
    run_scenario(replace(scenario("production", requests=40), exact=True), None, show_progress=False)
    monkeypatch.setenv(EXACT_ENV, "1")
    run_scenario(scenario("production", requests=40), None, show_progress=False)
    assert not taken


@pytest.mark.parametrize("overlap", [False, True])
@pytest.mark.parametrize("method", ["production", "algorithm1", "static"])
def test_drafting_stretches_run_through_finishes(method, overlap, monkeypatch, tmp_path):
    # with nobody waiting a stretch with drafts draws a segment after each finish; an engine that
    # overlaps its steps decodes the unsure finishes once more in the next step, the first of the next
    # segment, with their ghost rows; drawn here with no regard for the next arrival, a stretch is cut
    # back into an earlier segment: the policy's state and the random stream go back there, and
    # the numbers stay step-by-step mode's
    from dspark_sim.serving import stretch

    draw = stretch.steps_to_draw
    monkeypatch.setattr(stretch, "steps_to_draw", lambda left, to_arrival_s, step_s, *rest:
                        draw(left, math.inf, 0.0, *rest))
    cuts, ghost_steps = [], []
    keep, add = stretch.Segments.keep, stretch.Segments.add

    def spy(self, taken):
        cuts.append((len(self.draws), taken < self.starts[-1] if taken else True))
        keep(self, taken)

    def spy_add(self, draw, taken, live, new, cum, left, ghosts=None):
        ghost_steps.append(ghosts is not None and len(self.draws) > 0)  # after a finish in the stretch
        add(self, draw, taken, live, new, cum, left, ghosts)

    monkeypatch.setattr(stretch.Segments, "keep", spy)
    monkeypatch.setattr(stretch.Segments, "add", spy_add)
    assert_identical(scenario(method, seed=7, requests=40, overlap=overlap), tmp_path)
    assert any(segments > 2 for segments, _ in cuts)
    assert any(segments > 1 and earlier for segments, earlier in cuts)
    assert any(ghost_steps) == overlap


@pytest.mark.parametrize("min_verify_len,seed,requests", [(1, 0, 40), (3, 1, 40)])
def test_a_stretch_cut_in_a_segment_that_starts_with_ghost_rows(min_verify_len, seed, requests, monkeypatch,
                                                                tmp_path):
    # the step after a finish (the ghost rows beside the requests left) is drawn and planned for more
    # rows than the steps after it, in one draw: cut at that step, or after it, the policy's state
    # (the production scheduler's lagged candidates) and the random stream go back to where step by
    # step leaves them, and the step after the stretch, drawn with it, is taken as drawn
    from dspark_sim.serving import stretch

    draw = stretch.steps_to_draw
    monkeypatch.setattr(stretch, "steps_to_draw", lambda left, to_arrival_s, step_s, *rest:
                        draw(left, math.inf, 0.0, *rest))
    cuts, keep = [], stretch.Segments.keep

    def spy(self, taken):
        i = int(np.searchsorted(self.starts, taken, side="right")) - 1 if taken else 0
        cuts.append((self.draws[i][0].head, taken - self.starts[i], len(self.draws) - 1 - i))
        keep(self, taken)

    monkeypatch.setattr(stretch.Segments, "keep", spy)
    sc = scenario("production", seed=seed, requests=requests, overlap=True)
    sc = replace(sc, speculation=replace(sc.speculation, min_verify_len=min_verify_len))
    assert_identical(sc, tmp_path)
    assert any(head and not step for head, step, _ in cuts)  # at the ghost rows' step
    assert any(head and step > 1 for head, step, _ in cuts)  # past it
    assert any(head and later for head, _, later in cuts)  # into an earlier segment


# -- the pieces a stretch is made of ---------------------------------------------------------------
@pytest.mark.parametrize("now,end", [(0.0, 1e-9), (0.1, 0.30000000000000004), (3599.123, 3600.5),
                                     (1e-300, 1e-3), (0.021511983607981712, 0.09348343587781206)])
def test_the_clock_lands_on_the_stretch_end(now, end):
    # exactly where a float can; the record takes its times from the replica's own clock anyway
    assert abs(now + delay_to(now, end) - end) <= math.ulp(end)
    t = now
    for step in np.random.default_rng(0).uniform(1e-4, 2e-2, 50):  # one addition a step, as step by step
        t += step
        assert abs(now + delay_to(now, t) - t) <= math.ulp(t)


def test_held_records_come_out_in_time_order():
    made = []
    clock = [0.0]
    order = InOrder(2, lambda: clock[0])
    order.put(5.0, 0, made.append, "a5")  # replica 0 ran ahead to 5
    order.put(7.0, 0, made.append, "a7")
    order.advance(0, 7.0)
    order.put(3.0, 1, made.append, "b3")
    order.advance(1, 4.0)  # replica 1 is busy until 4: nothing of replica 0 may pass it yet
    assert made == ["b3"]
    clock[0] = 6.0
    order.advance(1, None)  # replica 1 waits for work: the clock bounds it
    assert made == ["b3", "a5"]
    order.release()
    assert made == ["b3", "a5", "a7"]


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_skip_ahead_is_step_by_step_under_an_engine(engine, tmp_path):
    from dspark_sim.engines.model import EngineTerms

    sc = scenario("none", load="heavy")
    sc = replace(sc, engine=replace(Scenario.from_dict({**_raw_engine(engine)}).engine,
                                    terms=EngineTerms(step_host_s=1e-3, step_host_s_per_req=2e-5, frontend_s=0.004)))
    assert_identical(sc, tmp_path)


def _raw_engine(engine: str) -> dict:
    return {"name": "e", "model": "qwen3-8b", "gpu": "h200", "engine": engine,
            "workload": {"synthetic": {"num_requests": 1, "rate_per_s": 1.0,
                                       "prompt_tokens": {"dist": "constant", "mean": 10},
                                       "output_tokens": {"dist": "constant", "mean": 2}}}}


FRONT_END_CONFIGS = [("none", 1, "heavy", False), ("static", 2, "heavy", False), ("none", 1, "light", True),
                     ("production", 2, "light", True)]


@pytest.mark.parametrize("method,replicas,load,overlap", FRONT_END_CONFIGS)
def test_skip_ahead_is_step_by_step_with_a_streaming_front_end(method, replicas, load, overlap, tmp_path):
    """An engine's front end takes requests in between streaming the steps' output, and the
    client sees each step's tokens when it has streamed them: the steps a stretch runs register
    their messages when they end, and their tokens reach the client when they would step by step."""
    from dspark_sim.engines.model import Engine, EngineTerms

    sc = scenario(method, seed=31 + FRONT_END_CONFIGS.index((method, replicas, load, overlap)), load=load,
                  replicas=replicas, router="least_outstanding")
    terms = EngineTerms(step_host_s=1e-3, step_host_s_per_req=2e-5, frontend_s=2e-3, stream_s=2e-4)
    summary = assert_identical(replace(sc, engine=Engine(name="vllm", terms=terms, overlap=overlap)), tmp_path)
    assert summary.completed == 60


@pytest.mark.parametrize("method", ["none", "dspark"])
@pytest.mark.parametrize("multiplier", [8, 13])
def test_arrivals_released_together_land_where_one_event_each_would(method, multiplier, tmp_path):
    """With skip-ahead the arrivals during a step are released together (serving/release.py);
    the shipped code trace sped up lands the clock where one timeout from the last event cannot
    (a request would be seen an ulp early), so the release goes through the arrivals' own
    landings there, and the outputs stay those of one event per arrival (exact)."""
    from dspark_sim.capacity.search import probe_scenario
    from dspark_sim.scenario import load_scenario

    base = load_scenario(Path(__file__).resolve().parents[1] / "examples" / "azure_code_h200.yaml")
    if method == "none":
        base = replace(base, speculation=replace(base.speculation, method="none"))
    summary = assert_identical(probe_scenario(base, multiplier, max_requests=150), tmp_path)
    assert summary.completed == 150
