"""Feed exported configs to the serving engines' own released code, on a CPU.

    python -m dspark_sim.tuner.enginecheck sglang DIR [DIR ...] --engines ROOT
    python -m dspark_sim.tuner.enginecheck vllm DIR [DIR ...] --engines ROOT

``ROOT/sglang`` and ``ROOT/vllm`` hold the released wheels' Python code, unpacked
without dependencies or compiled kernels by ``.ci/engines``; the modules their
config code imports come with the ``[engines]`` extra. Each check runs in a child process that puts
one engine on ``sys.path``, and prints one JSON line of what the engine's code
returned; a rejection is an exception from that code. What is exercised:

* SGLang 0.5.23: ``prepare_server_args(["--config", "sglang.yaml"])`` (its own
  argparse parser and YAML merger: unknown flags and bad values are errors);
  ``load_sps_table_from_path`` and ``load_sts_calibration_from_path`` (the
  msgspec structs and their ``__post_init__`` checks); and the planner's
  ``compute_verify_token_budget`` with ``DSparkScheduleConfig(gamma).validate()``
  at every batch size 1..max-running-requests. ``dspark_planner.py`` imports
  the CUDA serving stack at module level; those imports are given inert
  placeholders, and the check proves that the budget function and every
  function it calls read no placeholder (only torch, msgspec, the real
  ``dspark_sps`` module and the planner's own code).
* vLLM 0.33.0: ``FlexibleArgumentParser.load_config_file`` (its YAML-to-flags
  conversion); each flag against the ``EngineArgs`` fields read from the
  installed ``vllm/engine/arg_utils.py`` (parsed, not imported: its imports need
  the GPU stack); the ``speculative-config`` mapping against the imported
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

SGLANG_PKG = "sglang"
_PLANNER = "sglang.srt.speculative.dspark_components.dspark_planner"
_REAL = ("sglang.srt.speculative.dspark_components.dspark_sps",
         "sglang.srt.speculative.dspark_components.dspark_sts")


def run(engine: str, outs: list[Path], root: Path, timeout_s: float = 600) -> list[dict]:
    """Check the exports in each of ``outs`` with ``engine``'s code under ``root`` (one process);
    the engine's answers, one per directory.

    Raises ``RuntimeError`` with the engine's error when its code rejects a config."""
    path = os.pathsep.join(p for p in (str(Path(root) / engine), os.environ.get("PYTHONPATH")) if p)
    proc = subprocess.run([sys.executable, "-m", "dspark_sim.tuner.enginecheck", engine, *map(str, outs)],
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
    result = {"speculative_algorithm": args.speculative_algorithm,
              "speculative_draft_model_path": args.speculative_draft_model_path,
              "speculative_dspark_block_size": args.speculative_dspark_block_size,
              "speculative_num_draft_tokens": args.speculative_num_draft_tokens,
              "max_running_requests": args.max_running_requests,
              "chunked_prefill_size": args.chunked_prefill_size,
              "enable_mixed_chunk": args.enable_mixed_chunk,
              "cuda_graph_max_bs_decode": args.cuda_graph_max_bs_decode}
    if args.speculative_algorithm != "DSPARK":
        return result
    planner = _import_planner()
    bad = _reads_placeholder(planner.compute_verify_token_budget, planner)
    if bad:
        raise RuntimeError(f"the budget function reads placeholders {bad}: the check would not be honest")
    sps = planner.load_sps_table_from_path(args.speculative_dspark_sps_table_path)
    sts = planner.load_sts_calibration_from_path(args.speculative_dspark_confidence_sts_path)
    gamma = args.speculative_dspark_block_size
    cfg = planner.DSparkScheduleConfig(gamma=gamma)
    cfg.validate()
    gen = torch.Generator().manual_seed(0)
    budgets = []
    for num_reqs in range(1, args.max_running_requests + 1):
        conf = 0.3 + 0.7 * torch.rand((num_reqs, gamma), generator=gen, dtype=torch.float64)
        survival = torch.cumprod(conf, dim=1)
        decision = planner.compute_verify_token_budget(history_survival_probs=survival, sps_table=sps, cfg=cfg)
        budgets.append({"num_reqs": num_reqs, "budget": decision.budget,
                        "step_s": decision.predicted_step_seconds, "survival": survival.tolist()})
    result.update({"sps_table": type(sps).__name__, "sts_temperatures": list(sts.temperatures),
                   "budgets": budgets})
    return result


# -- vLLM ------------------------------------------------------------------------
def _engine_arg_fields(arg_utils: Path) -> set[str]:
    """Field names of ``EngineArgs`` in vLLM's installed ``arg_utils.py`` (read, not imported)."""
    tree = ast.parse(arg_utils.read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "EngineArgs")
    return {n.target.id for n in cls.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}


def check_vllm(out: Path) -> dict:
    """vLLM 0.33.0's answers for ``out/vllm.yaml``."""
    import importlib.util
    import typing

    from pydantic import TypeAdapter

    from vllm.config.speculative import SpeculativeConfig
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    argv = FlexibleArgumentParser().load_config_file(str(out / "vllm.yaml"))
    root = Path(importlib.util.find_spec("vllm").submodule_search_locations[0])
    fields = _engine_arg_fields(root / "engine" / "arg_utils.py")
    flags = {a[2:].replace("-", "_"): v for a, v in zip(argv[::2], argv[1::2])}
    unknown = sorted(set(flags) - fields)
    if unknown:
        raise ValueError(f"not vLLM EngineArgs fields: {unknown}")
    result = {"flags": flags}
    if "speculative_config" in flags:
        spec = json.loads(flags["speculative_config"])
        known = SpeculativeConfig.__pydantic_fields__
        if set(spec) - set(known):
            raise ValueError(f"not SpeculativeConfig fields: {sorted(set(spec) - set(known))}")
        for key, value in spec.items():
            info = known[key]
            kind = typing.Annotated[(info.annotation, *info.metadata)] if info.metadata else info.annotation
            TypeAdapter(kind).validate_python(value)
        result["speculative_config"] = spec
    return result


CHECKS = {"sglang": check_sglang, "vllm": check_vllm}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m dspark_sim.tuner.enginecheck", description=__doc__,
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
