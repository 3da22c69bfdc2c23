"""The hostile cases of ``benchmarks/reliability_sweep.py``: what a user might type, write or do.

Each :class:`Case` runs one command in a fresh working directory ``W`` beside a directory
``O`` standing for the rest of the user's disk (``{w}`` and ``{o}`` in its arguments). Its
files are written first (``files``: path -> text, bytes, :class:`Link`, :data:`DIR`, or
:class:`Copy` of a prepared fixture). ``expect`` is the exit code; ``may_change`` the paths
(under ``W``) a successful command may create or change; nothing else may move. Classes:

1 placement, 2 bounded parsing, 3 validate's invariants, 4 accepted drafts, 5 one line instead
of a traceback, 6 exports an engine runs as scored, 7 stopping, 8 leftovers, 9 Mooncake numbers,
10 the report's baseline line, 0 commands that must succeed (so the sweep cannot pass by refusing);
11-15 (``reliability_cases_inputs.py``) bad numbers, malformed YAML, unknown keys, garbage traces,
unknown names; 16-19 (``reliability_cases_faults.py``) odd paths, signals, shared and killed
studies, ``--out`` in odd places.
"""
from __future__ import annotations

import csv
import io
import json
import signal
from dataclasses import dataclass, field
from typing import Callable

import yaml

from dspark_sim.metrics.run_summary import RunSummary


@dataclass(frozen=True)
class Link:
    target: str  # relative to the link's folder, or absolute ({w}/{o} filled in)


@dataclass(frozen=True)
class Copy:
    fixture: str  # a file or folder the sweep prepared (fixtures())


@dataclass(frozen=True)
class Sparse:
    size: int  # bytes: ``head``, then a hole (zeros not on disk), as ``truncate`` makes
    head: str = ""


DIR = object()


@dataclass
class Case:
    name: str
    kind: int
    argv: list[str]
    expect: int
    files: dict = field(default_factory=dict)
    may_change: tuple[str, ...] = ()
    check: Callable | None = None  # (W, O, stderr) -> a problem, or None
    stop: tuple[int, float] | None = None  # (signal, seconds after start) sent to the command
    stop_within_s: float | None = None  # with ``stop``: how long it may take to end after it
    timeout_s: float = 120.0
    beside: list[str] | None = None  # a second command started with the first, in W; it must end alike
    then: list[str] | None = None  # run once the first has ended; ``expect`` and the stderr rules are its


SYNTH = {"num_requests": 12, "rate_per_s": 4.0, "arrival": "poisson",
         "prompt_tokens": {"dist": "constant", "mean": 300}, "output_tokens": {"dist": "constant", "mean": 20}}


def scenario(name="s", workload=None, **over) -> str:
    data = {"name": name, "workload": workload or {"synthetic": SYNTH, "domain": "math"}, "model": "qwen3-8b",
            "gpu": "h200", "deployment": {"replicas": 1, "tp": 1, "max_running_requests": 64},
            "speculation": {"method": "dspark", "block_size": 7}, "slo": {"ttft_ms": 2000, "tpot_ms": 50}, "seed": 0}
    data.update(over)
    return yaml.safe_dump(data, sort_keys=False)


TINY = {"name": "tiny", "workload": {"synthetic": {**SYNTH, "num_requests": 24, "rate_per_s": 400.0}, "domain": "math"},
        "model": "qwen3-8b", "gpu": "a100",
        "deployment": {"replicas": 1, "tp": 1, "max_running_requests": 64, "max_batched_tokens": 2048},
        "speculation": {"method": "dspark", "block_size": 5}, "slo": {"tpot_ms": 40}, "seed": 0}
SPACE = {"deployment": {"max_running_requests": {"low": 4, "high": 32, "log": True},
                        "chunked_prefill_tokens": [512, 2048]}}
TUNE_FILES = {"tiny.yaml": yaml.safe_dump(TINY, sort_keys=False), "space.yaml": yaml.safe_dump(SPACE)}
BOMB = "name: bomb\n" + 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n' + "".join(
    f"{b}: &{b} [{','.join(['*' + a] * 9)}]\n" for a, b in zip("abcdefgh", "bcdefghi"))
TABLE = "dataset,accept_len\ngsm8k,6.0\n"
LOG = "c1,c2,accepted\n" + "".join(f"{0.2 + 0.6 * (i % 7) / 6:.3f},{0.3 + 0.5 * (i % 5) / 4:.3f},{i % 3}\n"
                                   for i in range(400))
MOONCAKE_ROW = {"timestamp": 0, "input_length": 50, "output_length": 5}


def mooncake(**bad) -> str:
    """Two Mooncake rows, the second with the raw JSON values of ``bad`` in place of its own."""
    second = {**MOONCAKE_ROW, "timestamp": 5}
    cells = ", ".join(f'"{k}": {bad.get(k, json.dumps(v))}' for k, v in second.items())
    return json.dumps(MOONCAKE_ROW) + "\n{" + cells + "}\n"


RUN = ["dspark-sim", "run", "s.yaml", "--quiet", "--no-plots"]
COMPARE = ["dspark-sim", "compare", "s.yaml", "--methods", "none", "--concurrency", "1", "--requests", "8", "--quiet"]
CAPACITY = ["dspark-sim", "capacity", "s.yaml", "--gpus", "h200", "--methods", "none", "--tp", "1",
            "--max-requests", "40", "--max-sims", "3", "--quiet", "--no-plots"]
VALIDATE = ["dspark-sim", "validate", "--scenario", "s.yaml", "--real", "real"]
CALIBRATE = ["dspark-sim", "calibrate", "--table", "t.csv"]
TRACE = ["dspark-sim", "trace", "s.yaml"]
TUNE = ["dspark-tune", "--scenario", "tiny.yaml", "--space", "space.yaml", "--trials", "2", "--baseline-trials", "0",
        "--baselines", "", "--storage", "sqlite:///{w}/s.db", "--study", "t", "--quiet"]
EXPORT = ["dspark-tune", "export", "--study", "t", "--format", "vllm", "--storage", "sqlite:///{w}/t.db"]
BASE_FILES = {"s.yaml": scenario(), "t.csv": TABLE, "real": Copy("real"), "t.db": Copy("t.db"), **TUNE_FILES}
# command -> (argv, files, what a success writes)
COMMANDS = {"run": (RUN, "out"), "compare": (COMPARE, "out"), "capacity": (CAPACITY, "out"),
            "validate": (VALIDATE, "out"), "calibrate": (CALIBRATE, "out"), "tune": (TUNE, "out"),
            "export": (EXPORT, "out"), "trace": (TRACE, "out")}
TUNE_DB = ("s.db", "s.db-wal", "s.db-shm")


def with_out(command: str, out: str) -> list[str]:
    return [*COMMANDS[command][0], "--out", out]


def placement() -> list[Case]:
    """Class 1: names that are not names, and targets that are not the command's to replace."""
    cases = []
    targets = {"foreign dir": ("mine", {"mine/notes.txt": "keep"}), "file": ("afile", {"afile": "data"}),
               "link to a dir": ("link", {"link": Link("{o}/victim")}), "the working dir": (".", {}),
               "its parent": ("..", {}), "absolute foreign dir": ("{o}/victim", {})}
    for command in ("run", "compare", "capacity", "validate", "calibrate", "tune", "export"):
        for label, (out, files) in targets.items():
            cases.append(Case(f"{command} --out {label}", 1, with_out(command, out), 2, files))
    for label, name in {"absolute": "{o}/victim", "dot": ".", "dotdot": "..", "dotdot/escape": "../escape",
                        "slash": "a/b", "empty": "", "backslash": "a\\b"}.items():
        cases.append(Case(f"run name {label}", 1, RUN, 2, {"s.yaml": scenario(name=name)}))
    cases.append(Case("compare name absolute", 1, COMPARE, 2, {"s.yaml": scenario(name="{o}/victim")}))
    cases.append(Case("capacity name dot", 1, CAPACITY, 2, {"s.yaml": scenario(name=".")}))
    cases.append(Case("run default out runs/<name> foreign", 1, RUN, 2, {"runs/s/mine.txt": "keep"}))
    for label, study in {"absolute": "{o}/victim", "dot": ".", "dotdot": "../x", "slash": "a/b"}.items():
        argv = [a if a != "t" else study for a in TUNE]
        cases.append(Case(f"tune --study {label}", 1, argv, 2))
    cases.append(Case("export --study ../x", 1, [a if a != "t" else "../x" for a in EXPORT], 2))
    for command in ("run", "calibrate"):
        cases.append(Case(f"{command} --out previous output", 1, with_out(command, "prev"), 0,
                          {"prev/.dspark-sim": "", "prev/old.csv": "old"}, may_change=("prev",)))
        cases.append(Case(f"{command} --out empty dir", 1, with_out(command, "empty"), 0, {"empty": DIR},
                          may_change=("empty",)))
    return cases


def parsing() -> list[Case]:
    """Class 2: inputs that are expensive before they are wrong."""
    cases = [Case(f"{c} alias bomb", 2, argv, 2, {"s.yaml": BOMB}, timeout_s=30)
             for c, argv in (("run", RUN), ("compare", COMPARE), ("capacity", CAPACITY), ("validate", VALIDATE))]
    cases += [Case("tune --scenario alias bomb", 2, TUNE, 2, {"tiny.yaml": BOMB}, timeout_s=30),
              Case("tune --space alias bomb", 2, TUNE, 2, {"space.yaml": BOMB.replace("name: bomb\n", "")},
                   timeout_s=30),
              Case("calibrate --table alias bomb", 2, ["dspark-sim", "calibrate", "--table", "b.yaml"], 2,
                   {"b.yaml": BOMB.replace("name: bomb\n", "accept_len: {gsm8k: 6.0}\n")}, timeout_s=30),
              Case("run deep nesting", 2, RUN, 2, {"s.yaml": "x: " + "[" * 20000 + "]" * 20000}, timeout_s=30),
              Case("run recursive alias", 2, RUN, 2, {"s.yaml": "name: x\na: &a [*a]\n"}),
              Case("run huge integer", 2, RUN, 2, {"s.yaml": scenario().replace("seed: 0", "seed: " + "9" * 6000)}),
              Case("run 1 MB key", 2, RUN, 2, {"s.yaml": scenario() + "k" * 1_000_000 + ": 1\n"}),
              Case("run 5 MB scenario", 2, RUN, 2, {"s.yaml": scenario() + "#" * (5 << 20) + "\n"})]
    for c, argv in (("run", RUN), ("compare", COMPARE), ("capacity", CAPACITY), ("validate", VALIDATE)):
        cases.append(Case(f"{c} scenario /dev/zero", 2, [a if a != "s.yaml" else "/dev/zero" for a in argv], 2,
                          timeout_s=30))
    zero = {"trace": "/dev/zero", "domain": "code"}
    cases += [Case("run trace /dev/zero", 2, RUN, 2, {"s.yaml": scenario(workload=zero)}, timeout_s=30),
              Case("calibrate --log /dev/zero", 2, ["dspark-sim", "calibrate", "--log", "z.csv"], 2,
                   {"z.csv": Link("/dev/zero")}, timeout_s=30),
              Case("tune --space /dev/zero", 2, [a if a != "space.yaml" else "/dev/zero" for a in TUNE], 2,
                   timeout_s=30),
              Case("validate requests.csv /dev/zero", 2, VALIDATE, 2, {"real/requests.csv": Link("/dev/zero")},
                   timeout_s=30),
              Case("run trace one 10 MB line", 2, RUN, 2, {"s.yaml": scenario(workload={"trace": "t.csv"}),
                                                           "t.csv": "x" * (10 << 20)}, timeout_s=30)]
    return cases


def _real_edit(edit) -> Callable[[str], str]:
    def apply(text: str) -> str:
        header, *rows = list(csv.reader(io.StringIO(text)))
        edit(header, rows)
        out = io.StringIO()
        csv.writer(out, lineterminator="\n").writerows([header, *rows])
        return out.getvalue()
    return apply


@dataclass(frozen=True)
class Edited:
    fixture: str
    edit: Callable[[str], str]


def _set(column, value, row=0):
    return _real_edit(lambda header, rows: rows[row].__setitem__(header.index(column), value))


def validation() -> list[Case]:
    """Class 3: real runs that cannot have happened."""
    edits = {"header only": _real_edit(lambda h, rows: rows.clear()),
             "output_tokens 1.2e29": _set("output_tokens", "1.2e29"),
             "finish before arrival": _set("finish_s", "0.000001", row=3),
             "first token before arrival": _set("first_token_s", "0.0", row=3),
             "duplicate ids": _real_edit(lambda h, rows: rows[1].__setitem__(0, rows[0][0])),
             "ttft nan": _set("ttft_ms", "nan"),
             "ragged row": _real_edit(lambda h, rows: rows[0].pop())}
    cases = [Case(f"validate {label}", 3, VALIDATE, 2, {"real/requests.csv": Edited("real/requests.csv", edit)})
             for label, edit in edits.items()]
    cases.append(Case("validate steps header only", 3, VALIDATE, 2,
                      {"real/steps.csv": Edited("real/steps.csv", _real_edit(lambda h, rows: rows.clear()))}))
    cases.append(Case("validate a good real run", 0, VALIDATE, 0, may_change=("real-validate",),
                      check=_json_finite("real-validate/validate.json")))
    return cases


def _json_finite(rel: str):
    def check(w, o, err):
        rows = json.loads((w / rel).read_text(), parse_constant=lambda c: float("nan"))["rows"]
        bad = [r["metric"] for r in rows if r["real"] != r["real"]]
        return f"NaN in {bad}" if bad else None
    return check


def _accepted_within_output(rel: str):
    def check(w, o, err):
        rows = list(csv.DictReader((w / rel / "requests.csv").open()))
        over = sum(int(r["accepted_tokens"]) > int(r["output_tokens"]) - 1 for r in rows)
        steps = list(csv.DictReader((w / rel / "steps.csv").open()))
        # tokens the steps emitted less one a decode row: the accepted drafts, less one for each row an
        # overlapping engine decoded for a request that finished in flight (it emits nothing)
        emitted = sum(int(s["accepted_tokens"]) - int(s["decode_reqs"]) for s in steps)
        summary = RunSummary.from_json(json.loads((w / rel / "summary.json").read_text()))
        accepted = sum(int(r["accepted_tokens"]) for r in rows)
        if over or summary.accepted_drafts != accepted or emitted > accepted:
            return (f"{over} of {len(rows)} requests accept more drafts than they emit; summary "
                    f"{summary.accepted_drafts}, requests {accepted}, steps {emitted}")
        return None
    return check


def counts() -> list[Case]:
    """Class 4: accepted drafts within the tokens emitted, short outputs and long blocks."""
    short = {**SYNTH, "num_requests": 60, "rate_per_s": 20.0, "output_tokens": {"dist": "constant", "mean": 5}}
    cases = []
    for label, spec in {"dspark production": {"method": "dspark", "block_size": 7},
                        "dspark algorithm1": {"method": "dspark", "block_size": 7, "scheduler": "algorithm1"},
                        "static mtp k4": {"method": "static", "drafter": "mtp", "block_size": 4}}.items():
        files = {"s.yaml": scenario(workload={"synthetic": short, "domain": "code"}, speculation=spec)}
        cases.append(Case(f"run accepted <= emitted, {label}", 4, [*RUN, "--out", "o"], 0, files,
                          may_change=("o",), check=_accepted_within_output("o")))
    cases.append(Case("run shipped example accepted <= emitted", 4, ["dspark-sim", "run", "{repo}/examples/azure_code_h200.yaml",
                                                                      "--out", "o", "--quiet", "--no-plots"], 0,
                      may_change=("o",), check=_accepted_within_output("o")))
    return cases


def tracebacks() -> list[Case]:
    """Class 5: paths and bytes that used to end in a traceback."""
    cases = []
    for command in COMMANDS:
        for label, out, files in (("parent is a file", "afile/x", {"afile": "data"}), ("under /proc", "/proc/dspark/x", {}),
                                  ("link loop", "loop/x", {"loop": Link("loop")})):
            cases.append(Case(f"{command} --out {label}", 5, with_out(command, out), 2, files))
    loop = {"trace": "t.csv", "domain": "code"}
    cases += [Case("run scenario link loop", 5, ["dspark-sim", "run", "l.yaml"], 2, {"l.yaml": Link("l.yaml")}),
              Case("run trace link loop", 5, RUN, 2, {"s.yaml": scenario(workload=loop), "t.csv": Link("t.csv")}),
              Case("tune --space link loop", 5, TUNE, 2, {"space.yaml": Link("space.yaml")}),
              Case("calibrate --log link loop", 5, ["dspark-sim", "calibrate", "--log", "l.csv"], 2,
                   {"l.csv": Link("l.csv")}),
              Case("run scenario is a directory", 5, ["dspark-sim", "run", "d"], 2, {"d": DIR}),
              Case("run scenario not UTF-8", 5, RUN, 2, {"s.yaml": b"name: s\nmodel: \xff\xfe\n"}),
              Case("validate requests.csv not UTF-8", 5, VALIDATE, 2,
                   {"real/requests.csv": Edited("real/requests.csv", lambda t: t.encode() + b"\xff\n")}),
              Case("calibrate --log csv not UTF-8", 5, ["dspark-sim", "calibrate", "--log", "l.csv"], 2,
                   {"l.csv": LOG.encode() + b"0.5,0.5,\xff\n"}),
              Case("calibrate --log jsonl not UTF-8", 5, ["dspark-sim", "calibrate", "--log", "l.jsonl"], 2,
                   {"l.jsonl": b'{"confidences": [0.5], "accepted": 1}\n' * 150 + b"\xfe\n"}),
              Case("run Mooncake line nested 100k deep", 5, RUN, 2,
                   {"s.yaml": scenario(workload={"trace": "m.jsonl", "format": "mooncake", "domain": "code"}),
                    "m.jsonl": mooncake() + '{"x": ' + "[" * 100_000 + "]" * 100_000 + "}\n"}),
              Case("calibrate --log jsonl nested 100k deep", 5, ["dspark-sim", "calibrate", "--log", "l.jsonl"], 2,
                   {"l.jsonl": '{"confidences": [0.5], "accepted": 1}\n' * 150 + "[" * 100_000 + "]" * 100_000 + "\n"}),
              Case("tune read-only SQLite study", 5,
                   ["dspark-tune", "--study", "t", "--trials", "4", "--storage",
                    "sqlite:///file:{w}/t.db?mode=ro&uri=true", "--quiet"], 2),
              Case("tune SQLite under /proc", 5, [a if a != "sqlite:///{w}/s.db" else "sqlite:////proc/s.db"
                                                  for a in TUNE], 2),
              # a missing directory beside the working one (the snapshot sees it created), not /nonexistent
              Case("tune SQLite in a missing directory", 5, [a if a != "sqlite:///{w}/s.db" else
                                                             "sqlite:///{o}/nonexistent/dir/s.db" for a in TUNE], 2),
              Case("tune storage not a URL", 5, [a if a != "sqlite:///{w}/s.db" else "s.db" for a in TUNE], 2)]
    return cases


def _exports_as_scored(w, o, err):
    out = w / "out"
    vllm = yaml.safe_load((out / "vllm.yaml").read_text())
    if vllm["max-num-batched-tokens"] < vllm["max-num-seqs"]:
        return "vllm.yaml: max-num-batched-tokens < max-num-seqs"
    lag = yaml.safe_load((out / "dspark.yaml").read_text())["speculation"].get("lag_steps", 2)
    if f"RELAY_LAG_STEPS={lag}" not in (out / "sglang.yaml").read_text():
        return f"sglang.yaml does not launch the scored lag {lag}"
    return None


def exports() -> list[Case]:
    """Class 6: a widened space must not export what an engine would refuse, or run otherwise."""
    wide = {"deployment": {"max_running_requests": {"low": 4, "high": 512, "log": True},
                           "max_batched_tokens": {"low": 1, "high": 8192, "log": True}}}
    lag0 = {"deployment": {"max_running_requests": [4, 8]}, "dspark": {"lag_steps": {"low": 0, "high": 3}}}
    tune_out = [*TUNE, "--out", "out"]
    return [Case("tune --engine vllm widened max_batched_tokens", 6, [*tune_out, "--engine", "vllm"], 2,
                 {"space.yaml": yaml.safe_dump(wide)}),
            Case("tune --engine sglang lag_steps 0", 6, tune_out, 2, {"space.yaml": yaml.safe_dump(lag0)}),
            Case("tune widened space, sglang holds max_batched_tokens", 6, tune_out, 0,
                 {"space.yaml": yaml.safe_dump(wide)}, may_change=("out", *TUNE_DB), check=_exports_as_scored),
            Case("tune --engine vllm lag held at 2", 6, [*tune_out, "--engine", "vllm"], 0,
                 {"space.yaml": yaml.safe_dump(lag0)}, may_change=("out", *TUNE_DB), check=_exports_as_scored)]


def stopping() -> list[Case]:
    """Class 7 (and 8): stops that are prompt, say so, and leave nothing."""
    big = {**SYNTH, "num_requests": 200_000, "rate_per_s": 50.0}
    long_tune = [a if a != "2" else "500" for a in TUNE]
    capacity = ["dspark-sim", "capacity", "s.yaml", "--gpus", "h100,h200,b200", "--methods", "none,dspark", "--tp",
                "1", "--jobs", "2", "--max-requests", "20000", "--quiet", "--no-plots", "--out", "o"]
    return [Case("capacity --jobs 2 SIGTERM", 7, capacity, 143,
                 {"s.yaml": scenario(workload={"synthetic": {**big, "rate_per_s": 5.0}, "domain": "math"})},
                 stop=(signal.SIGTERM, 5.0), stop_within_s=5.0),
            Case("tune --workers 2 SIGTERM", 7, [*long_tune, "--workers", "2", "--out", "o"], 143,
                 may_change=TUNE_DB, stop=(signal.SIGTERM, 6.0), stop_within_s=10.0),
            Case("run SIGTERM", 7, [*RUN, "--out", "o"], 143, {"s.yaml": scenario(workload={"synthetic": big})},
                 stop=(signal.SIGTERM, 3.0), stop_within_s=5.0),
            Case("run SIGINT", 7, [*RUN, "--out", "o"], 130, {"s.yaml": scenario(workload={"synthetic": big})},
                 stop=(signal.SIGINT, 3.0), stop_within_s=5.0),
            Case("compare SIGTERM", 7, ["dspark-sim", "compare", "s.yaml", "--methods", "none,dspark", "--concurrency",
                                        "64", "--requests", "200000", "--quiet", "--out", "o"], 143,
                 stop=(signal.SIGTERM, 4.0), stop_within_s=5.0),
            Case("run stopped leaves no parent folders", 8, [*RUN, "--out", "new/a/b"], 143,
                 {"s.yaml": scenario(workload={"synthetic": big})}, stop=(signal.SIGTERM, 3.0), stop_within_s=5.0),
            Case("export from a missing database", 8, [a if a != "sqlite:///{w}/t.db" else "sqlite:///{w}/new.db"
                                                       for a in EXPORT], 2),
            Case("export of a missing study", 8, [a if a != "t" else "nope" for a in EXPORT], 2),
            Case("tune bad --study, default storage", 8, ["dspark-tune", "--study", "../x", "--quiet"], 2),
            Case("calibrate bad table into new folders", 8, ["dspark-sim", "calibrate", "--table", "b.csv", "--out",
                                                             "new/a/b"], 2, {"b.csv": "dataset,accept_len\nx,y\n"})]


def mooncake_numbers() -> list[Case]:
    """Class 9: JSON token counts are integers, as in YAML."""
    wl = {"trace": "m.jsonl", "format": "mooncake", "domain": "code"}
    bad = {"input_length true": {"input_length": "true"}, "output_length true": {"output_length": "true"},
           "input_length 1e3": {"input_length": "1e3"}, "output_length 12.0": {"output_length": "12.0"},
           "input_length string": {"input_length": '"12"'}, "timestamp true": {"timestamp": "true"}}
    return [Case(f"run Mooncake {label}", 9, RUN, 2, {"s.yaml": scenario(workload=wl), "m.jsonl": mooncake(**b)})
            for label, b in bad.items()]


def _report_says(text: str, absent: str):
    def check(w, o, err):
        report = (w / "out" / "report.md").read_text()
        if absent in report or text not in report:
            return f"report.md: {report.split('**Tuned')[1][:160]!r}"
        return None
    return check


def report() -> list[Case]:
    """Class 10: no baseline ran, so none missed."""
    argv = [*[a if a != "" else "none,static" for a in TUNE], "--out", "out"]
    return [Case("tune --baseline-trials 0 report", 10, argv, 0, may_change=("out", *TUNE_DB),
                 check=_report_says("no baseline trial completed", "No baseline meets the SLO"))]


def good() -> list[Case]:
    """Class 0: the ordinary commands succeed, so the sweep cannot pass by refusing everything."""
    return [Case("run ok", 0, [*RUN, "--out", "out"], 0, may_change=("out",)),
            Case("run ok default out", 0, RUN, 0, may_change=("runs",)),
            Case("compare ok", 0, [*COMPARE, "--out", "out"], 0, may_change=("out",)),
            Case("capacity ok", 0, [*CAPACITY, "--out", "out"], 0, may_change=("out",)),
            Case("calibrate ok", 0, [*CALIBRATE, "--out", "out"], 0, may_change=("out",)),
            Case("trace ok", 0, [*TRACE, "--out", "t.jsonl"], 0, may_change=("t.jsonl",)),
            Case("tune ok", 0, [*TUNE, "--out", "out"], 0, may_change=("out", *TUNE_DB)),
            Case("export ok", 0, [*EXPORT, "--out", "e"], 0, may_change=("e", "t.db-wal", "t.db-shm", "t.db"))]


def all_cases() -> list[Case]:
    from reliability_cases_faults import fault_cases
    from reliability_cases_inputs import input_cases
    cases = (placement() + parsing() + validation() + counts() + tracebacks() + exports() + stopping()
             + mooncake_numbers() + report() + good() + input_cases() + fault_cases())
    for case in cases:
        case.files = {**BASE_FILES, **case.files}
    return cases
