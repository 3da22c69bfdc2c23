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
from dspark_sim.catalog.drafters import (PLACEHOLDER, Drafter, absolute_checkpoint, check_checkpoint,
                                         published_drafter, trained_block_of)
from dspark_sim.config import load_yaml, located
from dspark_sim.userfiles import resolved
from dspark_sim.scenario import Scenario
from dspark_sim.tuner.space import tier_ladder

# Keys whose values are file paths (relative to the scenario file), as dotted paths.
PATH_KEYS = ("workload.trace", "workload.synthetic.prompt_tokens.file",
             "workload.synthetic.output_tokens.file", "speculation.sps_table", "speculation.sts",
             "speculation.acceptance.preset_file")
OLD_BLOCK_SIZE_KEY = "num_draft_tokens"  # block_size in studies stored before the tuner said block_size


def load_base(path: str | Path, *, gpu: str | None = None, model: str | None = None,
              slo: dict | None = None, drafter: str | None = None) -> dict:
    """The scenario file at ``path`` as a mapping with absolute paths and the CLI overrides applied.

    ``drafter`` (``--drafter``) sets ``speculation.drafter_checkpoint``, a Hugging Face id or a
    path. Validated on the way (bad input raises :class:`dspark_sim.errors.InputError`).
    """
    if gpu is not None:
        get_gpu(gpu, key="--gpu")  # a flag's error names the flag, not the scenario it overrides
    if model is not None:
        get_model(model, key="--model")
    path = resolved(path, None, "--scenario")
    raw = load_yaml(path)
    Scenario.from_dict(raw, file=path)  # the file itself must be valid before anything is changed
    raw = rebase_paths(raw, path.parent, None)
    if gpu is not None:
        raw["gpu"] = gpu
    if model is not None:
        raw["model"] = model
    if slo:
        raw["slo"] = {**(raw.get("slo") or {}), **slo}
    spec = dict(raw.get("speculation") or {})
    if drafter is not None:
        with located(None, None, {"drafter_checkpoint": "--drafter"}):
            spec["drafter_checkpoint"] = absolute_checkpoint(drafter, Path.cwd())
            check_checkpoint(spec["drafter_checkpoint"])
    elif spec.get("drafter_checkpoint") is not None:  # a path relative to the file: absolute
        spec["drafter_checkpoint"] = absolute_checkpoint(spec["drafter_checkpoint"], path.parent)
    if spec:
        raw["speculation"] = spec
    to_scenario(raw, name_hint=path)  # and so must the overridden one
    return raw


def dspark_drafter(base: dict) -> Drafter:
    """The DSpark drafter of a base scenario and the block it was trained for.

    The checkpoint is the scenario's ``speculation.drafter_checkpoint`` (``--drafter``), else
    the model's published one, else :data:`PLACEHOLDER`. Its trained block comes from a local
    checkpoint's ``config.json``, else the published preset, else the scenario's block size.
    """
    model = get_model(base["model"]).name
    spec = base.get("speculation") or {}
    preset = published_drafter(model, "dspark")
    given = spec.get("drafter_checkpoint")
    scenario_block = spec.get("block_size") or spec.get("num_draft_tokens") or 7
    if given is None:
        if preset is not None:
            return preset
        return Drafter("dspark", PLACEHOLDER, scenario_block, "none published: scenario block size")
    block = trained_block_of(given) if Path(given).is_absolute() else None
    source = "config.json" if block is not None else "unknown: scenario block size"
    if block is None and preset is not None and preset.checkpoint == given:
        block, source = preset.trained_block, preset.source
    return Drafter("dspark", given, block or scenario_block, source)


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


def current_config(config: dict) -> dict:
    """A trial's ``config`` as a study stored it, in today's names: studies stored before the
    tuner spoke of ``block_size`` hold schedule rules ``{max_batch_size, num_draft_tokens}``; they
    read as ``{max_batch_size, block_size}``, so confirmation, exports and reports go on with them."""
    spec = config.get("speculation") or {}
    rules = spec.get("schedule")
    if not isinstance(rules, list) or not any(isinstance(r, dict) and OLD_BLOCK_SIZE_KEY in r for r in rules):
        return config
    rules = [{("block_size" if k == OLD_BLOCK_SIZE_KEY else k): v for k, v in r.items()} if isinstance(r, dict) else r
             for r in rules]
    return {**config, "speculation": {**spec, "schedule": rules}}


def configure(base: dict, config: dict, *, seed: int | None = None) -> dict:
    """``base`` with a trial's ``config`` (``space.suggest`` output) merged in.

    The speculation section is replaced, not merged, except for the base's
    acceptance settings; named graph-tier ladders become token lists. A stored
    config in older names is read through :func:`current_config`.
    """
    config = current_config(config)
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
    checkpoint = (raw.get("speculation") or {}).get("drafter_checkpoint")
    if checkpoint is not None and spec.get("drafter") == "dspark":  # the base names the DSpark drafter
        spec["drafter_checkpoint"] = checkpoint
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
