"""The GPU runner's decoders: one a method, and nothing of it left once the next is built."""
import gc
import weakref
from pathlib import Path

import pytest

CASES = Path(__file__).resolve().parents[1] / "profiles" / "h200" / "validation" / "capacity"


@pytest.mark.parametrize("method", ["mtp3", "dspark"])
def test_a_dropped_decoder_is_collected_before_the_next_is_built(method):
    """The next method's decoder sizes its KV to the device's free memory: whatever still held
    the previous one (a cycle, a cache) would keep its KV and leave the next none. (What the
    caching allocator keeps of freed tensors, ``release_device`` hands back; that needs a GPU.)"""
    pytest.importorskip("torch")
    from dspark_sim.validation.serve import Rig, release_device, warm_decoder

    decoder, _ = warm_decoder(CASES / f"cap-chat__{method}.yaml", Rig(dry=True), 0)
    held = weakref.ref(decoder)
    cache = weakref.ref(decoder.cache.k)
    gc.disable()  # only release_device may collect
    try:
        del decoder
        release_device()
    finally:
        gc.enable()
    assert held() is None and cache() is None
