"""`dspark-sim validate`: the simulator against a real engine run of the same trace.

Both sides are reduced from the same files (``requests.csv`` and ``steps.csv``
with the simulator's columns, which the real decoder also writes), so every
metric is computed the same way on both.
"""
from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np

from dspark_sim.errors import InputError
from dspark_sim.metrics.outdir import atomic_dir
from dspark_sim.metrics.summary import weighted_percentile

REQUEST_NEEDS = ("request_id", "arrival_s", "output_tokens", "ttft_ms", "tpot_ms", "e2el_ms", "finish_s")
STEP_NEEDS = ("step_s", "decode_reqs", "verify_tokens", "accepted_tokens", "prefill_tokens")
STATS = (("mean", None), ("p50", 50), ("p99", 99))


def read_columns(path: Path, needs: tuple[str, ...]) -> dict[str, np.ndarray]:
    """Numeric columns of a CSV; missing file or column is an InputError."""
    if not path.is_file():
        raise InputError(path, None, None, "file not found")
    with path.open(newline="") as f:
        reader = csv.reader(f)
        header = next(reader, None)
        if header is None:
            raise InputError(path, None, None, "empty file")
        for name in needs:
            if name not in header:
                raise InputError(path, f"column {name}", None, "missing column")
        idx = [header.index(n) for n in needs]
        rows = [[row[i] for i in idx] for row in reader]
    out = {}
    for j, name in enumerate(needs):
        try:
            out[name] = np.array([float(r[j]) for r in rows])
        except ValueError as err:
            raise InputError(path, f"column {name}", None, f"not numeric ({err})") from None
    return out


def run_metrics(run_dir: Path) -> dict:
    """Throughput, latency statistics, accept length and verify tokens of one run directory."""
    req = read_columns(run_dir / "requests.csv", REQUEST_NEEDS)
    steps = read_columns(run_dir / "steps.csv", STEP_NEEDS)
    duration = req["finish_s"].max() - req["arrival_s"].min() if req["finish_s"].size else 0.0
    m = {"requests": int(req["request_id"].size),
         "output_throughput": float(req["output_tokens"].sum() / duration) if duration > 0 else 0.0}
    for name in ("ttft", "tpot", "e2el"):
        v = req[f"{name}_ms"]
        v = v[~np.isnan(v)]
        for label, q in STATS:
            m[f"{label}_{name}_ms"] = float(v.mean() if q is None else np.percentile(v, q)) if v.size else math.nan
    dec = steps["decode_reqs"]
    has = dec > 0
    gaps, weights = steps["step_s"][has] * 1e3, dec[has].astype(np.int64)
    for label, q in STATS:
        if not weights.sum():
            m[f"{label}_itl_ms"] = math.nan
        elif q is None:
            m[f"{label}_itl_ms"] = float((gaps * weights).sum() / weights.sum())
        else:
            m[f"{label}_itl_ms"] = weighted_percentile(gaps, weights, q)
    # steps.csv accepted_tokens: tokens the decoding requests emitted (accepted drafts + bonus)
    m["mean_accept_length"] = float(steps["accepted_tokens"].sum() / dec.sum()) if dec.sum() else math.nan
    m["mean_verify_tokens_per_step"] = float(steps["verify_tokens"][has].mean()) if has.any() else math.nan
    return m


def compare_metrics(sim: dict, real: dict) -> list[dict]:
    """Relative error (sim - real) / real of every shared metric."""
    rows = []
    for key in real:
        if key == "requests" or key not in sim:
            continue
        r, s = real[key], sim[key]
        err = (s - r) / r if r and not math.isnan(r) and not math.isnan(s) else math.nan
        rows.append({"metric": key, "real": r, "sim": s, "rel_error": err})
    return rows


def format_rows(rows: list[dict]) -> str:
    lines = [f"{'metric':<30}{'real':>12}{'sim':>12}{'error':>10}", "-" * 64]
    for r in rows:
        lines.append(f"{r['metric']:<30}{r['real']:>12.3f}{r['sim']:>12.3f}{r['rel_error']:>+10.1%}")
    return "\n".join(lines)


def plot(sim_dir: Path, real_dir: Path, out: Path) -> None:
    """Per-request scatter (sim against real) and latency CDFs of both runs."""
    from dspark_sim.metrics.plots import _pyplot

    plt = _pyplot()
    cols = ("request_id", "ttft_ms", "tpot_ms", "e2el_ms")
    sim = read_columns(sim_dir / "requests.csv", cols)
    real = read_columns(real_dir / "requests.csv", cols)
    fig, axes = plt.subplots(2, 3, figsize=(13, 7.5))
    common, si, ri = np.intersect1d(sim["request_id"], real["request_id"], return_indices=True)
    for j, key in enumerate(cols[1:]):
        ax = axes[0, j]
        x, y = real[key][ri], sim[key][si]
        ax.scatter(x, y, s=4, alpha=0.5)
        hi = np.nanmax(np.concatenate([x, y, [1e-9]]))
        ax.plot([0, hi], [0, hi], color="grey", lw=0.8)
        ax.set_xlabel(f"real {key}")
        ax.set_ylabel(f"simulated {key}")
        ax = axes[1, j]
        for label, data in (("real", real[key]), ("sim", sim[key])):
            v = np.sort(data[~np.isnan(data)])
            if v.size:
                ax.plot(v, np.arange(1, v.size + 1) / v.size, label=label)
        ax.set_xlabel(key)
        ax.set_ylabel("CDF")
        ax.legend()
    fig.suptitle(f"simulated against real: {common.size} requests in both")
    fig.tight_layout()
    fig.savefig(out / "validate.png", dpi=110)
    plt.close(fig)


def validate(scenario_path: Path, real_dir: Path, out: Path) -> list[dict]:
    """Simulate the scenario into ``out/sim`` and compare it with ``real_dir``."""
    from dspark_sim.run import run_scenario
    from dspark_sim.scenario import load_scenario

    real = run_metrics(real_dir)  # fail on a bad real run before simulating
    scenario = load_scenario(scenario_path)
    with atomic_dir(out) as tmp:
        run_scenario(scenario, tmp / "sim", plots=False, show_progress=False)
        rows = compare_metrics(run_metrics(tmp / "sim"), real)
        plot(tmp / "sim", real_dir, tmp)
        (tmp / "validate.json").write_text(json.dumps({"scenario": str(scenario_path), "real": str(real_dir),
                                                       "rows": rows}, indent=2) + "\n")
    return rows


def run(args) -> int:
    out = Path(args.out) if args.out else Path(args.real).with_name(Path(args.real).name + "-validate")
    rows = validate(Path(args.scenario), Path(args.real), out)
    print(json.dumps(rows, indent=2) if args.json else format_rows(rows))
    if not args.json:
        print(f"wrote {out}/ (validate.json, validate.png, sim/)")
    return 0


def register(sub) -> None:
    p = sub.add_parser("validate", help="compare a simulation with a real engine run of the same trace")
    p.add_argument("--scenario", required=True, help="scenario YAML of the same trace slice, model, GPU and config")
    p.add_argument("--real", required=True, help="run directory of the real engine (requests.csv, steps.csv)")
    p.add_argument("--out", help="output directory (default <real>-validate)")
    p.add_argument("--json", action="store_true", help="print the rows as JSON")
    p.set_defaults(func=run)
