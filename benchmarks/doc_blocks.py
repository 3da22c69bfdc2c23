"""The generated tables in the docs, re-derived from the committed data they were made from.

    python benchmarks/doc_blocks.py check     # each block against what its data gives now
    python benchmarks/doc_blocks.py write     # rewrite every block from its data

Each block sits between ``<!-- tag:begin -->`` and ``<!-- tag:end -->`` and is made by one
script from committed files (a GPU run's JSON, the profiler's logs, the shipped
profiles, the fidelity comparison's ``errors.json``: ``docs/validation.md`` whole); ``check``
recomputes it and names every block that differs, so a table cannot silently pair data of
different runs or outlive the data it shows (``tests/test_doc_blocks.py``). Timing benchmarks
(``docs/tuning.md``'s studies, ``docs/bench/*.md``) are measurements of the moment: each
writes its figures with its command, machine, load and commit into ``docs/bench/*.json``,
and its block is re-derived from that file here, so the page cannot drift from its data.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
H200 = REPO / "profiles" / "h200"


def _targets() -> str:
    from bench_targets import block_text

    return block_text(json.loads((H200 / "decoder_targets.json").read_text()),
                      json.loads((H200 / "decoder_targets_replicate.json").read_text()))


def _bench_decoder() -> str:
    from bench_decoder import block_text

    return block_text(json.loads((H200 / "decoder_bench.json").read_text()))


def _graphs_vs_eager() -> str:
    from graphs_vs_eager import block_text

    return block_text("qwen3-8b")


def _vs_sglang() -> str:
    from bench_vs_sglang import block_text

    return block_text(json.loads((H200 / "kernels_vs_sglang.json").read_text()))


def _kernel_bench() -> str:
    from kernel_bench_doc import block_text

    return block_text(json.loads((H200 / "kernel_bench.json").read_text()))


def _forward_breakdown() -> str:
    from forward_breakdown import block_text

    return block_text(json.loads((H200 / "forward_breakdown.json").read_text()))


def _sustained() -> str:
    from sustained_clocks import block_text

    return block_text(H200 / "sustained_clocks.json")


def _long_check() -> str:
    from gpu_check_long import JSON, block_text

    path = REPO / JSON
    return block_text(json.loads(path.read_text()) if path.is_file() else None)


def _held_out() -> str:
    from dspark_sim.profiling.pipeline import held_out_table, measured_profiles

    return f"Made by `python benchmarks/fit_profiles.py`.\n\n{held_out_table(measured_profiles(REPO / 'profiles'))}"


def _engine_roofline() -> str:
    """The engines' MoE roofline: its terms and its errors on the runs it was fitted on and on the
    runs held out (whole scenarios and whole GPUs), from docs/external.json."""
    from dspark_sim.validation.published_page import engine_roofline_block

    return engine_roofline_block(json.loads((REPO / "docs" / "external.json").read_text()))


def _gpu_specs() -> str:
    from fit_profiles import gpu_spec_block

    return gpu_spec_block()


def _tune(tag: str, pending: str | None = None):
    """``tag``'s block from its committed figures; ``pending``: the block's text until they exist."""
    def make() -> str:
        from bench_tune import block_text, json_path

        path = json_path(tag)
        if pending is not None and not path.is_file():
            return pending
        return block_text(json.loads(path.read_text()))
    return make


PRUNING_COMMAND = ("python benchmarks/bench_tune.py --scenario benchmarks/scenarios/chat_hour_h200.yaml --gpu h200 "
                   "--slo scenario --baselines '' --slices 5,15 --trials 200 --repeats 3 --workers 2 "
                   "--storage runs/bench-tune-pruning --markdown docs/tuning.md bench-pruning")


def _acceptance(name: str):
    def make() -> str:
        import fit_acceptance

        return getattr(fit_acceptance, f"{name}_block")(json.loads(fit_acceptance.BUILTIN_PATH.read_text()))
    return make


def _capacity_example() -> str:
    from capacity_example import JSON, block_text

    return block_text(json.loads(JSON.read_text()))


# (doc, tag) -> the block's text from committed data
BLOCKS = {
    ("docs/tuning.md", "bench-default"): _tune("bench-default"),
    ("docs/tuning.md", "bench-chat"): _tune("bench-chat"),
    ("docs/tuning.md", "bench-pruning"): _tune("bench-pruning", f"Not measured yet: `{PRUNING_COMMAND}` writes "
                                              "this block (six studies of 200 trials on the whole chat hour; a "
                                              "study that stops resumes from `--storage`)."),
    ("docs/capacity.md", "example"): _capacity_example,
    ("docs/acceptance.md", "fig2"): _acceptance("fig2"),
    ("docs/acceptance.md", "limits"): _acceptance("limits"),
    ("docs/acceptance.md", "presets"): _acceptance("table"),
    ("docs/decoder.md", "targets"): _targets,
    ("docs/decoder.md", "bench_decoder"): _bench_decoder,
    ("docs/decoder.md", "graphs_vs_eager"): _graphs_vs_eager,
    ("docs/decoder.md", "forward_breakdown"): _forward_breakdown,
    ("docs/decoder.md", "long_check"): _long_check,
    ("docs/kernels.md", "vs_sglang"): _vs_sglang,
    ("docs/kernels.md", "kernel_bench"): _kernel_bench,
    ("docs/profiles.md", "held-out"): _held_out,
    ("docs/profiles.md", "gpu-specs"): _gpu_specs,
    ("docs/profiles.md", "sustained"): _sustained,
    ("docs/profiles.md", "engine-roofline"): _engine_roofline,
}


def _validation() -> str:
    """docs/validation.md from the committed errors.json, with the runs its first line names."""
    import re

    from fidelity import VALIDATION, lockstep_data
    from dspark_sim.validation.report import markdown

    head = (REPO / "docs" / "validation.md").read_text().split("\n", 3)[2]
    made = re.search(r"compare --real (.*?)` from", head).group(1)
    data = json.loads((VALIDATION / "errors.json").read_text())
    replicate = (data["replicate"]["run"], data["replicate"]["cases"]) if "replicate" in data else None
    return markdown(data["cases"], data["summary"], data["provenance"], made, replicate, VALIDATION / "real",
                    lockstep_data())


def _validation_ttft() -> str:
    """docs/validation_ttft.md from the committed ttft_parts.json."""
    from fidelity import TTFT_JSON
    from dspark_sim.validation.ttft import markdown

    return markdown(json.loads(TTFT_JSON.read_text()))


def _bench_page(name: str):
    def make() -> str:
        from bench_sim import markdown

        return markdown(json.loads((REPO / "docs" / "bench" / f"{name}.json").read_text()))
    return make


def _sim_breakdown(name: str):
    """docs/bench/NAME.md from the committed phase times."""
    def make() -> str:
        from sim_breakdown import markdown

        return markdown(json.loads((REPO / "docs" / "bench" / f"{name}.json").read_text()))
    return make


def _reliability() -> str:
    """docs/bench/reliability_sweep.md from the committed sweep."""
    from reliability_sweep import markdown

    return markdown(json.loads((REPO / "docs" / "bench" / "reliability_sweep.json").read_text()))


def _frontier() -> str:
    """docs/dspark_frontier.md from the committed sweep."""
    from dspark_frontier import JSON, markdown

    return markdown(json.loads(JSON.read_text()))


def _moe() -> str:
    """docs/moe.md from the committed figures."""
    from moe_costs import JSON, markdown

    return markdown(json.loads(JSON.read_text()))


def _sweeps() -> str:
    """docs/validation_sweeps.md from the committed sweep_errors.json."""
    from fidelity import SWEEP_JSON, VALIDATION
    from dspark_sim.validation.sweep_page import markdown

    data = json.loads(SWEEP_JSON.read_text())
    return markdown(data, data["made_by"], VALIDATION / "real")


def _decoder_capacity() -> str:
    """docs/bench/decoder_capacity.md from its committed data."""
    from dspark_sim.validation.capacity_check import page_text

    return page_text(json.loads((REPO / "docs" / "bench" / "decoder_capacity.json").read_text()))


# pages made once their GPU runs exist (benchmarks/h200_sweep_visit.sh): checked when their data is
LATER = {"docs/validation_sweeps.md": (H200 / "validation" / "sweep_errors.json", _sweeps),
         "docs/bench/decoder_capacity.md": (REPO / "docs" / "bench" / "decoder_capacity.json", _decoder_capacity)}

# whole generated files -> their text from committed data
FILES = {**{doc: make for doc, (data, make) in LATER.items() if data.is_file()},"docs/validation.md": _validation, "docs/validation_ttft.md": _validation_ttft,
         "docs/dspark_frontier.md": _frontier, "docs/moe.md": _moe, "docs/bench/reliability_sweep.md": _reliability,
         **{f"docs/bench/{name}.md": _sim_breakdown(name) for name in ("sim_breakdown", "sim_breakdown_million")},
         **{f"docs/bench/{name}.md": _bench_page(name) for name in ("sim", "sim_speedup", "sim_million", "sim_tune")}}


def stale() -> list[str]:
    """``doc:tag`` of every block (``doc`` of every whole file) whose text differs from what its
    data gives now."""
    from outputs import read_block

    out = [f"{doc}:{tag}" for (doc, tag), make in BLOCKS.items() if read_block(REPO / doc, tag) != make()]
    return out + [doc for doc, make in FILES.items() if (REPO / doc).read_text() != make()]


def write() -> None:
    """Rewrite every block and whole file from its data."""
    from outputs import write_block

    for (doc, tag), make in BLOCKS.items():
        write_block(REPO / doc, tag, make())
    for doc, make in FILES.items():
        (REPO / doc).write_text(make())


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("command", choices=("check", "write"))
    args = p.parse_args(argv)
    if args.command == "write":
        write()
        print(f"wrote {len(BLOCKS)} blocks")
        return 0
    bad = stale()
    for name in bad:
        print(f"stale: {name} (python benchmarks/doc_blocks.py write)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    sys.exit(main())
