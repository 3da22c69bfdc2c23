"""Load SGLang's released DSpark Triton kernels from its wheel, for side-by-side benchmarks.

    kernels = load("path/to/sglang-0.5.23-*.whl")
    kernels.schedule_topk(confidence=..., budget=K, cfg=kernels.ScheduleConfig(gamma=7))
    kernels.accept_greedy(...), kernels.accept_sampling(...)

The wheel is a zip: the kernel modules and the few server modules they call are
unpacked into a temporary directory at run time and imported from there, unchanged
(nothing of SGLang's code is kept in this project). SGLang's package ``__init__``
files import the whole server; they are skipped, and every other ``sglang`` module
the kernels import but the benchmark never calls (model runners, distributed state,
the registry) is replaced by an inert stand-in. ``msgspec`` gets a minimal stand-in
when it is not installed (its ``Struct`` only holds the result fields).
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import tempfile
import types
import zipfile
from pathlib import Path

KERNELS = "sglang/kernels/ops/speculative/"
REAL = {  # modules imported as shipped
    "sglang.kernels.ops.speculative.dspark.dspark_schedule",
    "sglang.kernels.ops.speculative.dspark.dspark_accept",
    "sglang.kernels.ops.speculative.dspark.dispatch",
    "sglang.kernels.ops.speculative.dflash",
    "sglang.kernels.ops.speculative.reject_sampling",
    "sglang.kernels.ops.speculative.row_argmax",
    "sglang.srt.speculative.dflash_utils",
    "sglang.srt.speculative.dspark_components.dspark_planner",
}
SHELLS = ("sglang", "sglang.kernels", "sglang.kernels.ops", "sglang.kernels.ops.speculative",
          "sglang.kernels.ops.speculative.dspark", "sglang.srt", "sglang.srt.speculative",
          "sglang.srt.speculative.dspark_components")


class _Inert:
    """Stands for anything a stubbed module exports: callable, falsy, any attribute."""

    def __init__(self, *args, **kwargs):
        pass

    def __call__(self, *args, **kwargs):
        return _Inert()

    def __getattr__(self, name):
        return _Inert()

    def __bool__(self):
        return False


class _StubModule(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Inert()


class _Stubs(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Inert modules for every ``sglang.*`` name that is neither real nor a shell."""

    def find_spec(self, name, path=None, target=None):
        if name.startswith("sglang.") and name not in REAL and name not in SHELLS:
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        module = _StubModule(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module):
        pass


def _msgspec_stand_in() -> types.ModuleType:
    class Struct:
        def __init_subclass__(cls, **options):  # frozen=True, kw_only=True, ...
            super().__init_subclass__()

        def __init__(self, *args, **kwargs):
            for name, value in zip(getattr(type(self), "__annotations__", {}), args):
                setattr(self, name, value)
            for name, value in kwargs.items():
                setattr(self, name, value)

    module = types.ModuleType("msgspec")
    module.Struct = Struct
    return module


class SglangKernels:
    """The kernels, under short names (SGLang's own classes and functions)."""

    def __init__(self, root: Path):
        self.root = root
        sched = importlib.import_module("sglang.kernels.ops.speculative.dspark.dspark_schedule")
        accept = importlib.import_module("sglang.kernels.ops.speculative.dspark.dspark_accept")
        planner = importlib.import_module("sglang.srt.speculative.dspark_components.dspark_planner")
        self.schedule_topk = sched.ScheduleVerifyLensTopk.triton
        self.ScheduleConfig = planner.DSparkScheduleConfig
        self.accept_greedy = accept.AcceptGreedy.triton
        self.accept_sampling = accept.AcceptSampling.triton


def load(wheel: str | Path, into: str | Path | None = None) -> SglangKernels:
    """Unpack ``wheel``'s kernel and planner modules (into a temporary directory unless
    ``into``) and import them; ``sys.modules`` then holds SGLang's modules."""
    root = Path(into or tempfile.mkdtemp(prefix="sglang_kernels_"))
    wanted = [m.replace(".", "/") + ".py" for m in REAL]
    with zipfile.ZipFile(wheel) as z:
        for name in z.namelist():
            if name in wanted or (name.startswith(KERNELS) and name.endswith(".py")):
                z.extract(name, root)
    try:
        importlib.import_module("msgspec")
    except ImportError:
        sys.modules["msgspec"] = _msgspec_stand_in()
    for name in SHELLS:
        shell = types.ModuleType(name)
        shell.__path__ = [str(root / name.replace(".", "/"))]
        sys.modules[name] = shell
    if not any(isinstance(f, _Stubs) for f in sys.meta_path):
        sys.meta_path.insert(0, _Stubs())
    return SglangKernels(root)
