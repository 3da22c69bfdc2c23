"""The layout's rules: a light simulation path, no private names across modules, no import cycles."""
import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
# source folder -> import name (pyproject.toml's package-dir)
ROOTS = {"dspark_sim": "dspark_sim", "kernels": "dspark_sim.kernels", "tuner": "dspark_sim.tuner",
         "profiles": "dspark_sim.profiles"}
CHECKED = ("dspark_sim", "kernels", "tuner", "benchmarks", "tests")
MAX_LINES = 420  # "about 400" lines a module


def _modules() -> dict[str, Path]:
    """Every package module by import name."""
    out = {}
    for root, name in ROOTS.items():
        for path in (REPO / root).rglob("*.py"):
            parts = [name, *path.relative_to(REPO / root).with_suffix("").parts]
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


MODULES = _modules()
NAMES = {path: name for name, path in MODULES.items()}


def _resolve(name: str) -> str | None:
    """The package module ``name`` is, or lives in; None outside the package."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _imports(path: Path):
    """(module imported, names taken from it, node) of every import in ``path``, at any depth."""
    me = NAMES.get(path, "")
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, (), node, alias.asname
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            yield base, tuple(a.name for a in node.names), node, None


def _files():
    for folder in CHECKED:
        yield from sorted((REPO / folder).rglob("*.py"))


def test_simulation_path_loads_neither_scipy_nor_torch(tmp_path):
    """``dspark-sim run`` on a DSpark scenario: its command, the engine, cost, acceptance and plots."""
    scenario = tmp_path / "s.yaml"
    scenario.write_text(yaml.safe_dump({
        "model": "qwen3-8b", "gpu": "h200", "speculation": {"method": "dspark"},
        "workload": {"trace": str(REPO / "examples" / "traces" / "azure_llm_2023_code.csv"), "max_requests": 60}}))
    code = ("import sys\n"
            "import dspark_sim.run\n"
            "from dspark_sim.cli import main\n"
            f"assert main(['run', {str(scenario)!r}, '--out', {str(tmp_path / 'out')!r}, '--quiet']) == 0\n"
            "print(sorted(m for m in ('scipy', 'torch', 'triton') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "[]"
    assert (tmp_path / "out" / "plots").is_dir()


def test_no_module_imports_a_private_name_of_another():
    found = []
    for path in _files():
        modules = {}  # local name -> package module it is bound to
        for base, names, node, asname in _imports(path):
            if _resolve(base) is None:
                continue
            if not names:
                modules[asname or base.split(".")[0]] = base
            for name in names:
                if name.startswith("_") and not name.startswith("__"):
                    found.append(f"{path.relative_to(REPO)}:{node.lineno} imports {name} from {base}")
                elif f"{base}.{name}" in MODULES:
                    modules[name] = f"{base}.{name}"
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                    and node.value.id in modules and node.attr.startswith("_") and not node.attr.startswith("__"):
                found.append(f"{path.relative_to(REPO)}:{node.lineno} uses {node.value.id}.{node.attr}")
    assert not found, "\n".join(found)


def test_no_import_cycles():
    """Between package modules, counting imports inside functions too (they run sooner or later)."""
    edges = {}
    for name, path in MODULES.items():
        targets = set()
        for base, names, _, _ in _imports(path):
            for full in [f"{base}.{n}" for n in names] or [base]:
                target = full if full in MODULES else _resolve(base)
                if target and target != name:
                    targets.add(target)
        edges[name] = targets
    cycles = [c for c in _strongly_connected(edges) if len(c) > 1]
    assert not cycles, cycles


def _strongly_connected(edges: dict[str, set]) -> list[list[str]]:
    """Tarjan's strongly connected components, iteratively."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]
    for root in edges:
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges.get(w, ())))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                out.append(comp)
    return out


def test_fitting_is_not_on_the_simulation_path():
    """The cost package never imports the profile fit (scipy), whatever a scenario holds."""
    for name, path in MODULES.items():
        if name.startswith(("dspark_sim.cost", "dspark_sim.serving", "dspark_sim.workload", "dspark_sim.metrics")):
            for base, names, node, _ in _imports(path):
                assert not base.startswith("dspark_sim.profiling") and base != "scipy" \
                    and not base.startswith("scipy."), f"{name}:{node.lineno} imports {base}"


def test_no_test_imports_a_benchmark_script():
    """benchmarks/ holds thin scripts over the package: tests import the package (they may run a script)."""
    scripts = {p.stem for p in (REPO / "benchmarks").glob("*.py")}
    found = [f"{path.relative_to(REPO)}:{node.lineno} imports {base}" for path in sorted((REPO / "tests").rglob("*.py"))
             for base, _, node, _ in _imports(path) if base.split(".")[0] in scripts]
    found += [f"{p.relative_to(REPO)}: {line.strip()}" for p in (REPO / "tests").rglob("*.py")
              for line in p.read_text().splitlines() if re.search(r"sys\.path\.\w+\(.*benchmarks", line)]
    assert not found, found


def test_modules_stay_short():
    long = [f"{p.relative_to(REPO)} ({n} lines)" for p in MODULES.values()
            if (n := len(p.read_text().splitlines())) > MAX_LINES]
    assert not long, long


def test_serving_the_fidelity_cases_loads_no_simulator(tmp_path):
    """``fidelity.py run`` on a GPU host without the simulator's dependencies (simpy): the
    serving module and a case's launch read the scenario without importing the engine."""
    pytest.importorskip("torch")  # the decoder (or its kernels) runs here
    case = REPO / "profiles" / "h200" / "validation" / "cases" / "long-mid__dspark.yaml"
    code = ("import sys\n"
            "from pathlib import Path\n"
            "import dspark_sim.validation.serve as serve\n"
            "import dspark_sim.serving.admission  # the serving loop's refusals\n"
            "from dspark_sim.kernels.decoder.launch import load_launch\n"
            f"load_launch(Path({str(case)!r}), synthetic=True, device='cpu', dtype='float32',\n"
            "            max_model_len=serve.max_model_len(['long-mid']), kv_tokens=1024)\n"
            "print(sorted(m for m in ('simpy', 'dspark_sim.serving.simulator') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "[]"
