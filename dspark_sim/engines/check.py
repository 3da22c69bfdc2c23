"""Feed exported configs to the serving engines' own released code, on a CPU.

    python -m dspark_sim.engines.check sglang DIR [DIR ...] --engines ROOT
    python -m dspark_sim.engines.check vllm DIR [DIR ...] --engines ROOT

``ROOT/sglang`` and ``ROOT/vllm`` hold the released wheels' Python code, unpacked
without dependencies or compiled kernels by ``tests/engines.sh``; the modules their
config code imports come with the ``[engines]`` extra. Each check runs in a child process that puts
one engine on ``sys.path``, and prints one JSON line of what the engine's code
returned; a rejection is an exception from that code. What is exercised:

* SGLang 0.5.23: ``prepare_server_args(["--config", "sglang.yaml"])`` (its own
  argparse parser and YAML merger: unknown flags and bad values are errors);
  ``load_sps_table_from_path`` and ``load_sts_calibration_from_path`` (the
  msgspec structs and their ``__post_init__`` checks); and the planner's
  ``compute_verify_token_budget`` with ``DSparkScheduleConfig(gamma=block_size).validate()``
  at every batch size 1..max-running-requests. ``dspark_planner.py`` imports
  the CUDA serving stack at module level; those imports are given inert
  placeholders, and the check proves that the budget function and every
  function it calls read no placeholder (only torch, msgspec, the real
  ``dspark_sps`` module and the planner's own code). Then SGLang's DSpark
  start-up rules, ``arg_groups/speculative_hook.py`` ``_handle_dspark`` (a draft
  checkpoint, ``--enable-dp-lm-head`` under DP attention, the MoE all-to-all
  backend, the verify window = block_size + 1, ...), on the parsed flags with the
  environment the file's launch line sets and the device set to ``cuda`` (the
  only hardware the rules read). The module ``speculative/dflash_utils.py``
  (it loads the GPU kernels) is an inert placeholder there: only the draft
  checkpoint's config reader uses it, SGLang calls that reader inside a ``try``,
  and its answer matters only when no block size is given (exports give one).
* vLLM 0.33.0: ``FlexibleArgumentParser.load_config_file`` (its YAML-to-flags
  conversion); each flag against the ``EngineArgs`` fields read from the
  installed ``vllm/engine/arg_utils.py`` (parsed, not imported: its imports need
  the GPU stack), and each value against the type of the ``vllm.config`` field the
  argument's default comes from (``kv-cache-dtype``: ``CacheConfig.cache_dtype``;
  ``data-parallel-size``: ``ParallelConfig``), or its own annotation where that is
  built of builtin types (``max-num-seqs: int | None``); the ``speculative-config`` mapping against the imported
  ``SpeculativeConfig`` pydantic fields, every value validated by pydantic with
  the field's own type and constraints. ``SpeculativeConfig.__post_init__``
  (which downloads the drafter's config) is not run.
"""
from __future__ import annotations

import argparse
import ast
import json
import os
import subprocess
import sys
import types
from pathlib import Path

from dspark_sim.engines.knobs import FIELDS, attribute

SGLANG_PKG = "sglang"
_PLANNER = "sglang.srt.speculative.dspark_components.dspark_planner"
_REAL = ("sglang.srt.speculative.dspark_components.dspark_sps",
         "sglang.srt.speculative.dspark_components.dspark_sts")


def run(engine: str, outs: list[Path], root: Path, timeout_s: float = 600) -> list[dict]:
    """Check the exports in each of ``outs`` with ``engine``'s code under ``root`` (one process);
    the engine's answers, one per directory.

    Raises ``RuntimeError`` with the engine's error when its code rejects a config."""
    path = os.pathsep.join(p for p in (str(Path(root) / engine), os.environ.get("PYTHONPATH")) if p)
    proc = subprocess.run([sys.executable, "-m", "dspark_sim.engines.check", engine, *map(str, outs)],
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": path}, timeout=timeout_s)
    if proc.returncode != 0:
        raise RuntimeError(f"{engine} rejected {[str(o) for o in outs]}: {proc.stderr.strip()[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# -- SGLang ----------------------------------------------------------------------
class _Placeholder:
    """Stands in for the CUDA serving stack the planner module imports but the budget never reads."""

    def __getattr__(self, name):
        return _Placeholder()

    def __call__(self, *args, **kwargs):
        return _Placeholder()

    def __getitem__(self, key):
        return _Placeholder()


class _PlaceholderModule(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Placeholder()


def _bare_package(name: str, path: str) -> None:
    """Register ``name`` as a package without running its ``__init__`` (SGLang's pulls in
    transformers patches and its frontend, which no config check reads)."""
    module = types.ModuleType(name)
    module.__path__ = [path]
    sys.modules[name] = module


def _import_planner():
    """``dspark_planner`` with placeholders for its serving-stack imports (see the module docstring)."""
    import importlib
    import importlib.util

    spec = importlib.util.find_spec(_PLANNER)
    tree = ast.parse(Path(spec.origin).read_text())
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("sglang."):
            if node.module not in _REAL and node.module not in sys.modules:
                sys.modules[node.module] = _PlaceholderModule(node.module)
    return importlib.import_module(_PLANNER)


def _reads_placeholder(fn, module, seen=None) -> list[str]:
    """Globals ``fn`` (and the module functions and classes it calls) read that are placeholders."""
    seen = set() if seen is None else seen
    code = getattr(fn, "__code__", None)
    if code is None or code in seen:
        return []
    seen.add(code)
    bad = []
    for name in code.co_names:
        value = module.__dict__.get(name)
        if isinstance(value, (_Placeholder, _PlaceholderModule)):
            bad.append(name)
        elif getattr(value, "__module__", None) == module.__name__:
            targets = [value] if callable(value) and not isinstance(value, type) else \
                [v for v in vars(value).values() if callable(v)] if isinstance(value, type) else []
            for target in targets:
                bad += _reads_placeholder(target, module, seen)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            bad += _reads_placeholder(types.FunctionType(const, module.__dict__), module, seen)
    return bad


def check_sglang(out: Path) -> dict:
    """SGLang 0.5.23's answers for ``out/sglang.yaml`` and its tables."""
    import importlib.util

    import torch

    if SGLANG_PKG not in sys.modules:
        _bare_package(SGLANG_PKG, importlib.util.find_spec(SGLANG_PKG).submodule_search_locations[0])
    from sglang.srt.server_args import prepare_server_args

    args = prepare_server_args(["--config", str(out / "sglang.yaml")])
    tuned = [attribute("sglang", section, knob) for (section, knob), fields in FIELDS.items()
             if fields["sglang"] and not fields["sglang"].startswith("env ")]
    result = {key: getattr(args, key) for key in ("speculative_algorithm", "speculative_draft_model_path", *tuned,
                                                  "speculative_num_draft_tokens", "cuda_graph_max_bs_decode")}
    if args.speculative_algorithm != "DSPARK":
        return result
    planner = _import_planner()
    bad = _reads_placeholder(planner.compute_verify_token_budget, planner)
    if bad:
        raise RuntimeError(f"the budget function reads placeholders {bad}: the check would not be honest")
    sps = planner.load_sps_table_from_path(args.speculative_dspark_sps_table_path)
    sts = planner.load_sts_calibration_from_path(args.speculative_dspark_confidence_sts_path)
    block_size = args.speculative_dspark_block_size
    cfg = planner.DSparkScheduleConfig(gamma=block_size)  # SGLang's own field name (the paper's notation)
    cfg.validate()
    gen = torch.Generator().manual_seed(0)
    budgets = []
    for num_reqs in range(1, args.max_running_requests + 1):
        conf = 0.3 + 0.7 * torch.rand((num_reqs, block_size), generator=gen, dtype=torch.float64)
        survival = torch.cumprod(conf, dim=1)
        decision = planner.compute_verify_token_budget(history_survival_probs=survival, sps_table=sps, cfg=cfg)
        budgets.append({"num_reqs": num_reqs, "budget": decision.budget,
                        "step_s": decision.predicted_step_seconds, "survival": survival.tolist()})
    result.update({"sps_table": type(sps).__name__, "sts_temperatures": list(sts.temperatures),
                   "budgets": budgets, "startup": _dspark_startup(args, out / "sglang.yaml")})
    return result


def launch_env(config: Path) -> dict[str, str]:
    """The ``NAME=value`` assignments of the launch line in an exported ``sglang.yaml``'s header."""
    lines = [line.lstrip("# ").strip() for line in config.read_text().splitlines() if line.startswith("#")]
    launch = next((line for line in lines if "sglang.launch_server" in line), "")
    return dict(word.split("=", 1) for word in launch.split() if "=" in word and word.split("=", 1)[0].isupper())


def _dspark_startup(args, config: Path) -> dict:
    """SGLang's DSpark start-up rules on ``args`` (see the module docstring); what they resolved."""
    os.environ.update(launch_env(config))
    os.environ["HF_HUB_OFFLINE"] = "1"  # no download: the draft config reader fails inside its try
    name = "sglang.srt.speculative.dflash_utils"
    sys.modules.setdefault(name, _PlaceholderModule(name))
    from sglang.srt.arg_groups import speculative_hook
    from sglang.srt.arg_groups.overrides import resolved_view

    args.device = "cuda"
    speculative_hook._handle_dspark(args)
    view = resolved_view(args)
    return {key: getattr(view, key) for key in ("speculative_num_draft_tokens", "speculative_num_steps",
                                                "speculative_draft_model_path", "tp_size", "ep_size",
                                                "attn_dp_size", "enable_dp_lm_head", "kv_cache_dtype",
                                                "max_running_requests")}


# -- vLLM ------------------------------------------------------------------------
_BUILTIN_TYPES = {"int": int, "float": float, "str": str, "bool": bool, "None": None}


def _engine_arg_types(arg_utils: Path) -> dict[str, object]:
    """``EngineArgs`` fields in vLLM's installed ``arg_utils.py`` (read, not imported), each with
    what checks its value: ``(config class, field)`` where the default is that config's field
    (``CacheConfig.cache_dtype``, ``get_field(ParallelConfig, "...")``), else the annotation when
    it is built of builtin types only (``int | None``), else None (the name alone is checked)."""
    tree = ast.parse(arg_utils.read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "EngineArgs")
    out = {}
    for node in cls.body:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        value, source = node.value, None
        if isinstance(value, ast.Attribute) and isinstance(value.value, ast.Name):
            source = (value.value.id, value.attr)
        elif isinstance(value, ast.Call) and getattr(value.func, "id", None) == "get_field" and len(value.args) == 2 \
                and isinstance(value.args[0], ast.Name) and isinstance(value.args[1], ast.Constant):
            source = (value.args[0].id, value.args[1].value)
        if source is None:
            try:
                source = eval(ast.unparse(node.annotation), {"__builtins__": {}}, dict(_BUILTIN_TYPES))
            except (NameError, TypeError, SyntaxError):
                source = None
        out[node.target.id] = source
    return out


def _field_type(info):
    """The type a pydantic field validates with, its constraints included."""
    import typing

    return typing.Annotated[(info.annotation, *info.metadata)] if info.metadata else info.annotation


def _value_type(source, config_module):
    """The type a flag's value is validated with (see :func:`_engine_arg_types`), or None."""
    if not isinstance(source, tuple):
        return source
    fields = getattr(getattr(config_module, source[0], None), "__pydantic_fields__", {})
    return _field_type(fields[source[1]]) if source[1] in fields else None


def _argv_flags(argv: list[str]) -> dict:
    """``--name value`` pairs of an argument list by field name; a flag with no value (a true
    boolean, as vLLM writes one from YAML) is ``True``."""
    flags, i = {}, 0
    while i < len(argv):
        if not argv[i].startswith("--"):
            raise ValueError(f"unexpected argument {argv[i]!r} in {argv}")
        name = argv[i][2:].replace("-", "_")
        has_value = i + 1 < len(argv) and not argv[i + 1].startswith("--")
        flags[name] = argv[i + 1] if has_value else True
        i += 2 if has_value else 1
    return flags


def check_vllm(out: Path) -> dict:
    """vLLM 0.33.0's answers for ``out/vllm.yaml``."""
    import importlib.util

    import vllm.config
    from pydantic import TypeAdapter

    from vllm.config.speculative import SpeculativeConfig
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    argv = FlexibleArgumentParser().load_config_file(str(out / "vllm.yaml"))
    root = Path(importlib.util.find_spec("vllm").submodule_search_locations[0])
    fields = _engine_arg_types(root / "engine" / "arg_utils.py")
    flags = _argv_flags(argv)
    unknown = sorted(set(flags) - set(fields))
    if unknown:
        raise ValueError(f"not vLLM EngineArgs fields: {unknown}")
    checked = []
    for name, value in flags.items():  # pydantic's lax mode reads "64" as the int 64, as argparse would
        kind = None if name == "speculative_config" else _value_type(fields[name], vllm.config)
        if kind is not None:
            TypeAdapter(kind).validate_python(value)
            checked.append(name)
    result = {"flags": flags, "values_checked": checked}
    if "speculative_config" in flags:
        spec = json.loads(flags["speculative_config"])
        known = SpeculativeConfig.__pydantic_fields__
        if set(spec) - set(known):
            raise ValueError(f"not SpeculativeConfig fields: {sorted(set(spec) - set(known))}")
        for key, value in spec.items():
            TypeAdapter(_field_type(known[key])).validate_python(value)
        result["speculative_config"] = spec
    return result


CHECKS = {"sglang": check_sglang, "vllm": check_vllm}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m dspark_sim.engines.check", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("engine", choices=sorted(CHECKS))
    p.add_argument("outs", nargs="+", help="directories holding exported files")
    p.add_argument("--engines", help="ROOT holding ROOT/<engine>/ (default: use the current sys.path)")
    args = p.parse_args(argv)
    outs = [Path(o) for o in args.outs]
    if args.engines:
        print(json.dumps(run(args.engine, outs, Path(args.engines))))
        return 0
    print(json.dumps([CHECKS[args.engine](out) for out in outs]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
