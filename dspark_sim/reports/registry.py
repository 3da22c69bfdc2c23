"""Every generated block and page in the docs, with the function that makes it from committed data.

Each block sits between ``<!-- tag:begin -->`` and ``<!-- tag:end -->`` and is made from
committed files (a GPU run's JSON, the profiler's logs, the shipped profiles, the fidelity
comparison's ``errors.json``: ``docs/validation.md`` whole); :func:`stale` recomputes it and
names every block that differs, so a table cannot silently pair data of different runs or
outlive the data it shows (``python benchmarks/doc_blocks.py check``). Timing benchmarks
(``docs/tuning.md``'s studies, ``docs/bench/*.md``) are measurements of the moment: each
writes its figures with its command, machine, load and commit into ``docs/bench/*.json``,
and its block is re-derived from that file here, so the page cannot drift from its data.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

from dspark_sim.reports.blocks import read_block, write_block

ROOT = Path(__file__).resolve().parents[2]
H200 = ROOT / "profiles" / "h200"


def _json(path: Path):
    return json.loads(path.read_text())


def targets() -> str:
    from dspark_sim.reports.decoder_targets import block_text

    return block_text(_json(H200 / "decoder_targets.json"), _json(H200 / "decoder_targets_replicate.json"))


def bench_decoder() -> str:
    from dspark_sim.reports.decoder_bench import block_text

    return block_text(_json(H200 / "decoder_bench.json"))


def graphs_vs_eager() -> str:
    from dspark_sim.reports.graphs_vs_eager import block_text

    return block_text("qwen3-8b")


def vs_sglang() -> str:
    from dspark_sim.reports.kernels_vs_sglang import block_text

    return block_text(_json(H200 / "kernels_vs_sglang.json"))


def kernel_bench() -> str:
    from dspark_sim.reports.kernel_bench import block_text

    return block_text(_json(H200 / "kernel_bench.json"))


def forward_breakdown() -> str:
    from dspark_sim.reports.forward_breakdown import block_text

    return block_text(_json(H200 / "forward_breakdown.json"))


def sustained() -> str:
    from dspark_sim.reports.gpus import block_text

    return block_text(H200 / "sustained_clocks.json")


def mixed_steps() -> str:
    from dspark_sim.reports.mixed_steps import block_text

    return block_text(H200 / "raw" / "mixed_qwen3-8b.json", H200 / "qwen3-8b.json")


def spread_steps() -> str:
    from dspark_sim.reports.mixed_steps import spread_block_text

    return spread_block_text(H200 / "raw" / "raw_qwen3-8b.json", H200 / "qwen3-8b.json")


def spread_check() -> str:
    from dspark_sim.cost.profile import load_profile
    from dspark_sim.reports.spread_steps import block_text

    return block_text(_json(H200 / "validation" / "steps" / "spread_steps.json"), load_profile(H200 / "qwen3-8b.json"))


def draft_step() -> str:
    from dspark_sim.reports.draft_step import block_text

    return block_text(H200 / "raw" / "layout_qwen3-8b.json", H200 / "validation" / "steps" / "spread_steps.json",
                      H200 / "qwen3-8b.json")


def shared_steps() -> str:
    from dspark_sim.reports.served_steps import block_text

    return block_text(H200 / "raw" / "served_qwen3-8b.json", H200 / "qwen3-8b.json")


def hot_prefill() -> str:
    from dspark_sim.reports.hot_prefill import block_text

    return block_text(H200 / "prefill_clocks.json", H200 / "qwen3-8b.json", (H200 / "raw" / "after_mixed_qwen3-8b.json",))


def hot_decode() -> str:
    from dspark_sim.reports.hot_prefill import decode_block_text

    return decode_block_text([H200 / "raw" / "after_qwen3-8b.json", H200 / "raw" / "after_mixed_qwen3-8b.json"],
                             H200 / "qwen3-8b.json")


def hot_mixed() -> str:
    from dspark_sim.reports.hot_prefill import mixed_block_text

    return mixed_block_text(H200 / "raw" / "after_mixed_qwen3-8b.json")


def served_layout() -> str:
    from dspark_sim.reports.served_steps import table

    data = _json(H200 / "raw" / "layout_qwen3-8b.json")
    p = data["provenance"]
    head = (f"Measured {p['date']} on {p['gpu']} ({p['gpu_uuid']}; driver {p['driver']}, torch {p['torch']}, triton "
            f"{p['triton']}; tree {p['tree']}); {p['model']}, {p['weights']} weights, median of {p['steps']} steps. Made "
            "by `bash benchmarks/served_visit.sh layout` (`python benchmarks/served_steps.py --part layout`), "
            "`layout_qwen3-8b.json` under profiles/h200/raw/: whole decode steps (and eager steps of decode rows beside a "
            "prompt chunk) over long-tailed contexts, their KV pages taken in order against from a shuffled free list.")
    return "\n".join([head] + table(data)[2:])


def long_check() -> str:
    from dspark_sim.validation.long_prompts import JSON, block_text

    path = ROOT / JSON
    return block_text(_json(path) if path.is_file() else None)


def held_out() -> str:
    from dspark_sim.profiling.pipeline import held_out_table, measured_profiles

    return f"Made by `python benchmarks/fit_profiles.py`.\n\n{held_out_table(measured_profiles(ROOT / 'profiles'))}"


def engine_roofline() -> str:
    """The engines' MoE roofline: its terms and its errors on the runs it was fitted on and on the
    runs held out (whole scenarios and whole GPUs), from docs/external.json."""
    from dspark_sim.validation.published_page import engine_roofline_block

    return engine_roofline_block(_json(ROOT / "docs" / "external.json"))


def projection_check() -> str:
    from dspark_sim.profiling.projection_check import block_text

    return block_text(ROOT / "profiles")


def gpu_specs() -> str:
    from dspark_sim.reports.gpus import gpu_spec_block

    return gpu_spec_block()


def tune(tag: str, pending: str | None = None):
    """``tag``'s block from its committed figures; ``pending``: the block's text until they exist."""
    def make() -> str:
        from dspark_sim.reports.tuning import block_text, json_path

        path = json_path(tag)
        if pending is not None and not path.is_file():
            return pending
        return block_text(_json(path))
    return make


PRUNING_COMMAND = ("python benchmarks/bench_tune.py --scenario benchmarks/scenarios/chat_hour_h200.yaml --gpu h200 "
                   "--slo scenario --baselines '' --slices 5,15 --trials 200 --repeats 3 --workers 2 "
                   "--storage runs/bench-tune-pruning --markdown docs/tuning.md bench-pruning")

PRUNING_OVERLOAD_COMMAND = ("python benchmarks/bench_tune.py --scenario benchmarks/scenarios/chat_overload_h200.yaml "
                          "--gpu h200 --slo scenario --baselines '' --slices 1,2 --trials 200 --repeats 3 --workers 16 "
                          "--storage runs/bench-tune-overload --markdown docs/tuning.md bench-pruning-overload")

# the pruned study at the trial budget that spends the unpruned one's trial-seconds (about 270:
# 200 x 4,994 / 3,692 trial-seconds, docs/bench/tune_bench-pruning-overload.json); the unpruned
# studies are bench-pruning-overload's, resumed from its database
PRUNING_BUDGET_COMMAND = ("python benchmarks/bench_tune.py --scenario benchmarks/scenarios/chat_overload_h200.yaml "
                          "--gpu h200 --slo scenario --baselines '' --slices 1,2 --trials 200 --repeats 3 --workers 16 "
                          "--pruned-trials 270 --storage runs/bench-tune-overload-budget --markdown docs/tuning.md "
                          "bench-pruning-overload-budget")


def acceptance(name: str):
    def make() -> str:
        from dspark_sim.acceptance.preset import BUILTIN_PATH
        from dspark_sim.reports import acceptance as blocks

        return getattr(blocks, f"{name}_block")(_json(BUILTIN_PATH))
    return make


def capacity_example() -> str:
    from dspark_sim.reports.capacity import JSON, block_text

    return block_text(_json(JSON))


# (doc, tag) -> the block's text from committed data
BLOCKS = {
    ("docs/tuning.md", "bench-default"): tune("bench-default"),
    ("docs/tuning.md", "bench-chat"): tune("bench-chat"),
    ("docs/tuning.md", "bench-pruning"): tune("bench-pruning", f"Not measured yet: `{PRUNING_COMMAND}` writes "
                                             "this block (six studies of 200 trials on the whole chat hour; a "
                                             "study that stops resumes from `--storage`)."),
    ("docs/tuning.md", "bench-pruning-overload"): tune("bench-pruning-overload", f"Not measured yet: "
                                                    f"`{PRUNING_OVERLOAD_COMMAND}` writes this block."),
    ("docs/tuning.md", "bench-pruning-overload-device"): tune("bench-pruning-overload-device"),
    ("docs/tuning.md", "bench-pruning-overload-budget"): tune("bench-pruning-overload-budget", f"Not measured yet: "
                                                           f"`{PRUNING_BUDGET_COMMAND}` writes this block."),
    ("docs/tuning.md", "bench-pruning-closed-pilot"): tune("bench-pruning-closed-pilot", "Not measured yet."),
    ("docs/capacity.md", "example"): capacity_example,
    ("docs/acceptance.md", "fig2"): acceptance("fig2"),
    ("docs/acceptance.md", "limits"): acceptance("limits"),
    ("docs/acceptance.md", "presets"): acceptance("table"),
    ("docs/decoder.md", "targets"): targets,
    ("docs/decoder.md", "bench_decoder"): bench_decoder,
    ("docs/decoder.md", "graphs_vs_eager"): graphs_vs_eager,
    ("docs/decoder.md", "forward_breakdown"): forward_breakdown,
    ("docs/decoder.md", "long_check"): long_check,
    ("docs/kernels.md", "vs_sglang"): vs_sglang,
    ("docs/kernels.md", "kernel_bench"): kernel_bench,
    ("docs/profiles.md", "held-out"): held_out,
    ("docs/profiles.md", "gpu-specs"): gpu_specs,
    ("docs/profiles.md", "projection-check"): projection_check,
    ("docs/profiles.md", "sustained"): sustained,
    ("docs/profiles.md", "mixed-steps"): mixed_steps,
    ("docs/profiles.md", "spread-steps"): spread_steps,
    ("docs/profiles.md", "spread-check"): spread_check,
    ("docs/profiles.md", "shared-steps"): shared_steps,
    ("docs/profiles.md", "hot-decode"): hot_decode,
    ("docs/profiles.md", "served-layout"): served_layout,
    ("docs/profiles.md", "draft-step"): draft_step,
    ("docs/profiles.md", "hot-mixed"): hot_mixed,
    ("docs/profiles.md", "hot-prefill"): hot_prefill,
    ("docs/profiles.md", "engine-roofline"): engine_roofline,
}


def validation() -> str:
    """docs/validation.md from the committed errors.json, with the runs its first line names."""
    from dspark_sim.validation.committed import VALIDATION, lockstep_data
    from dspark_sim.validation.report import markdown

    head = (ROOT / "docs" / "validation.md").read_text().split("\n", 3)[2]
    made = re.search(r"compare --real (.*?)` from", head).group(1)
    data = _json(VALIDATION / "errors.json")
    replicate = (data["replicate"]["run"], data["replicate"]["cases"]) if "replicate" in data else None
    return markdown(data["cases"], data["summary"], data["provenance"], made, replicate, VALIDATION / "real",
                    lockstep_data())


def validation_ttft() -> str:
    """docs/validation_ttft.md from the committed ttft_parts.json."""
    from dspark_sim.validation.committed import TTFT_JSON
    from dspark_sim.validation.ttft import markdown

    return markdown(_json(TTFT_JSON))


def bench_page(name: str):
    def make() -> str:
        from dspark_sim.reports.sim_speed import markdown

        return markdown(_json(ROOT / "docs" / "bench" / f"{name}.json"))
    return make


def sim_breakdown(name: str):
    """docs/bench/NAME.md from the committed phase times."""
    def make() -> str:
        from dspark_sim.speed.breakdown import markdown

        return markdown(_json(ROOT / "docs" / "bench" / f"{name}.json"))
    return make


def reliability() -> str:
    """docs/bench/reliability_sweep.md from the committed sweep."""
    from dspark_sim.validation.reliability import markdown

    return markdown(_json(ROOT / "docs" / "bench" / "reliability_sweep.json"))


def frontier() -> str:
    """docs/dspark_frontier.md from the committed sweep."""
    from dspark_sim.reports import frontier as page

    return page.markdown(_json(page.JSON))


def moe() -> str:
    """docs/moe.md from the committed figures."""
    from dspark_sim.reports.moe import JSON, markdown

    return markdown(_json(JSON))


def sweeps() -> str:
    """docs/validation_sweeps.md from the committed sweep_errors.json."""
    from dspark_sim.validation.committed import SWEEP_JSON, VALIDATION
    from dspark_sim.validation.sweep_page import markdown

    data = _json(SWEEP_JSON)
    return markdown(data, data["made_by"], VALIDATION / "real")


def decoder_capacity() -> str:
    """docs/bench/decoder_capacity.md from its committed data."""
    from dspark_sim.validation.capacity_check import page_text

    return page_text(_json(ROOT / "docs" / "bench" / "decoder_capacity.json"))


# pages made once their GPU runs exist (benchmarks/h200_sweep_visit.sh): checked when their data is
LATER = {"docs/validation_sweeps.md": (H200 / "validation" / "sweep_errors.json", sweeps),
         "docs/bench/decoder_capacity.md": (ROOT / "docs" / "bench" / "decoder_capacity.json", decoder_capacity)}

# whole generated files -> their text from committed data
FILES = {**{doc: make for doc, (data, make) in LATER.items() if data.is_file()},
         "docs/validation.md": validation, "docs/validation_ttft.md": validation_ttft,
         "docs/dspark_frontier.md": frontier, "docs/moe.md": moe, "docs/bench/reliability_sweep.md": reliability,
         **{f"docs/bench/{name}.md": sim_breakdown(name) for name in ("sim_breakdown", "sim_breakdown_million")},
         **{f"docs/bench/{name}.md": bench_page(name) for name in ("sim", "sim_speedup", "sim_million", "sim_tune")}}


def stale() -> list[str]:
    """``doc:tag`` of every block (``doc`` of every whole file) whose text differs from what its
    data gives now."""
    out = [f"{doc}:{tag}" for (doc, tag), make in BLOCKS.items() if read_block(ROOT / doc, tag) != make()]
    return out + [doc for doc, make in FILES.items() if (ROOT / doc).read_text() != make()]


def write() -> None:
    """Rewrite every block and whole file from its data."""
    for (doc, tag), make in BLOCKS.items():
        write_block(ROOT / doc, tag, make())
    for doc, make in FILES.items():
        (ROOT / doc).write_text(make())
