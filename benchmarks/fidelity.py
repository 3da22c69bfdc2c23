"""Fidelity: the real decoder and the simulator on the same traces (H200 error table).

    python benchmarks/fidelity.py cases                  # CPU: trace slices, scenarios, SPS table
    python benchmarks/fidelity.py cases --model qwen3-32b --tp 2 --traces syn-light syn-mid   # TP 2 cases
    python benchmarks/fidelity.py run --out DIR          # GPU: the decoder serves every case
    python benchmarks/fidelity.py compare --real DIR     # CPU: simulate every case, error table
    python benchmarks/fidelity.py report --real DIR      # the doc again from the committed errors.json
    python benchmarks/fidelity.py ttft                   # TTFT in parts, decoder against simulator
    python benchmarks/fidelity.py cases --sweeps         # CPU: the load sweeps' cases and their time plan
    python benchmarks/fidelity.py run --sweeps --out DIR [--only sw-chat sw-sess:mixed] [--batching mixed]
    python benchmarks/fidelity.py saturation             # CPU: where each family saturates (the simulator)

A driver of :mod:`dspark_sim.validation` on this repository's files: ``cases`` writes
``profiles/h200/validation/cases/`` (:mod:`~dspark_sim.validation.cases`); ``run`` has the
decoder serve them on the GPU (:mod:`~dspark_sim.validation.serve`); ``compare`` simulates
every case, copies both runs to ``profiles/h200/validation/runs/<case>/{real,sim}/`` and
writes the error table (``profiles/h200/validation/errors.json``, ``docs/validation.md`` and
its plot; :mod:`~dspark_sim.validation.fidelity`, :mod:`~dspark_sim.validation.report`), then
the TTFT decomposition of the same cases (``ttft``: ``profiles/h200/validation/ttft_parts.json``,
``docs/validation_ttft.md``; :mod:`~dspark_sim.validation.ttft`).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from dspark_sim.validation.cases import CASE_METHODS, make_cases
from dspark_sim.validation.committed import SWEEP_DOC, SWEEP_JSON, TTFT_DOC, TTFT_JSON, VALIDATION, lockstep_data

REPO = Path(__file__).resolve().parents[1]
CASES_DIR = VALIDATION / "cases"
SWEEPS_DIR = VALIDATION / "sweeps"
AZURE = REPO / "examples" / "traces" / "azure_llm_2023_code.csv"


def ttft(args=None) -> None:
    """The TTFT decomposition of the cases in the committed ``errors.json``, from their runs."""
    from dspark_sim.engines.model import Engine
    from dspark_sim.validation.ttft import markdown, write_parts

    cases = [row["case"] for row in json.loads((VALIDATION / "errors.json").read_text())["cases"]]
    overlap = "on" if Engine().overlapped else "off"
    data = write_parts(VALIDATION / "runs", cases, TTFT_JSON, "python benchmarks/fidelity.py ttft",
                       f"the simulator with the decoder engine's overlap {overlap}")
    TTFT_DOC.write_text(markdown(data))


def compare_sweeps(args) -> None:
    """The sweeps' error report (``sweep_errors.json``, docs/validation_sweeps.md) from decoder visits
    (directories holding case folders or the run's .tgz archives)."""
    from dspark_sim.validation.sweep_page import markdown
    from dspark_sim.validation.sweep_report import report

    rel = lambda r: str(Path(r).resolve().relative_to(REPO)) \
        if Path(r).resolve().is_relative_to(REPO) else r  # noqa: E731
    data = report(SWEEPS_DIR, [Path(r) for r in args.real], [Path(r) for r in args.replicate or ()])
    data["made_by"] = "python benchmarks/fidelity.py compare --sweeps --real " + " ".join(rel(r) for r in args.real) \
        + (" --replicate " + " ".join(rel(r) for r in args.replicate) if args.replicate else "")
    SWEEP_JSON.write_text(json.dumps(data, indent=1) + "\n")
    SWEEP_DOC.write_text(markdown(data, data["made_by"], VALIDATION / "real"))
    print(SWEEP_DOC.read_text())


def compare(args) -> None:
    if args.sweeps:
        compare_sweeps(args)
        return
    from dspark_sim.validation.fidelity import error_report
    from dspark_sim.validation.report import markdown, plot_errors

    args.replicate = args.replicate[0] if args.replicate else None
    real = [Path(r) for r in args.real]
    report = error_report(CASES_DIR, real, VALIDATION, replicate=Path(args.replicate) if args.replicate else None)
    (VALIDATION / "errors.json").write_text(json.dumps(report, indent=1) + "\n")
    plot_errors(report["cases"], REPO / "docs" / "img" / "validation_errors.png")
    rel = lambda r: str(Path(r).resolve().relative_to(REPO)) \
        if Path(r).resolve().is_relative_to(REPO) else r  # noqa: E731
    replicate = (report["replicate"]["run"], report["replicate"]["cases"]) if "replicate" in report else None
    text = markdown(report["cases"], report["summary"], report["provenance"],
                    " ".join(rel(r) for r in args.real) + (f" --replicate {rel(args.replicate)}" if args.replicate else ""),
                    replicate, VALIDATION / "real", lockstep_data())
    Path(args.doc).write_text(text)
    print(text)
    if Path(args.doc).resolve() == (REPO / "docs" / "validation.md").resolve():
        ttft()


def report(args) -> None:
    """docs/validation.md again from the committed ``errors.json`` (no simulation)."""
    from dspark_sim.validation.report import markdown

    data = json.loads((VALIDATION / "errors.json").read_text())
    replicate = (data["replicate"]["run"], data["replicate"]["cases"]) if "replicate" in data else None
    text = markdown(data["cases"], data["summary"], data["provenance"], " ".join(args.real) + (
        f" --replicate {args.replicate}" if args.replicate else ""), replicate, VALIDATION / "real", lockstep_data())
    Path(args.doc).write_text(text)


def cases(args) -> None:
    if args.sweeps:
        from dspark_sim.validation.sweeps import write_cases

        paths = write_cases(Path(args.dir) if args.dir else SWEEPS_DIR, AZURE)
    else:
        out = Path(args.dir) if args.dir else CASES_DIR if args.tp == 1 else VALIDATION / f"cases_tp{args.tp}"
        paths = make_cases(out, AZURE, model=args.model, tp=args.tp, traces=args.traces)
    for path in paths:
        print(path.resolve().relative_to(REPO) if path.resolve().is_relative_to(REPO) else path)


def run(args) -> None:
    """Serve the cases on the GPU within --max-seconds, whole units only (a sweep, or one trace
    of the fixed cases)."""
    from dspark_sim.validation.budget import Budget, Unit
    from dspark_sim.validation.cases import case_traces
    from dspark_sim.validation.serve import Rig, run_cases

    methods = list(args.methods or CASE_METHODS)
    if args.sweeps:
        from dspark_sim.validation.sweeps import budget

        cases_dir, wanted = SWEEPS_DIR, None
        plan = budget(cases_dir, args.max_seconds, args.only, args.batching, methods)
    else:
        only = set(args.only or ())
        units = [Unit(t, (t,)) for t in case_traces() if not only or t in only or any(f"{t}__{m}" in only for m in methods)]
        cases_dir = CASES_DIR
        wanted = (lambda t, m: not only or t in only or f"{t}__{m}" in only)  # noqa: E731
        plan = Budget(units, methods, {}, {}, args.max_seconds)
    run_cases(cases_dir, Path(args.out), plan, wanted, Path(args.archive) if args.archive else None, args.passes,
              args.warm_requests, Rig(args.kv_tokens, args.dry_run), not args.no_crosscheck)


def saturation() -> None:
    """Print where each sweep family saturates (:func:`~dspark_sim.validation.sweeps.estimate_saturation`)."""
    from dspark_sim.validation.sweeps import BATCHINGS, FAMILIES, estimate_saturation

    for fam in FAMILIES:
        rates = {(b, m): estimate_saturation(fam, b, m) for b in BATCHINGS for m in CASE_METHODS}
        print(f"{fam.name}: recorded {fam.saturation_rps:g} req/s; estimated "
              + ", ".join(f"{b}/{m} {r:.1f}" for (b, m), r in rates.items())
              + f"; highest {max(rates.values()):.1f}", flush=True)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    k = sub.add_parser("cases")
    k.add_argument("--model", default="qwen3-8b")
    k.add_argument("--tp", type=int, default=1, help="GPUs per replica (the decoder runs one process each)")
    k.add_argument("--traces", nargs="*", help="a subset of the traces (default all)")
    k.add_argument("--dir", help="where to write (default the shipped cases; tp > 1: cases_tp<N>)")
    k.add_argument("--sweeps", action="store_true", help="the load sweeps' cases (profiles/h200/validation/sweeps)")
    r = sub.add_parser("run")
    r.add_argument("--out", required=True)
    r.add_argument("--max-seconds", type=float, default=420.0)
    r.add_argument("--only", nargs="*", help="traces (every method) or cases trace__method to run (default all); "
                   "with --sweeps, families (sw-chat) or sweeps (sw-chat:mixed)")
    r.add_argument("--sweeps", action="store_true", help="serve the load sweeps, whole sweeps only")
    r.add_argument("--batching", nargs="*", choices=["mixed", "prefill_first"], help="with --sweeps: these batchings")
    r.add_argument("--archive", help="also keep a .tgz of --out here, updated after every unit (sweep, or trace of the fixed cases)")
    r.add_argument("--methods", nargs="*", choices=list(CASE_METHODS), help="methods to run (default all)")
    r.add_argument("--passes", type=int, default=1, help="serve each case this often, keep the last")
    r.add_argument("--warm-requests", type=int, default=0)
    r.add_argument("--kv-tokens", type=int, default=0, help="decoder KV capacity (0: free memory)")
    r.add_argument("--no-crosscheck", action="store_true", help="skip the profiler's steps after each method")
    r.add_argument("--dry-run", action="store_true", help="CPU: a tiny model serves each case's first requests "
                   "through the same loop and record (checks a device call's plumbing)")
    c = sub.add_parser("compare")
    c.add_argument("--real", required=True, nargs="+",
                   help="directories of decoder runs (one folder per case), first wins")
    c.add_argument("--replicate", nargs="+", help="decoder runs on another machine: their cases' errors, "
                   "reported beside the main table (one run; with --sweeps, its visits)")
    c.add_argument("--sweeps", action="store_true", help="the load sweeps: profiles/h200/validation/sweep_errors.json "
                   "and docs/validation_sweeps.md")
    c.add_argument("--doc", default=str(REPO / "docs" / "validation.md"))
    w = sub.add_parser("report", help="rewrite the doc from the committed errors.json (the --real and "
                                      "--replicate named are those compare was given)")
    w.add_argument("--real", required=True, nargs="+")
    w.add_argument("--replicate")
    w.add_argument("--doc", default=str(REPO / "docs" / "validation.md"))
    sub.add_parser("ttft", help="TTFT in parts for the cases of the committed errors.json, from their runs")
    sub.add_parser("saturation", help="where each sweep family saturates, by method and batching (the simulator)")
    i = sub.add_parser("import-visit", help="a device call's files (benchmarks/h200_sweep_visit.sh's $OUT) into "
                                            "profiles/GPU/validation/real/VISIT with its notes.json")
    i.add_argument("--src", required=True, help="where the call's files came back")
    i.add_argument("--visit", required=True, help="the visit's name, e.g. visit17")
    i.add_argument("--parts", nargs="+", required=True, choices=["sweepA", "sweepB", "sweepL", "capacity"],
                   help="the calls served on one GPU")
    i.add_argument("--command", required=True, help="the device call as it was run (for the notes)")
    i.add_argument("--gpu", default="h200", help="the GPU the calls ran on (the catalog's name): the visit goes "
                   "under profiles/GPU/validation/real/")
    args = p.parse_args(argv)
    if args.cmd == "cases":
        cases(args)
    elif args.cmd == "run":
        run(args)
    elif args.cmd == "saturation":
        saturation()
    elif args.cmd == "import-visit":
        import re

        from dspark_sim.validation.visits import import_visit

        from dspark_sim.catalog import get_gpu
        from dspark_sim.errors import InputError

        profile = (REPO / "profiles" / "h200" / "qwen3-8b.json").read_text()  # (another GPU's projects it)
        try:
            gpu = get_gpu(args.gpu, file="--gpu", key="gpu").name  # (a catalog name: the visit stays under profiles/)
            if Path(args.visit).name != args.visit or args.visit in (".", ".."):
                raise InputError("--visit", "visit", args.visit, "must be a plain name, such as visit23")
            notes = import_visit(Path(args.src), REPO / "profiles" / gpu / "validation" / "real" / args.visit,
                                 args.parts, args.command, set(re.findall(r"GPU-[0-9a-f-]+", profile)))
        except InputError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
        print(json.dumps(notes, indent=1))
    elif args.cmd == "report":
        report(args)
    elif args.cmd == "ttft":
        ttft(args)
    else:
        compare(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
