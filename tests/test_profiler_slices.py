"""dspark-profile on MoE and DeepSeek-V4 slices: flags, file names, provenance."""
from __future__ import annotations

import json

import pytest


def test_v4_parts_and_layers_are_checked(tmp_path, capsys):
    pytest.importorskip("torch")  # the decoder (or its kernels) runs here
    from dspark_sim.kernels.profiler.__main__ import main

    out = tmp_path / "o"
    assert main(["--gpu", "h200", "--model", "deepseek-v4-flash", "--part", "verify,draft", "--out", str(out),
                 "--device", "cpu"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: dspark-profile: --part=") and "without a drafter" in err and "\n" not in err
    assert main(["--gpu", "h200", "--model", "qwen3-30b-a3b", "--layers", "49", "--out", str(out),
                 "--device", "cpu"]) == 2
    assert "--layers=49" in capsys.readouterr().err
    assert not out.exists()


def test_a_v4_slice_writes_its_own_raw_file(tmp_path, monkeypatch):
    pytest.importorskip("torch")  # the decoder (or its kernels) runs here
    import dspark_sim.kernels.profiler.__main__ as prof
    from dspark_sim.kernels.decoder.tiny import tiny_decoder, tiny_v4_spec

    spec = tiny_v4_spec().sliced(2)
    monkeypatch.setattr(prof, "build", lambda args: tiny_decoder(
        "none", spec=spec, agreeable=False, kv_tokens=4096, max_model_len=600, max_running_requests=8))
    assert prof.main(["--gpu", "cpu", "--model", "deepseek-v4-flash", "--layers", "2", "--part", "verify,prefill",
                      "--out", str(tmp_path), "--max-seconds", "4", "--reps", "1", "--device", "cpu"]) == 0
    raw = json.loads((tmp_path / "raw_deepseek-v4-flash.slice2.json").read_text())
    assert raw["provenance"]["slice_layers"] == 2 and raw["provenance"]["layer_ratios"] == [4, 128]
    assert raw["provenance"]["attn_max_splits"] == 1  # the fit's key-split floor: none for V4
    assert raw["verify"], "the first verify points were timed"
    assert all(r.get("kind", "none") == "none" for r in raw["prefill"])  # no drafter to prefill for


@pytest.mark.parametrize("layers", [2, 4])
def test_slices_keep_the_layer_pattern(layers):
    from dspark_sim.catalog import get_model

    v4 = get_model("deepseek-v4-flash").sliced(layers)
    assert v4.v4.compress_ratios == (4, 128) * (layers // 2)
    assert get_model("qwen3-30b-a3b").sliced(layers).num_layers == layers
