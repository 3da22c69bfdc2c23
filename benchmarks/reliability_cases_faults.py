"""The faults ``benchmarks/reliability_sweep.py`` tries that held before its ten defect classes:
odd paths, signals, shared and killed studies, ``--out`` in odd places (classes 16-19).

Expected results as documented: paths are the user's own and any a filesystem takes runs
(docs/scenario.md: "Paths are relative to the scenario file"), a scenario ``name`` is one plain
name of at most 200 bytes; SIGINT and SIGTERM stop any command with exit code 130 and 143, its
temporary output removed (docs/scenario.md, "Bounds"); a ``dspark-tune`` study survives SIGKILL
and resumes, and several processes may work one study (docs/tuning.md, "Storage, workers,
resume"); an output directory replaces only one dspark-sim wrote or an empty one.
"""
from __future__ import annotations

import signal
import sqlite3

import yaml

from reliability_cases import (CALIBRATE, CAPACITY, COMPARE, DIR, RUN, SYNTH, TABLE, TINY, TUNE, TUNE_DB, TUNE_FILES,
                               VALIDATE, Case, Copy, Link, scenario)

ODD = {"spaces": "my dir/a b c", "quotes": "it's \"quoted\"", "semicolon": "a;touch pwned",
       "command substitution": "$(touch pwned)", "backticks": "`touch pwned`", "unicode": "données-ü-中文-🚀",
       "leading dash": "-x", "newline": "a\nb", "glob": "*?[x]", "255 chars": "n" * 255}


def _swap(argv: list[str], old: str, new: str) -> list[str]:
    return [new if a == old else a for a in argv]


def paths() -> list[Case]:
    """Class 16: input and output paths with spaces, quotes, shell characters, unicode, 255 bytes."""
    cases = []
    for label, name in ODD.items():
        out = "./" + name if name.startswith("-") else name
        # a 255-byte --out leaves its temporary sibling no room: refused in one line, as a name over
        # 200 bytes is (docs/scenario.md); the 255-byte input files are read
        expect = 2 if label == "255 chars" else 0
        cases += [
            Case(f"run scenario and --out with {label}", 16, _swap([*RUN, "--out", out], "s.yaml", f"./{name}.y"[-255:]
                                                                   if label == "255 chars" else f"./{name}.yaml"), expect,
                 {(f"{name}.y"[-255:] if label == "255 chars" else f"{name}.yaml"): scenario()},
                 may_change=(out.removeprefix("./").split("/")[0],)),
            Case(f"calibrate --table and --out with {label}", 16,
                 ["dspark-sim", "calibrate", "--table", f"./{name}.csv"[-255:] if label == "255 chars" else
                  f"./{name}.csv", "--out", out], expect,
                 {(f"{name}.csv"[-255:] if label == "255 chars" else f"{name}.csv"): TABLE},
                 may_change=(out.removeprefix("./").split("/")[0],))]
    cases += [Case("compare --out with spaces and $()", 16, [*COMPARE, "--out", "c d/$(touch pwned)"], 0,
                   may_change=("c d",)),
              Case("capacity --out with quotes and ;", 16, [*CAPACITY, "--out", "it's; rm -rf .."], 0,
                   may_change=("it's; rm -rf ..",)),
              Case("validate --real with spaces and unicode", 16,
                   ["dspark-sim", "validate", "--scenario", "s.yaml", "--real", "réel run", "--out", "v ü"], 0,
                   {"réel run": Copy("real")}, may_change=("v ü",)),
              Case("tune --scenario, --space, --out and SQLite with spaces", 16,
                   _swap(_swap(_swap(TUNE, "tiny.yaml", "a b/tiny 1.yaml"), "space.yaml", "a b/sp;ace.yaml"),
                         "sqlite:///{w}/s.db", "sqlite:///{w}/a b/s t.db") + ["--out", "o u t"], 0,
                   {"a b/tiny 1.yaml": TUNE_FILES["tiny.yaml"], "a b/sp;ace.yaml": TUNE_FILES["space.yaml"]},
                   may_change=("o u t", "a b/s t.db", "a b/s t.db-wal", "a b/s t.db-shm")),
              Case("tune --study unicode", 16, [*_swap(TUNE, "t", "étude-ü"), "--out", "o"], 0,
                   may_change=("o", *TUNE_DB)),
              Case("run name unicode, default out", 16, RUN, 0, {"s.yaml": scenario(name="données-ü")},
                   may_change=("runs",)),
              Case("run name of 200 bytes, default out", 16, RUN, 0, {"s.yaml": scenario(name="n" * 200)},
                   may_change=("runs",)),
              Case("run name of 255 bytes", 16, RUN, 2, {"s.yaml": scenario(name="n" * 255)}),
              Case("run name with a NUL", 16, RUN, 2, {"s.yaml": scenario(name="a\0b")}),
              Case("run scenario path missing", 16, _swap(RUN, "s.yaml", "no such.yaml"), 2),
              Case("run scenario path of 4096 bytes", 16, _swap(RUN, "s.yaml", "/".join(["d" * 200] * 21)), 2)]
    return cases


BIG = {**SYNTH, "num_requests": 200_000, "rate_per_s": 50.0}
LONG_TUNE = _swap(TUNE, "2", "500")


def signals() -> list[Case]:
    """Class 17: SIGINT and SIGTERM to every long command: one line, 130 or 143, nothing half-written."""
    big = {"s.yaml": scenario(workload={"synthetic": BIG})}
    slow_capacity = {"s.yaml": scenario(workload={"synthetic": {**BIG, "rate_per_s": 5.0}})}
    capacity = _swap(_swap(CAPACITY, "40", "20000"), "3", "24")
    cases = []
    for sig, code in ((signal.SIGINT, 130), (signal.SIGTERM, 143)):
        name = "stop: " + signal.Signals(sig).name
        cases += [Case(f"run {name} while starting", 17, [*RUN, "--out", "o"], code, big, stop=(sig, 0.3),
                       stop_within_s=5.0),
                  Case(f"run {name} early", 17, [*RUN, "--out", "o"], code, big, stop=(sig, 1.5),
                       stop_within_s=5.0),
                  Case(f"run {name} late, default out", 17, RUN, code, big, stop=(sig, 6.0), stop_within_s=5.0),
                  Case(f"run {name} over a previous output", 17, [*RUN, "--out", "prev"], code,
                       {**big, "prev/.dspark-sim": "", "prev/old.csv": "old"}, stop=(sig, 3.0), stop_within_s=5.0),
                  Case(f"capacity {name}", 17, [*capacity, "--out", "o"], code, slow_capacity, stop=(sig, 4.0),
                       stop_within_s=5.0),
                  Case(f"capacity --jobs 2 {name}", 17, [*capacity, "--jobs", "2", "--out", "o"], code, slow_capacity,
                       stop=(sig, 5.0), stop_within_s=5.0),
                  Case(f"compare {name}", 17, ["dspark-sim", "compare", "s.yaml", "--methods", "none,dspark",
                                               "--concurrency", "64", "--requests", "200000", "--quiet", "--out", "o"],
                       code, stop=(sig, 4.0), stop_within_s=5.0),
                  Case(f"tune {name}", 17, [*LONG_TUNE, "--out", "o"], code, may_change=TUNE_DB, stop=(sig, 6.0),
                       stop_within_s=10.0),
                  Case(f"tune --workers 2 {name}", 17, [*LONG_TUNE, "--workers", "2", "--out", "o"], code,
                       may_change=TUNE_DB, stop=(sig, 8.0), stop_within_s=10.0)]
    return cases


def _study_holds(db: str, trials: int):
    """A check: the SQLite study holds at least ``trials`` complete trials and none left running."""
    def check(w, o, err):
        with sqlite3.connect(w / db) as con:
            states = dict(con.execute("SELECT state, COUNT(*) FROM trials GROUP BY state").fetchall())
        done = states.get("COMPLETE", 0)
        if done < trials:
            return f"{db}: {done} complete trials of {trials} ({states})"
        return None
    return check


def studies() -> list[Case]:
    """Class 18: a study killed with SIGKILL resumes and completes; two processes share one study."""
    tune = [*TUNE, "--out", "o"]
    resume = _swap(tune, "2", "6")
    two = _swap(tune, "2", "6")
    return [Case("tune SIGKILL then resume", 18, _swap(LONG_TUNE, "t", "t"), 0, stop=(signal.SIGKILL, 8.0),
                 then=resume, may_change=("o", *TUNE_DB), check=_study_holds("s.db", 6), timeout_s=300),
            Case("tune --workers 2 SIGKILL then resume", 18, [*LONG_TUNE, "--workers", "2"], 0,
                 stop=(signal.SIGKILL, 8.0), then=[*resume, "--workers", "2"], may_change=("o", *TUNE_DB),
                 check=_study_holds("s.db", 6), timeout_s=300),
            Case("two tune processes on one SQLite study", 18, two, 0, beside=_swap(two, "o", "o2"),
                 may_change=("o", "o2", *TUNE_DB), check=_study_holds("s.db", 6), timeout_s=300),
            Case("two tune processes, --workers 2 each", 18, [*two, "--workers", "2"], 0,
                 beside=[*_swap(two, "o", "o2"), "--workers", "2"], may_change=("o", "o2", *TUNE_DB),
                 check=_study_holds("s.db", 6), timeout_s=300),
            Case("tune resume a finished study with more trials", 18,
                 ["dspark-tune", "--study", "t", "--trials", "3", "--storage", "sqlite:///{w}/t.db", "--quiet",
                  "--out", "o"], 0, may_change=("o", "t.db", "t.db-wal", "t.db-shm"), check=_study_holds("t.db", 3)),
            Case("tune resume with a changed scenario", 18, ["dspark-tune", "--study", "t", "--scenario", "other.yaml",
                                                            "--storage", "sqlite:///{w}/t.db", "--quiet"], 2,
                 {"other.yaml": yaml.safe_dump({**TINY, "seed": 7})}),
            Case("tune SQLite file is garbage", 18, _swap(TUNE, "sqlite:///{w}/s.db", "sqlite:///{w}/junk.db"), 2,
                 {"junk.db": b"not a database\n" * 100})]


def odd_out() -> list[Case]:
    """Class 19: --out in odd places: devices, the root, a FIFO's place, '~', a trailing slash, deep new folders."""
    cases = []
    for command, argv in (("run", RUN), ("compare", COMPARE), ("capacity", CAPACITY), ("validate", VALIDATE),
                          ("calibrate", CALIBRATE), ("tune", TUNE)):
        for label, out in (("/dev/null", "/dev/null"), ("/dev/null/x", "/dev/null/x"), ("/", "/"),
                           ("/tmp", "/tmp")):
            cases.append(Case(f"{command} --out {label}", 19, [*argv, "--out", out], 2))
    cases += [Case("run --out trailing slash", 19, [*RUN, "--out", "o/"], 0, may_change=("o",)),
              Case("run --out '~' (a folder named ~)", 19, [*RUN, "--out", "~"], 0, may_change=("~",)),
              Case("run --out new deep folders", 19, [*RUN, "--out", "a/b/c/d"], 0, may_change=("a",)),
              Case("calibrate --out dot-dot into W", 19, [*CALIBRATE, "--out", "sub/../o"], 0, {"sub": DIR},
                   may_change=("o",)),
              Case("run --out a link to a new place", 19, [*RUN, "--out", "l"], 2, {"l": Link("{o}/new")}),
              Case("run --out a dangling link", 19, [*RUN, "--out", "l"], 2, {"l": Link("nowhere")}),
              Case("tune --out a file", 19, [*TUNE, "--out", "f"], 2, {"f": "data"}),
              Case("compare --out the scenario file", 19, [*COMPARE, "--out", "s.yaml"], 2)]
    return cases


def fault_cases() -> list[Case]:
    return paths() + signals() + studies() + odd_out()
