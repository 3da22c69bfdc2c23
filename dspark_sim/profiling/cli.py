"""``dspark-profile``: time a model's steps on this GPU, or fit what was timed.

    dspark-profile --gpu h200 --model qwen3-8b --out DIR ...     # GPU: the profiler (raw_<model>.json)
    dspark-profile comm --gpu h200 --tp 2 --out DIR              # GPUs: collectives (comm_tp2.json)
    dspark-profile steps --gpu h200 --model qwen3-32b --tp 2 --out DIR   # whole TP steps
    dspark-profile fit --raw-dir DIR [--gpu h200] [--out-dir profiles] [--img-dir DIR] [--docs FILE]

``fit`` turns every ``raw_<model>.json`` of ``--raw-dir`` into ``<out-dir>/<gpu>/<model>.json``
(two slices ``raw_<model>.slice<N>.json`` scaled to the whole model first; a model timed
both ways writes the scaling's error to ``<out-dir>/<gpu>/slice_scaling.json``) with its
SGLang tables, projects it to the other shipped GPUs, plots it against its points
(``--img-dir``, default ``<out-dir>/plots``) and prints the held-out error table (into the
markers of ``--docs`` when given). ``--levels-only`` recomputes only the leave-one-level-out
errors of the profiles already there (:mod:`.levels`); ``--post-only`` refits only the
terms fitted after the rest, each on its own steps (:func:`.pipeline.with_post_terms`: the
spread of contexts, shared prefixes, the power limit, the drafters in a served step and the
mixed steps, from the spread rows of ``raw_<model>.json`` and the probes in ``--raw-dir``; a
full fit does the same). ``--synthetic`` is a dry run on roofline data with noise,
into a scratch directory. Bad input prints one line and exits with code 2.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from dspark_sim.errors import ArgumentParser, InputError, run_reporting_errors


def fit_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(prog="dspark-profile fit", description=__doc__.split("\n")[0])
    p.add_argument("--gpu", default="h200", help="the GPU the raw files were measured on")
    p.add_argument("--raw-dir", type=Path, help="folder of raw_<model>.json (default: <out-dir>/<gpu>/raw)")
    p.add_argument("--out-dir", type=Path, help="profiles folder to write (default: profiles, "
                                                "a scratch folder with --synthetic)")
    p.add_argument("--img-dir", type=Path, help="plots (default: <out-dir>/plots)")
    p.add_argument("--docs", type=Path, help="a markdown file whose held-out markers get the error table")
    p.add_argument("--command", help="the command named in --docs (default: this one)")
    p.add_argument("--folds", type=int, default=10, help="k of the k-fold held-out error")
    p.add_argument("--models", nargs="*", help="only these models")
    p.add_argument("--synthetic", action="store_true", help="dry run on roofline data with noise")
    p.add_argument("--post-only", action="store_true",
                   help="only refit the terms fitted after the rest (spread, shared prefixes, power limit, "
                        "drafters in a served step, mixed steps, launch times) of the profiles already in --out-dir from "
                        "--raw-dir, keeping every other fitted number")
    p.add_argument("--levels-only", action="store_true",
                   help="only (re)compute the leave-one-level-out errors of the profiles already in --out-dir, "
                        "keeping their fitted numbers")
    return p


def fit(args) -> int:
    """Fit, project, tabulate and plot every raw profile; print the held-out error table."""
    from dspark_sim.catalog import get_gpu
    from dspark_sim.profiling.pipeline import (add_level_errors, add_post_terms, fit_raws, held_out_table, measured_profiles,
                                               measured_raws, synthetic_raws, update_docs)
    from dspark_sim.profiling.slices import write_slice_errors

    measured = get_gpu(args.gpu, key="--gpu")
    scratch = Path(tempfile.mkdtemp(prefix="dspark_profiles_")) if args.synthetic else None
    out_dir = args.out_dir or (scratch / "profiles" if scratch else Path("profiles"))
    if args.synthetic and args.out_dir is not None and (out_dir / "__init__.py").is_file():
        raise InputError(None, "--out-dir", str(out_dir), "--synthetic must not write into a shipped profiles folder")
    raw_dir = args.raw_dir or out_dir / measured.name / "raw"

    def log(line: str) -> None:
        print(line, file=sys.stderr if line.startswith("warning:") else sys.stdout)

    if args.post_only:
        done = add_post_terms(out_dir, measured, raw_dir, args.models, log)
        if done:
            table = held_out_table(measured_profiles(out_dir))
            if args.docs is not None:
                update_docs(args.docs, table, args.command or "dspark-profile fit " + " ".join(sys.argv[2:]))
        return 0 if done else 1
    raws, slice_errors = ((synthetic_raws(args.models, measured), {}) if args.synthetic
                          else measured_raws(raw_dir, args.models, log))
    if slice_errors and not args.levels_only:
        write_slice_errors(out_dir / measured.name / "slice_scaling.json", slice_errors, log)
    if not raws:
        print(f"no raw profiles under {raw_dir}: waiting for the profiler", file=sys.stderr)
        return 1
    if args.levels_only:
        fitted = add_level_errors(raws, measured, out_dir, log)
    else:
        fitted = fit_raws(raws, measured, out_dir, args.img_dir or out_dir / "plots", folds=args.folds, log=log,
                          raw_dir=None if args.synthetic else raw_dir)
    # the table lists every measured profile in the folder, not only those fitted now
    table = held_out_table(fitted if args.synthetic else measured_profiles(out_dir))
    print(table)
    if args.synthetic:
        print(f"synthetic dry run: outputs under {scratch}; docs untouched")
    elif args.docs is not None:
        update_docs(args.docs, table, args.command or "dspark-profile fit " + " ".join(sys.argv[2:]))
    return 0


def _ranks(what: str, argv: list[str]) -> int:
    """``comm`` / ``steps``: the multi-GPU profiler; a rank that fails ends it with one line."""
    from dspark_sim.kernels.decoder.tp import RankFailed
    from dspark_sim.kernels.profiler.tp import comm_main, steps_main

    try:
        return (comm_main if what == "comm" else steps_main)(argv)
    except RankFailed as err:
        print(f"error: {err}", file=sys.stderr)
        return err.code


def main(argv: list[str] | None = None) -> int:
    """``fit`` fits raw profiles; anything else runs the GPU profiler."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["fit"]:
        return run_reporting_errors(fit, fit_parser().parse_args(argv[1:]), program="dspark-profile fit")
    if argv[:1] in (["comm"], ["steps"]):
        return run_reporting_errors(_ranks, argv[0], argv[1:], program=f"dspark-profile {argv[0]}")
    from dspark_sim.kernels.profiler.__main__ import main as profile

    return profile(argv)


if __name__ == "__main__":
    sys.exit(main())
