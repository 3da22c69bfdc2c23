"""The inputs ``benchmarks/reliability_sweep.py`` tries that held before its ten defect classes:
bad numbers, malformed YAML, unknown keys, garbage traces and unknown names (classes 11-15).

Each expected result is the one docs/scenario.md promises: a number outside its bound, a
malformed file, an unknown key or name is one ``error:`` line and exit code 2 ("Bounds",
"The scenario file"); traces stream with bounded lines and positive integer lengths
("workload"); ``dspark-tune --help``: "Bad input ends in one line on stderr and exit code 2".
"""
from __future__ import annotations

import json

import yaml

from reliability_cases import (CALIBRATE, CAPACITY, COMPARE, LOG, RUN, SYNTH, TINY, TUNE, VALIDATE, Case, Edited,
                               Link, Sparse, _real_edit, mooncake, scenario)

NAN, INF = float("nan"), float("inf")
# value label -> value written into the YAML (a float NaN/inf dumps as .nan/.inf)
BAD = {"-1": -1, "0": 0, "nan": NAN, "inf": INF, "string": "abc", "1e30": 1e30, "2**70": 2**70, "2.5": 2.5}
INT_ONLY = ("2.5", "2**70")
# scenario key path -> the bad values it is tried with (0 where 0 is outside the bound)
NUMBERS = {
    ("workload", "synthetic", "num_requests"): BAD,
    ("workload", "synthetic", "rate_per_s"): BAD.keys() - INT_ONLY,
    ("workload", "synthetic", "prompt_tokens", "mean"): BAD.keys() - {"2.5"},
    ("workload", "synthetic", "output_tokens", "mean"): ("-1", "0", "nan", "inf", "string", "1e30"),
    ("workload", "max_concurrency"): BAD,
    ("workload", "hash_block_tokens"): BAD,
    ("deployment", "replicas"): BAD,
    ("deployment", "tp"): BAD,
    ("deployment", "max_running_requests"): BAD,
    ("deployment", "max_batched_tokens"): BAD,
    ("deployment", "chunked_prefill_tokens"): ("-1", "0", "nan", "2.5", "2**70"),
    ("deployment", "gpu_memory_fraction"): ("-1", "0", "nan", "inf", "string", "1e30"),
    ("deployment", "kv_block_tokens"): ("-1", "0", "nan", "2.5", "2**70"),
    ("deployment", "ep"): ("-1", "0", "2.5", "2**70"),
    ("deployment", "routing_skew"): ("-1", "nan", "inf", "1e30"),
    ("speculation", "block_size"): BAD,
    ("speculation", "lag_steps"): ("-1", "nan", "string", "2.5", "2**70"),
    ("speculation", "min_verify_len"): ("-1", "0", "2.5"),
    ("speculation", "survival_eps"): ("-1", "nan", "1e30"),
    ("slo", "ttft_ms"): ("-1", "0", "nan", "inf", "string", "1e30"),
    ("slo", "tpot_ms"): ("-1", "0", "nan", "inf", "1e30"),
    ("seed",): ("-1", "nan", "string", "1e30", "2**70", "2.5"),
    ("cost_scale",): ("-1", "0", "nan", "inf", "string", "1e30"),
}
# one command per key path in turn, so every scenario-reading command meets every section
READERS = {"run": (RUN, "s.yaml"), "compare": (COMPARE, "s.yaml"), "capacity": (CAPACITY, "s.yaml"),
           "validate": (VALIDATE, "s.yaml"), "tune": (TUNE, "tiny.yaml")}


def _set(data: dict, path: tuple, value) -> dict:
    node = data
    for key in path[:-1]:
        node = node.setdefault(key, {})
    node[path[-1]] = value
    return data


def _scenario_with(path: tuple, value, base: dict | None = None) -> str:
    data = yaml.safe_load(scenario()) if base is None else json.loads(json.dumps(base))
    return yaml.safe_dump(_set(data, path, value), sort_keys=False)


def numbers() -> list[Case]:
    """Class 11: every bad number in each scenario section, and in the commands' flags."""
    cases = []
    readers = list(READERS.items())
    for i, (path, labels) in enumerate(NUMBERS.items()):
        for j, label in enumerate(sorted(labels)):
            command, (argv, file) = readers[(i + j) % len(readers)]
            base = TINY if file == "tiny.yaml" else None
            cases.append(Case(f"{command} {'.'.join(path)} {label}", 11, argv, 2,
                              {file: _scenario_with(path, BAD[label], base)}))
    flags = {"run --seed -1": [*RUN, "--seed", "-1"], "run --seed 2**70": [*RUN, "--seed", str(2**70)],
             "run --seed nan": [*RUN, "--seed", "nan"],
             "compare --concurrency 0": [*COMPARE[:5], "--concurrency", "0"],
             "compare --concurrency 1e30": [*COMPARE[:5], "--concurrency", "1e30"],
             "compare --requests -5": [*COMPARE[:7], "--requests", "-5"],
             "capacity --attainment 1.5": [*CAPACITY, "--attainment", "1.5"],
             "capacity --attainment nan": [*CAPACITY, "--attainment", "nan"],
             "capacity --max-requests 0": [*CAPACITY, "--max-requests", "0"],
             "capacity --max-sims -1": [*CAPACITY, "--max-sims", "-1"],
             "capacity --jobs 0": [*CAPACITY, "--jobs", "0"],
             "capacity --qps inf": [*CAPACITY, "--qps", "inf"],
             "capacity --precision -1": [*CAPACITY, "--precision", "-1"],
             "capacity --slo-tpot-ms nan": [*CAPACITY, "--slo-tpot-ms", "nan"],
             "capacity --max-queue-ms 1e30": [*CAPACITY, "--max-queue-ms", "1e30"],
             "capacity --price-per-gpu-hour -1": [*CAPACITY, "--price-per-gpu-hour", "h200=-1"],
             "tune --trials 0": [*TUNE, "--trials", "0"], "tune --trials 1e30": [*TUNE, "--trials", "1e30"],
             "tune --workers 0": [*TUNE, "--workers", "0"], "tune --seeds 0": [*TUNE, "--seeds", "0"],
             "tune --timeout -1": [*TUNE, "--timeout", "-1"], "tune --timeout nan": [*TUNE, "--timeout", "nan"],
             "tune --repeats 2**70": [*TUNE, "--repeats", str(2**70)],
             "tune --slo-tpot-ms -5": [*TUNE, "--slo-tpot-ms", "-5"],
             "tune --slices -5": [*TUNE, "--slices", "-5"], "tune --slices abc": [*TUNE, "--slices", "abc"],
             "calibrate --seed -1": [*CALIBRATE, "--seed", "-1"]}
    cases += [Case(label, 11, argv, 2) for label, argv in flags.items()]
    table = {"accept_len -1": "-1", "accept_len nan": "nan", "accept_len inf": "inf", "accept_len 1e30": "1e30",
             "accept_len text": "six"}
    cases += [Case(f"calibrate table {label}", 11, CALIBRATE, 2, {"t.csv": f"dataset,accept_len\ngsm8k,{v}\n"})
              for label, v in table.items()]
    logs = {"confidence 2": ("0.200", "2"), "confidence nan": ("0.200", "nan"), "confidence -1": ("0.200", "-1"),
            "accepted -1": (",0\n", ",-1\n"), "accepted 2.5": (",0\n", ",2.5\n")}
    cases += [Case(f"calibrate log {label}", 11, ["dspark-sim", "calibrate", "--log", "l.csv"], 2,
                   {"l.csv": LOG.replace(old, new, 1)}) for label, (old, new) in logs.items()]
    return cases


MALFORMED = {"tab indent": "name: s\nworkload:\n\tdomain: math\n", "unclosed bracket": "name: [s\nmodel: qwen3-8b\n",
             "unclosed quote": 'name: "s\n', "duplicate key": None, "list at top": "- name: s\n- model: qwen3-8b\n",
             "scalar at top": "just a string\n", "empty file": "", "only a comment": "# nothing\n",
             "null document": "~\n", "two documents": None, "binary junk": bytes(range(256)) * 8,
             "python tag": "name: !!python/object/apply:os.system ['touch {o}/pwned']\n",
             "bad indent": "name: s\n  model: qwen3-8b\n model: x\n"}


def _malformed(label: str, good: str):
    if label == "duplicate key":
        return good + good.splitlines()[0] + "\n"
    if label == "two documents":
        return good + "---\n" + good
    return MALFORMED[label]


def yaml_files() -> list[Case]:
    """Class 12: malformed YAML in every YAML a command reads; and well-formed oddities that run."""
    cases = []
    for command, (argv, file) in READERS.items():
        good = yaml.safe_dump(TINY, sort_keys=False) if file == "tiny.yaml" else scenario()
        cases += [Case(f"{command} scenario {label}", 12, argv, 2, {file: _malformed(label, good)})
                  for label in MALFORMED]
    space = yaml.safe_dump({"deployment": {"max_running_requests": [4, 8]}})
    cases += [Case(f"tune --space {label}", 12, TUNE, 2, {"space.yaml": _malformed(label, space)})
              for label in ("tab indent", "unclosed bracket", "duplicate key", "list at top", "scalar at top",
                            "binary junk", "python tag")]
    table = "accept_len:\n  gsm8k: 6.0\n"
    cases += [Case(f"calibrate --table yaml {label}", 12, ["dspark-sim", "calibrate", "--table", "t.yaml"], 2,
                   {"t.yaml": _malformed(label, table)}) for label in ("unclosed bracket", "duplicate key",
                                                                       "list at top", "empty file")]
    crlf, bom = scenario().replace("\n", "\r\n"), "\ufeff" + scenario()
    cases += [Case("run scenario CRLF line ends", 0, [*RUN, "--out", "out"], 0, {"s.yaml": crlf}, may_change=("out",)),
              Case("run scenario with a BOM", 0, [*RUN, "--out", "out"], 0, {"s.yaml": bom}, may_change=("out",))]
    return cases


def unknown_keys() -> list[Case]:
    """Class 13: an unknown key at every level of the scenario, the space and a table."""
    where = {"top": (), "workload": ("workload",), "synthetic": ("workload", "synthetic"),
             "prompt_tokens": ("workload", "synthetic", "prompt_tokens"), "deployment": ("deployment",),
             "speculation": ("speculation",), "acceptance": ("speculation", "acceptance"), "slo": ("slo",),
             "engine": ("engine",)}
    cases = []
    readers = list(READERS.items())
    for i, (label, path) in enumerate(where.items()):
        for typo in ("colour", "max_runing_requests"):
            command, (argv, file) = readers[(i + len(typo)) % len(readers)]
            base = TINY if file == "tiny.yaml" else None
            data = yaml.safe_load(_scenario_with((*path, typo), 1, base) if path else scenario())
            if not path:
                data[typo] = 1
            if label == "engine":
                data["engine"] = {"name": "sglang", typo: 1}
            cases.append(Case(f"{command} unknown key {typo} in {label}", 13, argv, 2,
                              {file: yaml.safe_dump(data, sort_keys=False)}))
    spaces = {"top": {"deploymnt": {"tp": [1]}}, "deployment": {"deployment": {"colour": [1, 2]}},
              "knob field": {"deployment": {"max_running_requests": {"low": 4, "hgh": 8}}}}
    cases += [Case(f"tune --space unknown key in {label}", 13, TUNE, 2, {"space.yaml": yaml.safe_dump(s)})
              for label, s in spaces.items()]
    cases += [Case("calibrate --table unknown column", 13, CALIBRATE, 2, {"t.csv": "dataset,accept_lenght\ngsm8k,6\n"}),
              Case("calibrate --table yaml unknown key", 13, ["dspark-sim", "calibrate", "--table", "t.yaml"], 2,
                   {"t.yaml": "accept_len: {gsm8k: 6.0}\ncolour: 1\n"})]
    return cases


AZURE = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
AZURE_ROWS = "".join(f"2023-11-16 18:15:{i:02d}.0000000,{300 + i},{20 + i}\n" for i in range(12))
TRACES = {"missing column": "TIMESTAMP,ContextTokens\n2023-11-16 18:15:00.0,300\n",
          "negative length": AZURE + AZURE_ROWS + "2023-11-16 18:16:00.0,-5,20\n",
          "zero output": AZURE + AZURE_ROWS + "2023-11-16 18:16:00.0,300,0\n",
          "non-numeric cell": AZURE + AZURE_ROWS + "2023-11-16 18:16:00.0,lots,20\n",
          "fractional length": AZURE + AZURE_ROWS + "2023-11-16 18:16:00.0,300.5,20\n",
          "length 2**70": AZURE + AZURE_ROWS + f"2023-11-16 18:16:00.0,{2**70},20\n",
          "length nan": AZURE + AZURE_ROWS + "2023-11-16 18:16:00.0,nan,20\n",
          "timestamps decrease": AZURE + AZURE_ROWS + "2023-11-16 18:00:00.0,300,20\n",
          "timestamp garbage": AZURE + AZURE_ROWS + "yesterday,300,20\n",
          "empty file": "", "header only": AZURE, "ragged row": AZURE + AZURE_ROWS + "2023-11-16 18:16:00.0,300\n",
          "binary junk": bytes(range(256)) * 64}
MOONCAKE = {"line not JSON": mooncake() + "{not json\n", "line a list": mooncake() + "[1, 2, 3]\n",
            "missing key": mooncake() + '{"timestamp": 9, "input_length": 5}\n',
            "negative length": mooncake(output_length="-3"), "timestamp nan": mooncake(timestamp="NaN"),
            "length 2**70": mooncake(input_length=str(2**70)), "truncated last line": mooncake() + '{"timestamp": 9, "in',
            "hash_ids not a list": mooncake() + '{"timestamp": 9, "input_length": 5, "output_length": 5, '
                                   '"hash_ids": "abc"}\n'}


def traces() -> list[Case]:
    """Class 14: garbage and oversized traces, real-run records and confidence logs."""
    azure, mc = {"trace": "t.csv", "format": "azure", "domain": "code"}, {"trace": "m.jsonl", "format": "mooncake",
                                                                         "domain": "code"}
    trace_readers = {"run": RUN, "compare": COMPARE, "capacity": CAPACITY}
    cases = []
    for i, (label, text) in enumerate(TRACES.items()):
        command = list(trace_readers)[i % 3]
        cases.append(Case(f"{command} azure trace {label}", 14, trace_readers[command], 2,
                          {"s.yaml": scenario(workload=azure), "t.csv": text}))
    for i, (label, text) in enumerate(MOONCAKE.items()):
        command = list(trace_readers)[i % 3]
        cases.append(Case(f"{command} Mooncake trace {label}", 14, trace_readers[command], 2,
                          {"s.yaml": scenario(workload=mc), "m.jsonl": text}))
    cases.append(Case("tune Mooncake trace line not JSON", 14, TUNE, 2,
                      {"tiny.yaml": yaml.safe_dump({**TINY, "workload": {**mc, "trace": "m.jsonl"}}),
                       "m.jsonl": MOONCAKE["line not JSON"]}))
    big = {"trace": "big.csv", "domain": "code"}
    cases += [Case("run 200 MB sparse trace", 14, RUN, 2, {"s.yaml": scenario(workload=big), "big.csv": Sparse(200 << 20)},
                   timeout_s=60),
              Case("run 200 MB sparse trace after a header", 14, RUN, 2,
                   {"s.yaml": scenario(workload=big), "big.csv": Sparse(200 << 20, AZURE + AZURE_ROWS)}, timeout_s=60),
              Case("validate 200 MB sparse requests.csv", 14, VALIDATE, 2, {"real/requests.csv": Sparse(200 << 20)},
                   timeout_s=60),
              Case("calibrate 300 MB sparse log", 14, ["dspark-sim", "calibrate", "--log", "l.csv"], 2,
                   {"l.csv": Sparse(300 << 20)}, timeout_s=60),
              Case("calibrate 20 MB sparse table", 14, ["dspark-sim", "calibrate", "--table", "t.csv"], 2,
                   {"t.csv": Sparse(20 << 20)}, timeout_s=60),
              Case("run trace missing", 14, RUN, 2, {"s.yaml": scenario(workload={"trace": "nope.csv"})}),
              Case("run trace a link to /dev/null", 14, RUN, 2,
                   {"s.yaml": scenario(workload=big), "big.csv": Link("/dev/null")})]
    # reject_reason may be missing (metrics/record.py: REQUEST_DEFAULTS); arrival_s may not
    real = {"missing arrival_s": _real_edit(lambda h, rows: [r.pop(h.index("arrival_s")) for r in [*rows, h]]),
            "negative output_tokens": _real_edit(lambda h, rows: rows[0].__setitem__(h.index("output_tokens"), "-4")),
            "non-numeric ttft": _real_edit(lambda h, rows: rows[0].__setitem__(h.index("ttft_ms"), "fast"))}
    cases += [Case(f"validate requests.csv {label}", 14, VALIDATE, 2,
                   {"real/requests.csv": Edited("real/requests.csv", edit)}) for label, edit in real.items()]
    cases += [Case("validate --real missing", 14, ["dspark-sim", "validate", "--scenario", "s.yaml", "--real", "nope"], 2),
              Case("validate --real without steps.csv", 14, VALIDATE, 2, {"real/steps.csv": Link("missing")})]
    logs = {"missing column": "c1,c2\n0.5,0.5\n", "empty": "", "header only": "c1,c2,accepted\n",
            "jsonl bad line": '{"confidences": [0.5], "accepted": 1}\n' * 150 + "{oops\n"}
    cases += [Case(f"calibrate --log {label}", 14, ["dspark-sim", "calibrate", "--log", "l" + (".jsonl" if "jsonl" in
                                                                                             label else ".csv")], 2,
                   {("l.jsonl" if "jsonl" in label else "l.csv"): text}) for label, text in logs.items()]
    return cases


def names() -> list[Case]:
    """Class 15: GPU, model, engine and other names the catalog does not hold."""
    bad = {"gpu h900": {"gpu": "h900"}, "model gpt-5": {"model": "gpt-5"}, "engine tensorrt": {"engine": "tensorrt"},
           "engine version abc": {"engine": {"name": "vllm", "version": "abc"}},
           "method magic": {"speculation": {"method": "magic"}},
           "drafter medusa": {"speculation": {"method": "static", "drafter": "medusa"}},
           "scheduler greedy": {"speculation": {"method": "dspark", "scheduler": "greedy"}},
           "router random": {"deployment": {"router": "random"}}, "batching x": {"deployment": {"batching": "x"}},
           "kv_cache_dtype int3": {"deployment": {"kv_cache_dtype": "int3"}},
           "domain poetry": {"workload": {"synthetic": SYNTH, "domain": "poetry"}},
           "arrival weibull": {"workload": {"synthetic": {**SYNTH, "arrival": "weibull"}}},
           "dist pareto": {"workload": {"synthetic": {**SYNTH, "prompt_tokens": {"dist": "pareto", "mean": 3}}}},
           "trace format sharegpt": {"workload": {"trace": "t.csv", "format": "sharegpt"}}}
    readers = list(READERS.items())
    cases = []
    for i, (label, over) in enumerate(bad.items()):
        command, (argv, file) = readers[i % len(readers)]
        data = yaml.safe_load(yaml.safe_dump(TINY)) if file == "tiny.yaml" else yaml.safe_load(scenario())
        data.update(over)
        cases.append(Case(f"{command} unknown {label}", 15, argv, 2, {file: yaml.safe_dump(data, sort_keys=False),
                                                                      "t.csv": AZURE + AZURE_ROWS}))
    flags = {"capacity --gpus h900": [*CAPACITY, "--gpus", "h900"], "capacity --methods magic": [*CAPACITY, "--methods",
                                                                                                  "magic"],
             "compare --methods mtp0": [*COMPARE[:3], "--methods", "mtp0"],
             "compare --methods eagle3-x": [*COMPARE[:3], "--methods", "eagle3-x"],
             "tune --gpu h900": [*TUNE, "--gpu", "h900"], "tune --model gpt-5": [*TUNE, "--model", "gpt-5"],
             "tune --engine tensorrt": [*TUNE, "--engine", "tensorrt"],
             "tune --baselines magic": [*TUNE, "--baselines", "magic"],
             "tune --objective speed": [*TUNE, "--objective", "speed"],
             "calibrate --drafter medusa": [*CALIBRATE, "--drafter", "medusa"],
             "calibrate --domain poetry": [*CALIBRATE, "--domain", "poetry"],
             "tune --storage mysql": [*TUNE[:-5], "--storage", "mysql://nobody@127.0.0.1:1/x", "--study", "t", "--quiet"],
             "export --format tgi": ["dspark-tune", "export", "--study", "t", "--format", "tgi", "--storage",
                                     "sqlite:///{w}/t.db"]}
    cases += [Case(label, 15, argv, 2) for label, argv in flags.items()]
    return cases


def input_cases() -> list[Case]:
    return numbers() + yaml_files() + unknown_keys() + traces() + names()
