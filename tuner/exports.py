"""``dspark.yaml`` and the SGLang tables of a chosen trial.

``dspark.yaml`` is a scenario file (the keys of ``dspark_sim.scenario``): the
tuned trace, model, GPU and knobs, with ``sps_table`` naming the SGLang SPS
table next to it, so ``dspark-sim run dspark.yaml`` replays exactly what the
tuner scored and ``dspark-decode`` reads the same file. The tables are the
ones SGLang reads (``dspark_sps_table.py``, ``dspark_sts_table.py``).
"""
from __future__ import annotations

from pathlib import Path

from dspark_sim.cost.jsonio import write_json_atomic
from dspark_sim.metrics.outdir import atomic_write_text
from dspark_sim.scenario import Scenario
from dspark_sim.tuner.scenarios import configure, dump, rebase_paths

SPS_FILE = "sps_table.json"
STS_FILE = "sts.json"


def scheduler_table(scenario: Scenario):
    """The SPS table the simulator's DSpark scheduler derives for ``scenario`` (serving/simulator.py)."""
    from dspark_sim.cost import scenario_cost
    from dspark_sim.serving.simulator import scheduler_table as engine_table

    cost = scenario_cost(scenario, warn=False)
    return engine_table(scenario, cost)


def sts_calibration(scenario: Scenario) -> dict:
    """SGLang ``DSparkStsCalibration`` JSON: one temperature per draft position (``block_size`` of them).

    The temperatures of the preset the simulator used (``AcceptanceModel``)
    for the workload's dominant domain; 1.0 (identity) for a fixed-probability
    acceptance model, which has no head to calibrate.
    """
    from dspark_sim.acceptance import AcceptanceModel
    from dspark_sim.scenario import DOMAINS

    spec = scenario.speculation
    model = AcceptanceModel(spec.acceptance, scenario.model)
    domain = max(scenario.workload.domain_mix, key=lambda pair: pair[1])[0]
    if not model.presets:
        return {"temperatures": [1.0] * spec.block_size, "dataset": "identity (fixed_accept_prob)"}
    preset = model.presets[DOMAINS.index(domain)]
    temps = [float(t) for t in preset.sts_temperatures[: spec.block_size]]
    return {"temperatures": temps, "dataset": f"dspark-sim preset {preset.label}"}


def write_tables(scenario: Scenario, out: Path) -> list[str]:
    """``sps_table.json`` and ``sts.json`` for a DSpark scenario (nothing for other methods)."""
    if scenario.speculation.method != "dspark":
        return []
    scheduler_table(scenario).save(out / SPS_FILE)
    write_json_atomic(out / STS_FILE, sts_calibration(scenario))
    return [SPS_FILE, STS_FILE]


def write_dspark_yaml(base: dict, config: dict, out: Path, header: list[str]) -> str:
    """``dspark.yaml`` in ``out``: the trial's scenario, paths relative to the file.

    A DSpark trial names ``sps_table.json`` (:func:`write_tables` writes it),
    the very table the simulator derived when it scored the trial.
    """
    out = Path(out)
    raw = configure(base, config)
    if raw["speculation"].get("method") == "dspark":
        raw["speculation"]["sps_table"] = SPS_FILE
        domain = raw.get("workload", {}).get("domain", "chat")
        if isinstance(domain, str) or len(domain) == 1:  # sts.json holds the dominant domain's temperatures
            raw["speculation"]["sts"] = STS_FILE
    raw = rebase_paths(raw, out, out.resolve())
    atomic_write_text(out / "dspark.yaml", "".join(f"# {line}\n" for line in header) + dump(raw))
    return "dspark.yaml"
