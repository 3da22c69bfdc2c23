"""Golden outputs: the numbers the product gives on fixed inputs, checked number for number.

    python benchmarks/golden.py check            # recompute every output, compare with tests/golden/
    python benchmarks/golden.py make             # rewrite tests/golden/ (after an intended change)
    python benchmarks/golden.py check --only summary errors

Five outputs, each from fixed committed inputs and seeds:

- ``summary``: ``summary.json`` of the shipped example (``dspark-sim run examples/azure_code_h200.yaml``);
- ``errors``: the fidelity comparison's ``errors.json`` on the committed H200 decoder runs
  (``profiles/h200/validation/real/visit11``, replicate ``visit10``), plots skipped;
- ``compare``: ``compare.json`` of a small ``dspark-sim compare`` sweep;
- ``capacity``: ``capacity.json`` of a small ``dspark-sim capacity`` search;
- ``tune``: one ``dspark-tune`` study (a few trials, one worker, fixed seeds): every trial's
  knobs and scores, and the confirmed winners.

A refactoring must leave every file identical. When behaviour changes on purpose, re-make
the files with ``make`` and commit them with the change that moved them.
``tests/test_golden.py`` runs ``check`` in the test suite, in both simulation modes:
skip-ahead (the default) and step by step (``check --exact``, every simulation one event per
engine step, through ``DSPARK_SIM_EXACT``); both must give these same files.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
GOLDEN = REPO / "tests" / "golden"
EXAMPLE = REPO / "examples" / "azure_code_h200.yaml"
VALIDATION = REPO / "profiles" / "h200" / "validation" / "real"
REAL, REPLICATE = VALIDATION / "visit11", VALIDATION / "visit10"
CASES = REPO / "profiles" / "h200" / "validation" / "cases"
TUNE_SCENARIO = GOLDEN / "tune.yaml"


def summary(tmp: Path) -> dict:
    """``summary.json`` of the shipped example."""
    from dspark_sim.cli import main

    _ok(main(["run", str(EXAMPLE), "--out", str(tmp / "run"), "--no-plots", "--quiet"]))
    return json.loads((tmp / "run" / "summary.json").read_text())


def errors(tmp: Path) -> dict:
    """The fidelity comparison's ``errors.json`` on the committed decoder runs (no plots)."""
    from dspark_sim.validation.fidelity import error_report

    return error_report(CASES, [REAL], tmp / "main", replicate=REPLICATE, plots=False)


def compare(tmp: Path) -> dict:
    """``compare.json`` of three methods at two concurrencies on the shipped example."""
    from dspark_sim.cli import main

    _ok(main(["compare", str(EXAMPLE), "--methods", "none,mtp3,dspark", "--concurrency", "1,16",
              "--requests", "48", "--out", str(tmp / "compare"), "--quiet"]))
    return json.loads((tmp / "compare" / "compare.json").read_text())


def capacity(tmp: Path) -> dict:
    """``capacity.json`` of a short search: one GPU kind, two methods, TP 1, 150 requests a probe."""
    from dspark_sim.cli import main

    _ok(main(["capacity", str(EXAMPLE), "--gpus", "h200", "--methods", "none,dspark", "--tp", "1",
              "--max-requests", "150", "--max-sims", "5", "--price-per-gpu-hour", "h200=3.5",
              "--out", str(tmp / "capacity"), "--no-plots", "--quiet"]))
    return json.loads((tmp / "capacity" / "capacity.json").read_text())


def tune(tmp: Path) -> dict:
    """Every trial and the winners of a small seeded study (SQLite, one worker)."""
    import optuna

    from dspark_sim.tuner.cli import main

    url = f"sqlite:///{tmp / 'tune.db'}"
    _ok(main(["--scenario", str(TUNE_SCENARIO), "--study", "golden", "--storage", url, "--trials", "4",
              "--baseline-trials", "3", "--baselines", "static", "--seeds", "1", "--workers", "1",
              "--out", str(tmp / "tune"), "--quiet"]))
    out = {}
    for name in ("golden", "golden.static"):
        study = optuna.load_study(study_name=name, storage=url)
        trials = [{"number": t.number, "state": t.state.name, "values": t.values,
                   "constraints": t.system_attrs.get("constraints"),
                   **{k: t.user_attrs.get(k) for k in ("method", "config", "metrics", "worst", "per_seed")}}
                  for t in study.get_trials(deepcopy=False)]
        out[name] = {"trials": trials, "winner": study.user_attrs.get("winner")}
    return out


OUTPUTS = {"summary": summary, "errors": errors, "compare": compare, "capacity": capacity, "tune": tune}


def _ok(code: int) -> None:
    if code:
        raise SystemExit(f"command failed with exit code {code}")


def compute(name: str) -> dict:
    """Output ``name`` recomputed now, as its JSON round trip (what the golden file holds)."""
    with tempfile.TemporaryDirectory() as tmp:
        return json.loads(json.dumps(OUTPUTS[name](Path(tmp))))


def differences(want, got, path: str = "") -> list[str]:
    """Every place where ``got`` differs from ``want`` (NaN equals NaN; floats compare exactly)."""
    if isinstance(want, dict) and isinstance(got, dict):
        out = [f"{path}.{k}: missing" for k in want if k not in got]
        out += [f"{path}.{k}: unexpected" for k in got if k not in want]
        for k in want:
            if k in got:
                out += differences(want[k], got[k], f"{path}.{k}")
        return out
    if isinstance(want, list) and isinstance(got, list):
        if len(want) != len(got):
            return [f"{path}: length {len(got)}, golden {len(want)}"]
        return [d for i, (a, b) in enumerate(zip(want, got)) for d in differences(a, b, f"{path}[{i}]")]
    same = want == got or (isinstance(want, float) and isinstance(got, float)
                           and math.isnan(want) and math.isnan(got))
    return [] if same and type(want) is type(got) else [f"{path}: {got!r}, golden {want!r}"]


def check(name: str) -> list[str]:
    """Differences between output ``name`` now and its golden file."""
    path = GOLDEN / f"{name}.json"
    if not path.is_file():
        return [f"{path.relative_to(REPO)}: missing (run `python benchmarks/golden.py make`)"]
    return differences(json.loads(path.read_text()), compute(name))


def make(name: str) -> Path:
    """Rewrite the golden file of output ``name``."""
    path = GOLDEN / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(compute(name), indent=1, sort_keys=True) + "\n")
    return path


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("command", choices=("make", "check"))
    p.add_argument("--only", nargs="*", choices=list(OUTPUTS), help="outputs to make or check (default all)")
    p.add_argument("--exact", action="store_true", help="simulate step by step (no skip-ahead)")
    args = p.parse_args(argv)
    if args.exact:
        from dspark_sim.serving.simulator import EXACT_ENV

        os.environ[EXACT_ENV] = "1"  # this process and the workers it starts
    failed = False
    for name in args.only or OUTPUTS:
        if args.command == "make":
            print(f"wrote {make(name).relative_to(REPO)}")
            continue
        diffs = check(name)
        failed |= bool(diffs)
        print(f"{name}: " + ("identical" if not diffs else f"{len(diffs)} differences"))
        for line in diffs[:20]:
            print(f"  {line}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
