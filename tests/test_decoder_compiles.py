"""StallLog: Triton compiles recorded while active, the previous hook restored after."""
import pytest

triton = pytest.importorskip("triton")
pytest.importorskip("torch")

from dspark_sim.kernels.decoder.compiles import StallLog, runtime_knobs  # noqa: E402


def test_stall_log_records_compiles_and_restores_the_hook():
    rt = runtime_knobs()
    if rt is None:
        pytest.skip("this Triton has no jit_post_compile_hook")
    outer = []
    previous = rt.jit_post_compile_hook

    def outer_hook(**kw):
        outer.append(kw["repr"])
    rt.jit_post_compile_hook = outer_hook
    try:
        with StallLog() as log:
            assert rt.jit_post_compile_hook == log._hook
            rt.jit_post_compile_hook(key=1, repr="_attn_kernel[num_warps=4](T: i32)", fn=None, compile={},
                                     is_manual_warmup=False, already_compiled=False)
        assert [k for _, k, _ in log.compiles] == ["_attn_kernel"]
        assert outer == ["_attn_kernel[num_warps=4](T: i32)"]  # the hook it replaced still ran
        assert log.alloc() == {}  # no CUDA device: no allocator counters
        assert rt.jit_post_compile_hook is outer_hook  # restored on exit
    finally:
        rt.jit_post_compile_hook = previous
