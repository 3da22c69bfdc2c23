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


def _check_module():
    from dspark_sim.validation import long_prompts
    return long_prompts


def test_the_gpu_checks_long_prompt_section_runs_on_the_cpu():
    """``benchmarks/gpu_check.py --only long --tiny``'s runs at a prompt chunked alone and at the
    whole context (lengths scaled to a 256-token context): every output is target-only greedy,
    and every checked position carries the noise of the other computations (fp32: rounding)."""
    check = _check_module()
    rows = check.long_prompt_cases(tiny=True, lengths=(36, 0))
    assert len(rows) == 2 * len(check.RUNS) and all(r["ok"] and r["outputs_equal"] for r in rows)
    assert rows[-1]["prompt_tokens"] == 252 and rows[-1]["requests"] == 4
    for r in rows:
        assert [s["request"] for s in r["sequences"]] == list(range(r["requests"]))
        noise = [x for s in r["sequences"] for x in s["noise"]]
        assert len(noise) == sum(s["output_tokens"] for s in r["sequences"])
        assert all(0 <= x < 1e-4 for x in noise) and max(noise) > 0  # other reduction orders, fp32
    prov = {"date": "d", "gpu": "cpu", "torch": "t", "triton": "x"}
    text = check.block_text({"provenance": prov, "rows": rows + [{"case": "long prompt 9 alone", "ok": False,
                                                                  "skipped": "past the section's 1 s"}]})
    assert "tiny shape, random float32 weights" in text and "max_batched_tokens 32" in text
    assert "| 252 | among others | False | prefill_first | yes | yes | 0 (0) | - |" in text
    assert "past the section's 1 s" in text and "10/11 runs ok; 1 not served" in text
    assert f"at most {check.FACTOR:g} x the noise" in text


def _logits(rows: list[list[float]]):
    """fp32 logits ``[O, 32]``: the given leading values, the rest far below."""
    out = torch.full((len(rows), 32), -5.0)
    for i, r in enumerate(rows):
        out[i, :len(r)] = torch.tensor(r)
    return out


def test_a_departure_passes_only_within_the_measured_noise():
    """Served token 1 where the reference's best is token 0 by 0.3: a near tie when the other
    computations moved the top logits by 0.2 (0.3 <= 2 x 0.2), not when they moved them by 0.1;
    a far logit that moved a lot is not among the top ones and adds no noise."""
    check = _check_module()
    tail = [0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3]  # every computation's top 8 lie among the leading values
    ref = _logits([[4.0, 3.7, *tail], [2.0, 1.0, *tail]])
    for moved, tie in ((0.2, True), (0.1, False)):
        alt = ref.clone()
        alt[0, 0] -= moved
        alt[:, 31] += 4.0  # -1.0: below the top 8 of every computation
        got = check.judge(ref, [alt], [1, 0])
        assert got["noise"] == pytest.approx([moved, 0.0], abs=1e-6) and not got["equal"]
        (d,) = got["divergences"]
        assert (d["index"], d["reference"], d["served"], d["near_tie"]) == (0, 0, 1, tie)
        assert d["margin"] == pytest.approx(0.3) and d["alt_margins"] == [pytest.approx(0.3 - moved)]
    assert check.judge(ref, [ref.clone()], [0, 0]) == {"equal": True, "noise": [0.0, 0.0], "divergences": []}
    exact = check.judge(_logits([[1.0, 1.0]]), [_logits([[1.0, 1.0]])], [1])  # an exact tie: margin 0
    assert exact["divergences"][0]["near_tie"]


def test_the_block_reads_files_from_before_the_measured_noise():
    """The first H200 file (a fixed 0.1 threshold, each request's first departure) still renders."""
    check = _check_module()
    dep = {"index": 2, "reference": 7, "served": 9, "margin": 0.125, "top2_gap": 0.125, "near_tie": False}
    row = {"case": "long prompt 9000 among others, graphs=False, prefill_first", "ok": False, "prompt_tokens": 9000, "output_tokens": 4, "requests": 4,
           "outputs_equal": False, "long_outputs_equal": True, "divergence": None, "others_divergences": [dep],
           "steps": 25, "prefill_steps": 2, "wall_s": 0.7}
    run = {"tree": "abc1234", "model": "qwen3-8b", "dtype": "bfloat16", "max_batched_tokens": 8192}
    text = check.block_text({"provenance": {"date": "d", "gpu": "g", "torch": "t", "triton": "x"}, "run": run,
                             "rows": [row]})
    assert "predate the measured noise" in text and "at most 0.1 logits" in text and "; tree abc1234)" in text
    assert "qwen3-8b shape, random bfloat16 weights" in text and "max_batched_tokens 8192" in text
    assert "(0 in the long prompt's output, 1 in the other requests')" in text
    assert "| 9,000 | among others | False | prefill_first | no | no | 1 (0) | 0.125 (not measured) |" in text
    assert "0/1 runs ok" in text and "Not ok: among others, graphs=False, prefill_first (1)" in text
