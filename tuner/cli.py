"""`dspark-tune`: tune DSpark (and its baselines) for a GPU, a model and a trace.

    dspark-tune --gpu b300                       # the shipped scenario, into runs/
    dspark-tune --gpu h200 --drafter PATH        # name the DSpark drafter's checkpoint
    dspark-tune --gpu b300 --scenario trace.yaml --slo-tok-per-s-user 60 --workers 2
    dspark-tune --gpu b300 --repeats 3           # every study over 3 sampler seeds: mean and spread
    dspark-tune --scenario hour.yaml --slices 5,15   # prune on the first 5 and 15 minutes
    dspark-tune --study NAME                     # resume (SQLite in runs/ by default)
    dspark-tune export --study NAME --format sglang [--trial N]

Bad input ends in one line on stderr and exit code 2.
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from dspark_sim.errors import ArgumentParser, InputError, run_reporting_errors
from dspark_sim.limits import MAX_LATENCY_MS, MAX_SEED, MAX_TOK_PER_S_USER
from dspark_sim.engines.knobs import ENGINES

DEFAULT_SCENARIO = Path("examples") / "tune_default.yaml"
SLO_FLAGS = {"tpot_ms": "--slo-tpot-ms", "tok_per_s_user": "--slo-tok-per-s-user", "ttft_ms": "--slo-ttft-ms"}


def tune_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(prog="dspark-tune", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--gpu", help="GPU to tune for (catalog name, e.g. b300); default: the scenario's")
    p.add_argument("--scenario", help=f"scenario YAML (default {DEFAULT_SCENARIO})")
    p.add_argument("--model", help="target model (default: the scenario's)")
    p.add_argument("--drafter", help="DSpark drafter checkpoint, a Hugging Face id or a path (default: the "
                                     "scenario's speculation.drafter_checkpoint, else the model's published one)")
    p.add_argument("--engine", choices=ENGINES, help="engine to tune for: knobs it has no field for are held at "
                                                     "its behaviour (default sglang)")
    p.add_argument("--trials", type=int, help="complete DSpark trials the study should hold (default 200)")
    p.add_argument("--objective", choices=("throughput", "goodput", "pareto"),
                   help="maximise output tok/s per GPU (default), good requests/s per GPU, or the "
                        "Pareto front of tok/s per GPU against tok/s per user")
    slo = p.add_mutually_exclusive_group()
    slo.add_argument("--slo-tpot-ms", type=float, help="SLO: p99 TPOT at most this")
    slo.add_argument("--slo-tok-per-s-user", type=float, help="SLO: mean tok/s per user at least this")
    p.add_argument("--slo-ttft-ms", type=float, help="SLO: p99 TTFT at most this")
    p.add_argument("--storage", help="Optuna RDB URL (default sqlite:///runs/dspark-tune.db); "
                                     "postgresql://... shares a study across machines")
    p.add_argument("--study", help="study name; an existing study resumes with its stored settings")
    p.add_argument("--workers", type=int, default=1, help="local worker processes (default 1)")
    p.add_argument("--timeout", type=float, help="stop searching after this many seconds")
    p.add_argument("--out", help="output directory (default runs/<study>)")
    p.add_argument("--seed", type=int, help="sampler seed (default: the scenario's seed)")
    p.add_argument("--seeds", type=int, help="simulation seeds per trial (default 2)")
    p.add_argument("--baseline-trials", type=int,
                   help="trials per baseline study (default: --trials, the same budget as DSpark's)")
    p.add_argument("--repeats", type=int, help="studies per method, sampler seeds --seed, --seed + 1, ... "
                                                "(default 1); the report compares their mean and spread")
    p.add_argument("--baselines", help="comma list of none,static,schedule,threshold (default all; '' for none)")
    p.add_argument("--space", help="YAML overriding the search space (docs/tuning.md)")
    p.add_argument("--slices", help="prune: score each trial first on the trace's first M1, M2, ... minutes "
                                    "(e.g. 5,15), then the whole trace on the first seed, and stop trials "
                                    "that cannot win; --trials then counts complete and pruned trials "
                                    "(default: no pruning)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    return p


def export_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(prog="dspark-tune export", description="write a trial's configuration")
    p.add_argument("--study", required=True, help="study name (the DSpark study or NAME.<baseline>)")
    p.add_argument("--trial", type=int, help="trial number (default: the confirmed winner)")
    p.add_argument("--format", required=True, choices=("sglang", "vllm", "trtllm", "dspark"))
    p.add_argument("--storage", help="Optuna RDB URL (default sqlite:///runs/dspark-tune.db)")
    p.add_argument("--out", help="output directory (default runs/<study>/trial-<N>); files of other "
                                 "formats already there are kept")
    return p


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    from dspark_sim.tuner.runner import quiet

    quiet()
    interrupted = "interrupted; completed trials are in the study (resume with --study)"
    if argv[:1] == ["export"]:
        return run_reporting_errors(lambda: run_export(export_parser().parse_args(argv[1:])),
                                    interrupted=interrupted, program="dspark-tune export")
    return run_reporting_errors(lambda: run_tune(tune_parser().parse_args(argv)), interrupted=interrupted,
                                program="dspark-tune")


MAX_REPEATS = 50
# The numeric flags' bounds: (flag, attribute, low, high, integer).
FLAG_BOUNDS = (("--trials", "trials", 1, 10**6, True), ("--workers", "workers", 1, 256, True),
               ("--seeds", "seeds", 1, 100, True),
               ("--repeats", "repeats", 1, MAX_REPEATS, True), ("--baseline-trials", "baseline_trials", 0, 10**6, True),
               ("--timeout", "timeout", 1e-3, 1e8, False), ("--seed", "seed", 0, MAX_SEED - 200, False),
               ("--slo-tpot-ms", "slo_tpot_ms", 0, MAX_LATENCY_MS, False),
               ("--slo-ttft-ms", "slo_ttft_ms", 0, MAX_LATENCY_MS, False),
               ("--slo-tok-per-s-user", "slo_tok_per_s_user", 0, MAX_TOK_PER_S_USER, False))


def check_flags(args) -> None:
    """Every numeric flag within its bounds, the error naming the flag (a seed leaves room for the
    trial's further seeds)."""
    from dspark_sim.config import check_int, check_real

    for flag, name, low, high, integer in FLAG_BOUNDS:
        value = getattr(args, name)
        if integer or name == "seed":
            check_int(value, flag, low, high, optional=True)
        else:
            check_real(value, flag, low, high, strict_min=low == 0, optional=True)


def default_scenario() -> Path:
    """``examples/tune_default.yaml`` here, else in the source tree this package came from."""
    for root in (Path.cwd(), Path(__file__).resolve().parents[1]):
        if (root / DEFAULT_SCENARIO).is_file():
            return root / DEFAULT_SCENARIO
    raise InputError(None, "--scenario", None, f"{DEFAULT_SCENARIO} not found: give --scenario")


def study_name(base: dict, objective: str) -> str:
    raw = f"{base.get('name', 'scenario')}-{base['model']}-{base['gpu']}-{objective}"
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", raw).lower()


def new_settings(args):
    """Settings for a new study from the flags (defaults filled in)."""
    from dspark_sim.config import build
    from dspark_sim.slo import Slo
    from dspark_sim.tuner import pruning
    from dspark_sim.tuner.objective import Target
    from dspark_sim.engines.configs import check_space
    from dspark_sim.tuner.scenarios import load_base, to_scenario
    from dspark_sim.tuner.space import load_space
    from dspark_sim.tuner.tune import BASELINES, Settings

    slo = build(Slo, {"tpot_ms": args.slo_tpot_ms, "tok_per_s_user": args.slo_tok_per_s_user,
                      "ttft_ms": args.slo_ttft_ms}, None, None, SLO_FLAGS)
    target = Target(args.objective or "throughput", slo)
    base = load_base(args.scenario or default_scenario(), gpu=args.gpu, model=args.model,
                     slo=target.scenario_slo(), drafter=args.drafter)
    if not target.scenario_slo():  # no SLO flag: the scenario's own SLO is the constraint
        own = base.get("slo") or {}
        target = Target(target.objective, Slo(tpot_ms=own.get("tpot_ms"), ttft_ms=own.get("ttft_ms")))
    baselines = default_baselines(base["model"]) if args.baselines is None \
        else tuple(b for b in args.baselines.split(",") if b)
    for b in baselines:
        if b not in BASELINES:
            raise InputError(None, "--baselines", b, f"expected some of {','.join(BASELINES)}")
    seed = base.get("seed", 0) if args.seed is None else args.seed
    n_seeds = args.seeds or 2
    slices = pruning.parse_slices(args.slices)
    if slices or (base.get("workload") or {}).get("trace") is not None:
        # the trace read whole once: a bad row is refused here in one line, not in every trial
        pruning.check_slices(slices, target.objective, pruning.span_s(base, seed))
    settings = Settings(base, target, load_space(args.space), trials=args.trials or 200,
                        baseline_trials=(args.trials or 200) if args.baseline_trials is None else args.baseline_trials,
                        baselines=baselines, seeds=tuple(seed + i for i in range(n_seeds)),
                        confirm_seeds=tuple(seed + n_seeds + i for i in range(3)), sampler_seed=seed,
                        engine=args.engine or "sglang", repeats=args.repeats or 1, slices=slices)
    check_space(settings.engine_space(), to_scenario(base).deployment, args.space or args.scenario)
    return settings


def default_baselines(model: str) -> tuple[str, ...]:
    """Every baseline, DFlash only for a target with a DFlash acceptance preset of its own."""
    from dspark_sim.acceptance.preset import builtin
    from dspark_sim.catalog import get_model
    from dspark_sim.tuner.tune import BASELINES

    name = get_model(model).name
    has_dflash = any(p.drafter == "dflash" and p.target == name for p in builtin().presets)
    return tuple(b for b in BASELINES if b != "dflash" or has_dflash)


DEFINING = ("gpu", "scenario", "model", "drafter", "engine", "objective", "slo_tpot_ms", "slo_tok_per_s_user",
            "slo_ttft_ms", "seed", "seeds", "baselines", "space", "slices")


def study_of(args):
    """(study name, the flags' settings or None): the name ``--study`` gives, else the one the
    settings make; it names the output directory, so it must be a plain name."""
    from dspark_sim.metrics.outdir import check_name

    given = [k for k in DEFINING if getattr(args, k) is not None]
    fresh = new_settings(args) if given or not args.study else None
    name = args.study or study_name(fresh.base, fresh.target.objective)
    return check_name(name, None, "--study"), fresh


def settings_for(args, url: str, named: tuple | None = None):
    """(study name, settings): the flags' settings, or a stored study's when it exists
    (``named``: :func:`study_of`'s answer, when the caller has it already).

    Resuming needs only ``--study``. Flags given along with an existing study
    must define the same study (another machine joining it runs the same
    command); only the budgets (trials, repeats) may change, and file paths may differ.
    """
    from dataclasses import replace

    from dspark_sim.tuner import storage
    from dspark_sim.tuner.tune import stored_settings

    name, fresh = named or study_of(args)
    storage.check_sqlite(url, exists=fresh is None, write=True)
    stored = stored_settings(url, name)
    if stored is None:
        if fresh is None:
            raise InputError(None, "--study", name, f"no such study in {url}: give --scenario (or --gpu) to start it")
        return name, fresh
    if fresh is not None and fresh.identity() != stored.identity():
        raise InputError(None, "--study", name, "exists with other settings (scenario, SLO, space or seeds); "
                         "pick another --study, or drop the flags to resume it")
    settings = fresh or stored
    print(f"resuming study {name} from {url}", file=sys.stderr)
    return name, replace(settings, trials=args.trials or stored.trials,
                         baseline_trials=stored.baseline_trials if args.baseline_trials is None
                         else args.baseline_trials, repeats=args.repeats or stored.repeats)


def run_tune(args) -> int:
    from dspark_sim.metrics.outdir import check_out
    from dspark_sim.tuner import storage
    from dspark_sim.tuner.tune import tune

    check_flags(args)
    url = storage.check_url(args.storage) if args.storage else storage.default_url()
    named = study_of(args)
    out = check_out(Path(args.out) if args.out else Path("runs") / named[0])  # before any trial runs
    name, settings = settings_for(args, url, named)
    winners = tune(settings, url, name, out, workers=args.workers, timeout_s=args.timeout,
                   show_progress=not args.quiet)
    print((out / "report.md").read_text().split("\n## ")[0].strip())
    if not winners:
        print(f"error: no trial completed (the warnings above say why); study {name} in {url}", file=sys.stderr)
        return 1
    print(f"wrote {out}/ (dspark.yaml, sglang.yaml, vllm.yaml, trtllm.yaml, report.md); study {name} in {url}")
    return 0


def run_export(args) -> int:
    from dspark_sim.metrics.outdir import check_name, output_folder
    from dspark_sim.tuner import storage
    from dspark_sim.tuner.tune import record_of, stored_settings, write_exports

    check_name(args.study, None, "--study")
    url = storage.check_url(args.storage) if args.storage else storage.default_url()
    storage.check_sqlite(url, exists=True, write=False)  # reading a study creates no database
    # NAME, NAME.<baseline>, NAME.rN or NAME.<baseline>.rN: the settings live on NAME
    parts = args.study.split(".")
    settings = next((found for i in range(len(parts), 0, -1)
                     if (found := stored_settings(url, ".".join(parts[:i]))) is not None), None)
    if settings is None:
        raise InputError(None, "--study", args.study, f"no dspark-tune study of that name in {url}")
    record = record_of(url, args.study, args.trial, list(settings.seeds))
    study = record.get("study", args.study)  # the DSpark study's winner may be another repeat's
    # each file is written atomically; other formats already in the folder stay
    with output_folder(Path(args.out) if args.out else Path("runs") / study / f"trial-{record['trial']}") as out:
        files, notes = write_exports(settings.base, record, study, out, [args.format], out,
                                     settings.target.describe(), settings.engine)
    for note in notes:
        print(note)
    if files:
        print(f"wrote {', '.join(str(out / f) for f in files)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
