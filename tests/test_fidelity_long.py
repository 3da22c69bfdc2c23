"""The fidelity suite's long-context cases: Mooncake-style sessions over long shared documents."""
from pathlib import Path

import yaml

from dspark_sim.validation import cases
from dspark_sim.workload import read_trace

CASES = Path(__file__).resolve().parents[1] / "profiles" / "h200" / "validation" / "cases"
AZURE = Path(__file__).resolve().parents[1] / "examples" / "traces" / "azure_llm_2023_code.csv"


def _trace(directory: Path, name: str):
    [chunk] = list(read_trace(directory / f"{name}.jsonl", fmt="mooncake"))
    return chunk


def test_the_committed_long_cases_are_what_the_definitions_make(tmp_path):
    cases.make_cases(tmp_path, AZURE, traces=list(cases.LONG_TRACES))
    for name in cases.LONG_TRACES:
        assert (tmp_path / f"{name}.jsonl").read_bytes() == (CASES / f"{name}.jsonl").read_bytes()
        for method in cases.CASE_METHODS:
            case = f"{name}__{method}.yaml"
            assert (tmp_path / case).read_text() == (CASES / case).read_text()


def test_long_prompts_of_8_to_32k_tokens_sharing_prefixes_at_two_loads():
    light, mid = (_trace(CASES, name) for name in ("mc-long-light", "mc-long-mid"))
    for chunk in (light, mid):
        assert chunk.prompt_tokens.min() >= 8192 and chunk.prompt_tokens.max() <= 32768
        assert (chunk.prompt_tokens + chunk.output_tokens).max() <= cases.LONG_MAX_MODEL_LEN - 16
        # turns resend their history: most prompt blocks repeat an earlier request's
        seen, repeated = set(), 0
        for ids in chunk.hash_ids:
            repeated += sum(h in seen for h in ids)
            seen.update(ids)
        assert repeated > 0.5 * sum(len(ids) for ids in chunk.hash_ids)
    assert (light.prompt_tokens >= 30000).any()  # the decoder serves prompts of 30,000 tokens and more
    rate = lambda c: len(c) / c.arrival_s.max()  # noqa: E731
    assert rate(mid) > 5 * rate(light)


def test_the_long_cases_get_the_model_context_and_the_others_keep_theirs():
    assert cases.max_model_len(["mc-long-light", "syn-mid"]) == 40960
    assert cases.max_model_len(["syn-mid", "sess-mid"]) == cases.MAX_MODEL_LEN
    for name in cases.LONG_TRACES:
        scenario = yaml.safe_load((CASES / f"{name}__dspark.yaml").read_text())
        assert scenario["workload"]["format"] == "mooncake" and scenario["model"] == "qwen3-8b"
