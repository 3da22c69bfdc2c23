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
