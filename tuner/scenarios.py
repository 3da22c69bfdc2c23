"""Trial scenarios as YAML mappings: the base scenario file with a trial's knobs merged in.

Trials are built from the base file's mapping, not from dataclasses, so that
``dspark.yaml`` is byte for byte the scenario that was simulated: what
``dspark-sim run dspark.yaml`` replays is what the tuner scored. Every mapping
is validated by :meth:`dspark_sim.scenario.Scenario.from_dict` before it runs, and its
errors name the base scenario file.
"""
from __future__ import annotations

import copy
import os
from pathlib import Path

import yaml

from dspark_sim.catalog import get_gpu, get_model
from dspark_sim.config import load_yaml
from dspark_sim.scenario import Scenario
from dspark_sim.tuner.space import tier_ladder

# Keys whose values are file paths (relative to the scenario file), as dotted paths.
PATH_KEYS = ("workload.trace", "workload.synthetic.prompt_tokens.file",
             "workload.synthetic.output_tokens.file", "speculation.sps_table", "speculation.sts",
             "speculation.acceptance.preset_file")


def load_base(path: str | Path, *, gpu: str | None = None, model: str | None = None,
              slo: dict | None = None) -> dict:
    """The scenario file at ``path`` as a mapping with absolute paths and the CLI overrides applied.

    Validated on the way (bad input raises :class:`dspark_sim.errors.InputError`).
    """
    if gpu is not None:
        get_gpu(gpu, key="--gpu")  # a flag's error names the flag, not the scenario it overrides
    if model is not None:
        get_model(model, key="--model")
    path = Path(path).resolve()
    raw = load_yaml(path)
    Scenario.from_dict(raw, file=path)  # the file itself must be valid before anything is changed
    raw = rebase_paths(raw, path.parent, None)
    if gpu is not None:
        raw["gpu"] = gpu
    if model is not None:
        raw["model"] = model
    if slo:
        raw["slo"] = {**(raw.get("slo") or {}), **slo}
    to_scenario(raw, name_hint=path)  # and so must the overridden one
    return raw


def rebase_paths(raw: dict, base: Path, target: Path | None, *, names_only: bool = False) -> dict:
    """A copy of ``raw`` with path keys made absolute (``target=None``) or relative to ``target``.

    ``names_only`` keeps just each file's name (to compare scenarios across machines).
    """
    out = copy.deepcopy(raw)
    for dotted in PATH_KEYS:
        *parents, leaf = dotted.split(".")
        node = out
        for key in parents:
            node = node.get(key) if isinstance(node, dict) else None
        if not isinstance(node, dict) or not isinstance(node.get(leaf), str):
            continue
        absolute = (base / node[leaf]).resolve()
        if names_only:
            node[leaf] = absolute.name
        else:
            node[leaf] = str(absolute) if target is None else os.path.relpath(absolute, target)
    return out


def configure(base: dict, config: dict, *, seed: int | None = None) -> dict:
    """``base`` with a trial's ``config`` (``space.suggest`` output) merged in.

    The speculation section is replaced, not merged, except for the base's
    acceptance settings; named graph-tier ladders become token lists.
    """
    raw = copy.deepcopy(base)
    dep = {**(raw.get("deployment") or {}), **config.get("deployment", {})}
    if dep.get("chunked_prefill_tokens") is not None and dep.get("max_batched_tokens"):
        dep["chunked_prefill_tokens"] = min(dep["chunked_prefill_tokens"], dep["max_batched_tokens"])
    raw["deployment"] = dep
    spec = dict(config.get("speculation", {}))
    if isinstance(spec.get("graph_tiers"), str):
        spec["graph_tiers"] = tier_ladder(spec["graph_tiers"], dep.get("max_batched_tokens", 8192))
    acceptance = (raw.get("speculation") or {}).get("acceptance")
    if acceptance is not None and spec.get("method", "none") != "none":
        spec["acceptance"] = {k: v for k, v in acceptance.items() if k != "drafter"}
    raw["speculation"] = spec
    if seed is not None:
        raw["seed"] = seed
    return raw


def to_scenario(raw: dict, *, name_hint: str | Path = "trial") -> Scenario:
    """The validated Scenario of the mapping ``raw`` (paths absolute); errors name ``name_hint``."""
    return Scenario.from_dict(raw, file=name_hint)


def dump(raw: dict) -> str:
    """YAML text of a scenario mapping, keys in the order given."""
    return yaml.safe_dump(raw, sort_keys=False, default_flow_style=None, width=100)
