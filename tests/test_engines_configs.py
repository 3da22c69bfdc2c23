"""The exports fed to the serving engines' own released code.

SGLang 0.5.23 and vLLM 0.33.0 are installed by ``tests/engines.sh`` into ``.engines/`` (set
``DSPARK_ENGINES`` to use another place); ``dspark_sim.engines.check`` runs their
parsers, loaders, SGLang's DSpark start-up rules and its planner's budget function on the
files (its docstring says exactly what is exercised): the tuner's Qwen3-8B exports of DSpark
and every baseline, and DeepSeek-V4-Flash on 8 B300s (examples/v4_flash_b300.yaml: expert
parallel, DP attention, FP8 KV, the DSpark drafter bundled in its checkpoint). Without the
engines these tests skip, except in CI (``CI`` set), where a missing engine fails.
TensorRT-LLM cannot be installed here (its PyPI release downloads the wheel from NVIDIA's
own index): its file is checked against the rules of ``tensorrt_llm/llmapi/llm_args.py``
transcribed in the test below.
"""
from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import numpy as np
import pytest
import yaml
from conftest import EXAMPLES
from test_tuner_fixtures import run_tiny, sqlite_url

from dspark_sim.catalog.drafters import PLACEHOLDER
from dspark_sim.cost.sps import load_sps_table
from dspark_sim.speculation.dspark import VerifyLimits, candidates, production_budget, theta
from dspark_sim.engines import check, configs
from dspark_sim.tuner.cli import main as tune_main
from dspark_sim.tuner.scenarios import load_base
from dspark_sim.tuner.tune import write_exports

ROOT = Path(os.environ.get("DSPARK_ENGINES", Path(__file__).resolve().parents[1] / ".engines"))
BASELINES = ("none", "static", "dflash", "schedule", "threshold")


# What the engines' released code imports: torch (the [gpu] extra) and the [engines] extra.
ENGINE_IMPORTS = ("torch", "msgspec", "orjson", "pybase64", "starlette", "pydantic", "transformers", "cbor2",
                  "aiohttp", "openai", "openai_harmony")


def _need_engines() -> None:
    missing = [e for e in ("sglang", "vllm") if not (ROOT / e).is_dir()]
    absent = [name for name in ENGINE_IMPORTS if importlib.util.find_spec(name) is None]
    why = (f"engines {missing} not installed under {ROOT} (run tests/engines.sh)" if missing else
           f"the engines' released code imports {', '.join(absent)}, not installed here (the [gpu] and "
           f"[engines] extras)" if absent else None)
    if why and os.environ.get("CI"):
        pytest.fail(why)
    if why:
        pytest.skip(why)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """`dspark-tune --gpu h200 --drafter LOCAL` (a checkpoint trained for block 5) with every
    baseline; each baseline's winner exported in every format. Returns {study: directory}."""
    tmp = tmp_path_factory.mktemp("engines")
    drafter = tmp / "drafter"
    drafter.mkdir()
    (drafter / "config.json").write_text(json.dumps({"architectures": ["DSparkDraftModel"], "block_size": 5}))
    run_tiny(tmp, "eng", "--gpu", "h200", "--drafter", str(drafter), baselines=",".join(BASELINES))
    dirs = {"dspark": tmp / "out"}
    for method in BASELINES:
        dirs[method] = tmp / method
        for fmt in ("sglang", "vllm", "trtllm", "dspark"):
            assert tune_main(["export", "--study", f"eng.{method}", "--format", fmt, "--storage", sqlite_url(tmp),
                              "--out", str(dirs[method])]) == 0
    return dirs, drafter


def _flags(d: Path, name: str) -> dict:
    return yaml.safe_load((d / name).read_text())


def test_sglang_parses_every_export_and_plans_the_tuned_budget(exported):
    _need_engines()
    dirs, drafter = exported
    names = [m for m in dirs if (dirs[m] / "sglang.yaml").exists()]
    answers = dict(zip(names, check.run("sglang", [dirs[m] for m in names], ROOT)))
    assert set(names) == {"dspark", "none", "static", "dflash"}  # schedule, threshold: no SGLang field
    ours = answers["dspark"]
    flags = _flags(dirs["dspark"], "sglang.yaml")
    assert ours["speculative_algorithm"] == "DSPARK"
    assert ours["speculative_draft_model_path"] == str(drafter.resolve())
    assert 3 <= ours["speculative_dspark_block_size"] <= 5  # never above the drafter's trained block
    cap = flags["max-running-requests"]
    assert ours["max_running_requests"] == cap and ours["cuda_graph_max_bs_decode"] >= cap
    assert len(ours["sts_temperatures"]) == ours["speculative_dspark_block_size"]  # the planner's STS rule
    _same_budgets(ours, load_sps_table(flags["speculative-dspark-sps-table-path"]))
    assert answers["static"]["speculative_algorithm"] == "EAGLE3"  # Qwen3 has no MTP layers
    assert answers["static"]["speculative_draft_model_path"] == "AngelSlim/Qwen3-8B_eagle3"
    assert answers["dflash"]["speculative_algorithm"] == "DFLASH"
    assert answers["dflash"]["speculative_draft_model_path"] == "z-lab/Qwen3-8B-DFlash-b16"
    assert answers["none"]["speculative_algorithm"] is None


def _same_budgets(answer: dict, table) -> None:
    """SGLang's verify budget at every batch size up to the cap equals the simulator's, on the same table."""
    block_size = answer["speculative_dspark_block_size"]
    limits = VerifyLimits(0, block_size, 1e-6)
    assert [b["num_reqs"] for b in answer["budgets"]] == list(range(1, answer["max_running_requests"] + 1))
    for b in answer["budgets"]:
        cands = candidates(np.array(b["survival"]), limits)
        mine = production_budget(cands, b["num_reqs"], table.steps_per_sec_array, limits)
        th = theta(cands, b["num_reqs"], table.steps_per_sec_array, limits)
        assert b["budget"] == mine or th[b["budget"]] == pytest.approx(th[mine], rel=1e-12), b["num_reqs"]
        assert b["step_s"] == pytest.approx(1.0 / table.steps_per_sec(b["num_reqs"] + mine, b["num_reqs"]),
                                            rel=1e-9)


def test_sps_table_reaches_the_request_cap_and_the_largest_verify_batch(exported):
    dirs, _ = exported
    flags = _flags(dirs["dspark"], "sglang.yaml")
    table = json.loads((dirs["dspark"] / "sps_table.json").read_text())
    cap, block_size = flags["max-running-requests"], flags["speculative-dspark-block-size"]
    assert table["bs_probes"][-1] >= cap
    assert table["m_probes"][-1] >= cap * (block_size + 1)


def test_vllm_reads_every_export(exported):
    _need_engines()
    dirs, drafter = exported
    names = [m for m in dirs if (dirs[m] / "vllm.yaml").exists()]
    answers = dict(zip(names, check.run("vllm", [dirs[m] for m in names], ROOT)))
    assert set(names) == {"dspark", "none", "static", "dflash", "schedule"}
    spec = answers["dspark"]["speculative_config"]
    assert spec["method"] == "dspark" and spec["model"] == str(drafter.resolve())
    assert answers["static"]["speculative_config"]["method"] == "eagle3"
    assert answers["dflash"]["speculative_config"]["model"] == "z-lab/Qwen3-8B-DFlash-b16"
    ranges = answers["schedule"]["speculative_config"]["num_speculative_tokens_per_batch_size"]
    cap = int(answers["schedule"]["flags"]["max_num_seqs"])
    assert ranges[0][0] == 1 and ranges[-1][1] == cap  # every batch size up to the cap has a rule
    assert "speculative_config" not in answers["none"]


def test_vllm_check_rejects_what_vllm_rejects(tmp_path):
    """The check is not a rubber stamp: vLLM's own field types refuse a zero draft count and
    its EngineArgs have no `long-prefill-chunk` flag."""
    _need_engines()
    for bad in ({"model": "Qwen/Qwen3-8B", "speculative-config": {"method": "dspark", "num_speculative_tokens": 0}},
                {"model": "Qwen/Qwen3-8B", "long-prefill-chunk": 512}):
        (tmp_path / "vllm.yaml").write_text(yaml.safe_dump(bad))
        with pytest.raises(RuntimeError):
            check.run("vllm", [tmp_path], ROOT)


def test_sglang_check_rejects_what_sglang_rejects(tmp_path):
    _need_engines()
    (tmp_path / "sglang.yaml").write_text(yaml.safe_dump({"model-path": "Qwen/Qwen3-8B", "cuda-graph-max-bs": 8}))
    with pytest.raises(RuntimeError, match="cuda-graph-max-bs"):  # ambiguous in 0.5.23: -decode or -prefill
        check.run("sglang", [tmp_path], ROOT)


def test_threshold_baseline_is_marked_not_expressible(exported):
    dirs, _ = exported
    assert not any((dirs["threshold"] / f).exists() for f in ("sglang.yaml", "vllm.yaml", "trtllm.yaml"))
    assert (dirs["threshold"] / "dspark.yaml").exists()


# TensorRT-LLM tensorrt_llm/llmapi/llm_args.py @ 0004396 (main; no release could be installed):
# DecodingBaseConfig / *DecodingConfig fields and validators, transcribed. StrictBaseModel
# (extra="forbid") rejects any other key.
TRT_SPEC_FIELDS = {"decoding_type", "max_draft_len", "speculative_model", "draft_len_schedule", "block_size",
                   "num_nextn_predict_layers"}
TRT_TYPES = {"DSpark", "Eagle3", "DFlash", "MTP"}
TRT_NEEDS_MODEL = {"DSpark", "Eagle3", "DFlash"}  # validate_speculative_model / the draft loaders


def _follows_llm_args(args: dict) -> None:
    """One TensorRT-LLM options file against the transcribed rules."""
    assert args["cuda_graph_config"]["max_batch_size"] >= args["max_batch_size"]
    spec = args.get("speculative_config")
    if spec is None:
        return
    assert set(spec) <= TRT_SPEC_FIELDS and spec["decoding_type"] in TRT_TYPES
    if spec["decoding_type"] in TRT_NEEDS_MODEL:
        assert spec["speculative_model"]
    if spec["decoding_type"] == "MTP":  # MTPDecodingConfig: max_draft_len = num_nextn_predict_layers
        assert spec["num_nextn_predict_layers"] == spec["max_draft_len"]
    schedule = spec.get("draft_len_schedule")
    if schedule:  # smallest key maps to max_draft_len; none above it; the cap has a rule
        assert schedule[min(schedule)] == spec["max_draft_len"]
        assert max(schedule.values()) <= spec["max_draft_len"]
        assert max(schedule) == args["max_batch_size"]


def test_trtllm_exports_follow_llm_args_rules(exported):
    dirs, drafter = exported
    for method, d in dirs.items():
        path = d / "trtllm.yaml"
        if method == "threshold":
            assert not path.exists()
            continue
        args = _flags(d, "trtllm.yaml")
        _follows_llm_args(args)
        assert (args.get("speculative_config") is None) == (method == "none")
    assert _flags(dirs["dspark"], "trtllm.yaml")["speculative_config"]["speculative_model"] == str(drafter.resolve())


def test_no_published_drafter_writes_a_marked_placeholder(tmp_path, capsys):
    """Qwen3-4B has no published DSpark drafter: exports still complete, name the placeholder,
    warn once, and report.md says the engines refuse them until it is filled."""
    out = run_tiny(tmp_path, "ph", "--model", "qwen3-4b")
    err = capsys.readouterr().err
    assert err.count("no published dspark drafter for qwen3-4b") == 1
    assert _flags(out, "sglang.yaml")["speculative-draft-model-path"] == PLACEHOLDER
    assert _flags(out, "vllm.yaml")["speculative-config"]["model"] == PLACEHOLDER
    assert "every engine refuses them until it is replaced" in (out / "report.md").read_text()


# -- DeepSeek-V4-Flash on 8 B300s: expert parallel, DP attention, FP8 KV, its DSpark drafter bundled
V4_CHECKPOINT = "deepseek-ai/DeepSeek-V4-Flash-DSpark"


@pytest.fixture(scope="module")
def v4_exported(tmp_path_factory):
    """examples/v4_flash_b300.yaml's own configuration exported as ``dspark-tune export`` writes a
    trial: the tables and every engine's file."""
    out = tmp_path_factory.mktemp("v4")
    base = load_base(EXAMPLES / "v4_flash_b300.yaml")
    record = {"trial": 0, "method": "dspark", "config": {"deployment": {}, "speculation": base["speculation"]},
              "mean": {}, "seeds": [0], "feasible": True}
    files, notes = write_exports(base, record, "v4", out, configs.FORMATS, out)
    assert not notes and {"sglang.yaml", "vllm.yaml", "trtllm.yaml", "sps_table.json"} <= set(files)
    return out


def test_v4_flash_export_passes_sglang_parser_startup_rules_and_planner(v4_exported):
    _need_engines()
    [answer] = check.run("sglang", [v4_exported], ROOT)
    flags = _flags(v4_exported, "sglang.yaml")
    assert answer["speculative_algorithm"] == "DSPARK" and answer["speculative_dspark_block_size"] == 5
    assert answer["max_running_requests"] == 512
    startup = answer["startup"]  # what SGLang's DSpark start-up rules resolved
    assert (startup["tp_size"], startup["ep_size"], startup["attn_dp_size"]) == (8, 8, 8)
    assert startup["enable_dp_lm_head"] is True and startup["kv_cache_dtype"] == "fp8_e4m3"
    assert startup["speculative_num_draft_tokens"] == 6  # the block of 5 and the anchor
    assert startup["speculative_draft_model_path"] == flags["model-path"] == V4_CHECKPOINT
    _same_budgets(answer, load_sps_table(flags["speculative-dspark-sps-table-path"]))


def _edited(src: Path, name: str, old: str, new: str, dst: Path) -> Path:
    """``dst`` holding ``src/name`` with ``old`` replaced by ``new`` (which must be there)."""
    text = (src / name).read_text()
    assert old in text
    (dst / name).write_text(text.replace(old, new))
    return dst


@pytest.mark.parametrize("engine, old, new, refusal", [
    ("sglang", "enable-dp-lm-head: true\n", "", "enable-dp-lm-head"),  # DP attention needs the DP LM head
    ("vllm", "data-parallel-size: 8", "data-parallel-size: 0", "data_parallel_size|greater than or equal"),
])
def test_the_engines_own_checks_refuse_a_broken_v4_layout(v4_exported, tmp_path, engine, old, new, refusal):
    """The start-up checks are the engines' own: drop or break one value the V4 layout needs and they refuse."""
    _need_engines()
    edited = _edited(v4_exported, f"{engine}.yaml", old, new, tmp_path)
    with pytest.raises(RuntimeError, match=refusal):
        check.run(engine, [edited], ROOT)


def test_v4_flash_export_passes_vllm_fields_and_values(v4_exported):
    _need_engines()
    [answer] = check.run("vllm", [v4_exported], ROOT)
    flags = answer["flags"]
    assert (flags["tensor_parallel_size"], flags["data_parallel_size"], flags["enable_expert_parallel"]) == \
        ("1", "8", True)
    assert flags["kv_cache_dtype"] == "fp8" and flags["max_num_seqs"] == "64"  # 512 over 8 DP ranks
    assert {"data_parallel_size", "enable_expert_parallel", "kv_cache_dtype", "max_num_seqs"} <= \
        set(answer["values_checked"])
    spec = answer["speculative_config"]
    assert (spec["method"], spec["model"], spec["num_speculative_tokens"]) == ("dspark", V4_CHECKPOINT, 5)


def test_v4_flash_trtllm_export_follows_llm_args_rules(v4_exported):
    args = _flags(v4_exported, "trtllm.yaml")
    _follows_llm_args(args)
    assert (args["moe_expert_parallel_size"], args["enable_attention_dp"]) == (8, True)
    assert args["speculative_config"]["speculative_model"] == V4_CHECKPOINT


# -- the MoE targets' drafters: Qwen3-30B-A3B (EAGLE-3 published, no DSpark drafter), DeepSeek-V4 MTP
def _export_trial(base: dict, speculation: dict, out: Path) -> Path:
    """One trial of ``base`` with ``speculation`` exported in every format into ``out``."""
    record = {"trial": 0, "method": speculation["method"], "config": {"deployment": {}, "speculation": speculation},
              "mean": {}, "seeds": [0], "feasible": True}
    write_exports(base, record, "moe", out, configs.FORMATS, out)
    return out


def test_qwen3_moe_exports_name_its_eagle3_drafter_and_mark_the_missing_dspark_one(tmp_path):
    _need_engines()
    base = load_base(EXAMPLES / "tune_default.yaml", gpu="h200", model="qwen3-30b-a3b")
    with pytest.warns(UserWarning, match="no published dspark drafter for qwen3-30b-a3b"):
        dspark = _export_trial(base, {"method": "dspark", "block_size": 5}, tmp_path / "dspark")
    static = _export_trial(base, {"method": "static", "drafter": "eagle3", "block_size": 3}, tmp_path / "static")
    ours, eagle = check.run("sglang", [dspark, static], ROOT)
    assert ours["speculative_draft_model_path"] == PLACEHOLDER  # the engine refuses it at load
    assert (eagle["speculative_algorithm"], eagle["speculative_draft_model_path"]) == \
        ("EAGLE3", "Tengyunw/qwen3_30b_moe_eagle3")
    _, spec = check.run("vllm", [dspark, static], ROOT)
    assert (spec["speculative_config"]["method"], spec["speculative_config"]["model"]) == \
        ("eagle3", "Tengyunw/qwen3_30b_moe_eagle3")
    _follows_llm_args(_flags(static, "trtllm.yaml"))


def test_v4_flash_mtp_baseline_drafts_with_the_targets_own_layer(tmp_path):
    """SGLang (NEXTN on DeepseekV4ForCausalLM) and vLLM (method mtp) load the MTP layer from the
    target checkpoint: no drafter path in any engine's file."""
    _need_engines()
    base = load_base(EXAMPLES / "v4_flash_b300.yaml")
    out = _export_trial(base, {"method": "static", "drafter": "mtp", "block_size": 1}, tmp_path)
    [sgl] = check.run("sglang", [out], ROOT)
    assert (sgl["speculative_algorithm"], sgl["speculative_draft_model_path"]) == ("NEXTN", None)
    assert _flags(out, "sglang.yaml")["model-path"] == "deepseek-ai/DeepSeek-V4-Flash"
    [vll] = check.run("vllm", [out], ROOT)
    assert vll["speculative_config"] == {"method": "mtp", "num_speculative_tokens": 1}
    trt = _flags(out, "trtllm.yaml")["speculative_config"]
    _follows_llm_args(_flags(out, "trtllm.yaml"))
    assert trt["decoding_type"] == "MTP" and "speculative_model" not in trt and trt["num_nextn_predict_layers"] == 1
