"""Packaging facts: the package list, a light import, README commands in CI."""
import re
import subprocess
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ROOTS = {"dspark_sim": "dspark_sim", "kernels": "dspark_sim.kernels", "tuner": "dspark_sim.tuner",
         "profiles": "dspark_sim.profiles"}


def test_every_package_directory_is_listed():
    listed = set(tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = set()
    for root, name in ROOTS.items():
        for init in (REPO / root).rglob("__init__.py"):
            rel = init.parent.relative_to(REPO / root).parts
            found.add(".".join((name, *rel)))
    assert found == listed


def test_import_is_light():
    code = ("import sys, dspark_sim, dspark_sim.cli, dspark_sim.run, dspark_sim.kernels, dspark_sim.tuner; "
            "print(sorted(m for m in ('torch', 'triton') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_ci_runs_the_readme_commands():
    readme = (REPO / "README.md").read_text()
    block = re.search(r"```bash\n(.*?)```", readme, re.S).group(1)
    commands = [line for line in block.splitlines() if line and not line.startswith("#")]
    assert len(commands) == 2
    ci = (REPO / ".ci" / "run").read_text()
    for command in commands:
        assert command in ci


def test_package_data_is_the_profiles_and_presets_only():
    """The wheel's data files: every shipped profile and table, the kernel configs and the presets;
    no raw timings, validation runs or benchmark results."""
    setup = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    include = setup["package-data"]["dspark_sim.profiles"]
    exclude = setup.get("exclude-package-data", {}).get("dspark_sim.profiles", [])
    shipped = {p for pattern in include for p in (REPO / "profiles").glob(pattern)}
    shipped -= {p for pattern in exclude for p in (REPO / "profiles").glob(pattern)}
    names = {str(p.relative_to(REPO / "profiles")) for p in shipped}
    assert "h200/qwen3-8b.json" in names and "h200/qwen3-8b.sps_additive.json" in names
    assert "b300/qwen3-8b.sps.json" in names and "h200/kernels.json" in names
    assert not [n for n in names if "/raw/" in n or "/validation/" in n or n.count("/") > 1]
    assert not [n for n in names if n.endswith(("_bench.json", "_check.json", "_vs_sglang.json"))
                or "/decoder_targets" in n]
    assert setup["package-data"]["dspark_sim.acceptance"] == ["presets.json"]


def test_triton_is_the_pinned_version():
    """The kernels are tested with the Triton the H200 numbers were measured with (the [gpu] pin)."""
    import importlib.util

    pin = next(r for r in tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
               ["optional-dependencies"]["gpu"] if r.startswith("triton"))
    if importlib.util.find_spec("triton") is None:
        return  # the light install: conftest counts the skipped kernel tests, CI refuses them
    import triton

    assert pin == "triton==3.6.*" and triton.__version__.startswith("3.6."), (pin, triton.__version__)
