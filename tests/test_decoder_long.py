"""Long prompts through the decoder with the Triton kernels (CPU: TRITON_INTERPRET=1, tiny model).

A prompt longer than ``max_batched_tokens`` is chunked; a step whose only work is chunks
that do not end their prompts has no logit row to judge. On a GPU such a step used to run
``accept`` over zero rows, whose kernels read row -1 (an illegal memory access after the
prefill of a 9,000-token prompt served alone); here the same shape must serve and give the
target's own tokens.
"""
import os

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from dspark_sim.kernels.decoder.engine import serve  # noqa: E402
from dspark_sim.kernels.decoder.sequence import Sequence  # noqa: E402
from dspark_sim.kernels.decoder.tiny import greedy_reference, tiny_decoder  # noqa: E402

PROMPT = [(j * 7) % 31 for j in range(20)]  # 20 tokens, chunks of 8: two steps judge no row


def _serve(kernels: str, temperature: float, method: str = "none", overlap: bool = True, **over) -> list[int]:
    """The outputs of PROMPT served alone in chunks of 8 tokens (seeded: sampling repeats)."""
    torch.manual_seed(0)
    dec = tiny_decoder(method, kernels=kernels, max_running_requests=1, max_batched_tokens=8, **over)
    judged, accept = [], dec._accept

    def counted(logits, *args, **kw):  # the step calls accept only with rows to judge
        judged.append(logits.shape[0])
        return accept(logits, *args, **kw)
    dec._accept = counted
    seq = Sequence(0, list(PROMPT), 4, temperature=temperature)
    serve(dec, [seq], overlap=overlap)
    assert judged and min(judged) > 0
    return seq.outputs


@pytest.mark.parametrize("batching", ["prefill_first", "mixed"])
@pytest.mark.parametrize("method", ["none", "dspark"])
def test_a_prompt_chunked_alone_serves_greedy_as_the_target(batching, method):
    out = _serve("triton", 0.0, method, batching=batching)
    assert out == greedy_reference(tiny_decoder("none"), PROMPT, 4)


@pytest.mark.parametrize("overlap", [False, True])
def test_a_prompt_chunked_alone_samples_as_the_reference_kernels(overlap):
    """Sampling: the Triton kernels draw what their loop references draw from the same uniforms."""
    out = _serve("triton", 1.0, overlap=overlap)
    assert len(out) == 4 and out == _serve("torch", 1.0, overlap=overlap)


def test_a_preempted_request_re_prefills_alone_and_keeps_its_outputs():
    """With ``prefill_first`` a preempted request's re-prefill runs in steps of its own, and
    its last chunk restores the anchor without sampling: no logit row either."""
    dec = tiny_decoder("none", kernels="triton", kv_tokens=64, max_running_requests=3,
                       batching="prefill_first", max_batched_tokens=8)
    seqs = [Sequence(i, [(i * 7 + j) % 31 for j in range(10 + i)], 12) for i in range(3)]
    serve(dec, seqs)
    assert sum(s.num_preemptions for s in seqs) > 0
    for s in seqs:
        assert s.outputs == greedy_reference(tiny_decoder("none"), s.tokens[:s.prompt_len], 12)


def test_the_gpu_checks_long_prompt_section_runs_on_the_cpu():
    """``benchmarks/gpu_check.py --only long --tiny``'s runs at a prompt chunked alone and at the
    whole context (lengths scaled to a 256-token context): every output is target-only greedy."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from gpu_check_long import RUNS, block_text, long_prompt_cases

    rows = long_prompt_cases(tiny=True, lengths=(36, 0))
    assert len(rows) == 2 * len(RUNS) and all(r["ok"] and r["outputs_equal"] for r in rows)
    assert rows[-1]["prompt_tokens"] == 252 and rows[-1]["requests"] == 4
    prov = {"date": "d", "gpu": "cpu", "torch": "t", "triton": "x"}
    text = block_text({"provenance": prov, "rows": rows + [{"case": "long prompt 9 alone", "ok": False,
                                                            "skipped": "past the section's 1 s"}]})
    assert "tiny shape, random float32 weights" in text and "max_batched_tokens 32" in text
    assert "| 252 | among others | False | prefill_first | yes | yes | - |" in text
    assert "past the section's 1 s" in text
