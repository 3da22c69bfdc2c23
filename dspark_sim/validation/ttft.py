"""Where the time to first token goes, served and simulated: the fidelity cases' TTFT in parts.

Every request's TTFT splits, from its run record alone, into four parts that sum to it:

* ``queue``: arrival to first scheduling (``first_scheduled_s``: when the step that first
  takes it is planned; with overlapped steps, while the step before it runs);
* ``to_step``: first scheduling to the start of the step that gives its first token (the
  step in flight when it was planned, and earlier prefill chunks);
* ``step``: that step's duration (its prompt's last chunk, and the rest of the batch);
* ``read``: the step's end to the first token's time (when the host reads it).

The step that gives the first token is the last one ending by it (steps of one replica,
as the fidelity cases serve). :func:`case_parts` averages the parts over a case's requests
for the decoder's run and the simulator's; :func:`markdown` tabulates them with each part's
share of the mean TTFT error, and the error without the run's first request (whose time
includes the decoder's start of serving).
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from dspark_sim.metrics.record import read_requests, read_steps

PARTS = ("queue", "to_step", "step", "read")
TOL_S = 2e-6  # the record's times are written to the microsecond


def request_parts(run_dir: Path) -> dict[str, np.ndarray]:
    """Per request of a run (``requests.csv`` order): the four parts in ms, ``ttft`` in ms,
    ``first`` (the earliest arrival) and ``idle`` (arrived while no step ran)."""
    req = read_requests(run_dir / "requests.csv", ("arrival_s", "first_scheduled_s", "first_token_s", "ttft_ms"))
    st = read_steps(run_dir / "steps.csv", ("start_s", "step_s"))
    start, end = st.start_s, st.start_s + st.step_s
    arrival, sched, first = req.arrival_s, req.first_scheduled_s, req.first_token_s
    k = np.clip(np.searchsorted(end, first + TOL_S, side="right") - 1, 0, max(end.size - 1, 0))
    j = np.clip(np.searchsorted(start, arrival - TOL_S, side="left") - 1, 0, max(end.size - 1, 0))
    busy = (start[j] < arrival - TOL_S) & (end[j] > arrival)
    ms = 1e3
    out = {"queue": (sched - arrival) * ms, "to_step": (start[k] - sched) * ms, "step": (end[k] - start[k]) * ms,
           "read": (first - end[k]) * ms, "ttft": req.ttft_ms, "idle": ~busy,
           "first": np.arange(arrival.size) == int(np.argmin(arrival)) if arrival.size else np.zeros(0, bool)}
    return out


def case_parts(case_dir: Path) -> dict:
    """Mean parts of one case's ``real`` and ``sim`` runs (ms), the share of requests that
    arrived idle, and the mean TTFT without the run's first request."""
    out = {}
    for side in ("real", "sim"):
        p = request_parts(case_dir / side)
        rest = ~p["first"]
        out[side] = {part: float(p[part].mean()) for part in PARTS + ("ttft",)}
        out[side] |= {"idle_share": float(p["idle"].mean()), "first_ttft": float(p["ttft"][p["first"]][0]),
                      "ttft_rest": float(p["ttft"][rest].mean())}
    return out


def decompose(runs_root: Path, cases: list[str]) -> list[dict]:
    """:func:`case_parts` of each case under ``runs_root/<case>``, with its errors: each part's
    (sim - real) over the real mean TTFT, the mean TTFT's error, and the error without the first
    request."""
    rows = []
    for case in cases:
        parts = case_parts(runs_root / case)
        real, sim = parts["real"], parts["sim"]
        row = {"case": case, **parts,
               "error": {part: (sim[part] - real[part]) / real["ttft"] for part in PARTS}}
        row["error"]["ttft"] = sim["ttft"] / real["ttft"] - 1
        row["error"]["ttft_rest"] = sim["ttft_rest"] / real["ttft_rest"] - 1
        rows.append(row)
    return rows


def summary(rows: list[dict]) -> dict:
    """Over the cases: median of each signed error, and median / p90 / max of the absolute TTFT
    errors with and without each run's first request."""
    out = {f"median_{key}": float(np.median([r["error"][key] for r in rows])) for key in PARTS}
    for key in ("ttft", "ttft_rest"):
        errs = np.abs([r["error"][key] for r in rows])
        out[key] = {"median": float(np.median(errs)), "p90": float(np.percentile(errs, 90)), "max": float(errs.max())}
    return out


def markdown(data: dict) -> str:
    """The TTFT decomposition report (``docs/validation_ttft.md``) from :func:`write_parts`' data."""
    rows, s = data["cases"], data["summary"]
    pct = lambda x: f"{100 * x:+.1f} %"  # noqa: E731
    lines = ["# Fidelity: where the time to first token goes", "",
             f"Made by `{data['command']}` from the per-case runs of the fidelity comparison "
             f"(`profiles/h200/validation/runs/<case>/{{real,sim}}`, {data['simulated']}); the decoder's rows are "
             "measured on the H200 (docs/validation.md names the runs). Mean over each case's requests, in ms, "
             "decoder / simulator; the error columns are (simulator - decoder) over the decoder's mean TTFT, so "
             "the four parts' errors sum to the TTFT error.", "",
             "Parts (`dspark_sim/validation/ttft.py`): **queue** arrival to first scheduling (when the step "
             "that takes it is planned); **to step** first scheduling to the start of the step that gives the first "
             "token (with overlapped steps, the step in flight when it was planned); **step** that step's duration; "
             "**read** its end to the first token's time. **idle** is the share of requests that arrived while no "
             "step ran; **first** the TTFT of the run's first request (the decoder's includes its start of serving, "
             "`gc.collect` and `gc.freeze` after its clock started, in every run made before `serve` started "
             "its clock after them).", "",
             "| case | TTFT | error | queue | error | to step | error | step | error | read | error | idle | first "
             "| error w/o first |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        real, sim, err = r["real"], r["sim"], r["error"]
        cells = [f"{real['ttft']:.1f} / {sim['ttft']:.1f}", pct(err["ttft"])]
        for part in PARTS:
            cells += [f"{real[part]:.1f} / {sim[part]:.1f}", pct(err[part])]
        cells += [f"{real['idle_share']:.2f}", f"{real['first_ttft']:.0f} / {sim['first_ttft']:.0f}",
                  pct(err["ttft_rest"])]
        lines.append(f"| {r['case']} | " + " | ".join(cells) + " |")
    t, rest = s["ttft"], s["ttft_rest"]
    lines += ["", "Over the cases: median signed error by part " +
              ", ".join(f"{p.replace('_', ' ')} {pct(s['median_' + p])}" for p in PARTS) +
              f"; mean TTFT |error| {100 * t['median']:.1f} / {100 * t['p90']:.1f} / {100 * t['max']:.1f} % "
              f"(median / p90 / max), without each run's first request {100 * rest['median']:.1f} / "
              f"{100 * rest['p90']:.1f} / {100 * rest['max']:.1f} %.", ""]
    return "\n".join(lines)


def write_parts(runs_root: Path, cases: list[str], json_path: Path, command: str, simulated: str) -> dict:
    """Decompose ``cases``, write the data to ``json_path``; returns it (for :func:`markdown`)."""
    rows = decompose(runs_root, cases)
    data = {"command": command, "simulated": simulated, "summary": summary(rows), "cases": rows}
    json_path.write_text(json.dumps(data, indent=1) + "\n")
    return data
