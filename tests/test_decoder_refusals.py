"""What the decoder serves and refuses: every request up to ``max_model_len`` is served, a
longer one (or one the KV cache cannot hold alone) is refused with one line naming it and a
``rejected`` row, as the engines and the simulator refuse it; a GPU fault while serving is one
line naming the step (exit code 1)."""
import pytest
import yaml

torch = pytest.importorskip("torch")

from dspark_sim.errors import DeviceFault, InputError, run_reporting_errors  # noqa: E402
from dspark_sim.kernels.decoder.engine import serve  # noqa: E402
from dspark_sim.kernels.decoder.launch import load_launch, trace_sequences  # noqa: E402
from dspark_sim.kernels.decoder.sequence import Sequence  # noqa: E402
from dspark_sim.kernels.decoder.tiny import greedy_reference, tiny_decoder  # noqa: E402


def _prompt(n: int, salt: int = 0) -> list[int]:
    return [(7 * j + salt) % 31 for j in range(n)]


@pytest.mark.parametrize("method", ["none", "dspark"])
def test_a_request_of_exactly_max_model_len_is_served(method):
    """Prompt + output = max_model_len: its pages, RoPE positions and the drafts of the steps in
    flight past its end all fit (dspark verifies windows of 5 tokens up to the last one)."""
    dec = tiny_decoder(method, max_model_len=64, max_batched_tokens=16, kv_block_tokens=1)  # no page rounds up
    seq = Sequence(0, _prompt(56), 8)
    run = serve(dec, [seq])
    assert not run.refused and seq.done and len(seq.outputs) == 8
    assert seq.outputs == greedy_reference(tiny_decoder("none"), _prompt(56), 8)


def test_longer_requests_are_refused_with_a_line_and_a_row_and_the_rest_served():
    dec = tiny_decoder("none", max_model_len=64, kv_tokens=2048)
    seqs = [Sequence(0, _prompt(20), 4), Sequence(1, _prompt(60, 3), 5, arrival_s=0.001),
            Sequence.unseen(2, 10**9, 16, arrival_s=0.002), Sequence(3, _prompt(9, 5), 3, arrival_s=0.003)]
    run = serve(dec, seqs)
    assert run.refused == ["request 1 refused: prompt 60 + output 5 tokens exceed max-model-len 64",
                           "request 2 refused: prompt 1000000000 + output 16 tokens exceed max-model-len 64"]
    rows = {r["request_id"]: r for r in run.requests}
    assert [rows[i]["status"] for i in (1, 2)] == ["rejected", "rejected"]
    assert rows[1]["reject_reason"] == "context_length" and rows[2]["prompt_tokens"] == 10**9
    assert rows[0].get("status", "completed") == "completed" and seqs[0].done and seqs[3].done


def test_a_request_the_kv_cache_cannot_hold_alone_is_refused():
    """64 KV tokens (16 pages of 4, one the trash page): 60 tokens less the slack of two windows."""
    dec = tiny_decoder("none", max_model_len=96, kv_tokens=64)
    seqs = [Sequence(0, _prompt(40), 20), Sequence(1, _prompt(30), 4)]
    run = serve(dec, seqs)
    assert run.refused == ["request 0 refused: prompt 40 + output 20 tokens exceed the 58 tokens the KV cache "
                           "holds for one request (60 less 2 for the steps in flight)"]
    assert run.requests[0]["reject_reason"] == "kv_cache" and seqs[1].done


def _scenario(tmp_path, prompts_outputs) -> str:
    rows = "".join(f"2023-11-16 18:17:0{i}.0,{p},{o}\n" for i, (p, o) in enumerate(prompts_outputs))
    (tmp_path / "t.csv").write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n" + rows)
    data = {"model": "qwen3-8b", "gpu": "h200", "deployment": {"max_running_requests": 8},
            "speculation": {"method": "none"}, "workload": {"trace": "t.csv"}}
    path = tmp_path / "none.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def test_max_model_len_defaults_to_the_model_context_and_no_further(tmp_path):
    path = _scenario(tmp_path, [(40, 10), (40950, 11), (2**32, 5)])
    assert load_launch(path).conf.max_model_len == 40960  # Qwen3-8B: max_position_embeddings
    assert load_launch(path, max_model_len=10240).conf.max_model_len == 10240
    with pytest.raises(InputError, match="exceeds qwen3-8b's context of 40960"):
        load_launch(path, max_model_len=50000)
    seqs = trace_sequences(load_launch(path), vocab_size=100)
    # the trace's lengths are kept whole (no prompt cut to fit); the longer ones get no tokens made
    assert [(s.prompt_len, s.max_tokens, len(s.tokens)) for s in seqs] == [(40, 10, 40), (40950, 11, 0),
                                                                             (2**32, 5, 0)]


def test_a_gpu_fault_while_serving_is_one_line_naming_the_step(capsys):
    """A CUDA error surfaces when a step is finished (or at a later launch): the loop names the
    step it met and the one in flight; the command prints one line and exits with code 1."""
    dec = tiny_decoder("none", max_batched_tokens=8)
    finish = dec.finish
    calls = []

    def faulty(pending):  # the GPU's report of a fault in the second step, as torch raises it
        calls.append(pending)
        if len(calls) == 2:
            raise RuntimeError("CUDA error: an illegal memory access was encountered\nCUDA kernel errors ...")
        return finish(pending)
    dec.finish = faulty
    seqs = [Sequence(0, _prompt(20), 4)]
    with pytest.raises(DeviceFault) as err:
        serve(dec, seqs)
    text = str(err.value)
    assert "\n" not in text and "illegal memory access" in text
    assert "0 decode requests (at most 0 verify tokens), 1 prefill chunks (8 tokens): at most 8 tokens" in text

    def command():
        raise err.value
    assert run_reporting_errors(command) == 1
    line = capsys.readouterr().err.strip()
    assert line.count("\n") == 0 and line.startswith("error: GPU fault while serving")


def test_other_errors_are_not_taken_for_gpu_faults():
    dec = tiny_decoder("none")
    dec.finish = lambda pending: (_ for _ in ()).throw(RuntimeError("shape mismatch"))
    with pytest.raises(RuntimeError, match="shape mismatch"):
        serve(dec, [Sequence(0, _prompt(5), 2)])


def test_deepseek_v4_keeps_a_context_its_per_request_state_fits(tmp_path):
    path = _scenario(tmp_path, [(40, 10)])
    text = open(path).read().replace("qwen3-8b", "deepseek-v4-flash")
    open(path, "w").write(text)
    assert load_launch(path).conf.max_model_len == 16384
