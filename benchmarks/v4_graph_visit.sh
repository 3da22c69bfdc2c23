#!/usr/bin/env bash
# One device call (one H200, at most 8 minutes, builds and Triton compiles included): DeepSeek-V4 and
# Qwen3-MoE layers on the decoder's kernels as the engines run them (CUDA graphs, fused small ops,
# block-scaled FP8 experts), per component, and V4-Flash's layer slices for the profile fitter.
#   1. the new kernels' tests on the GPU (fused hyper-connections / RoPE, FP8 MoE, fused MoE, V4 kernels)
#   2. DeepSeek-V4-Flash slices of 2 and 4 layers (verify, prefill) with the fused V4 path: the raw files
#      dspark-profile fit reads (raw_deepseek-v4-flash.slice<N>.json)
#   3. one V4-Flash CSA and HCA layer, each component its own CUDA graph, decode steps of 1..256 requests
#      at context 4096: layer (fused / unfused / eager), hyper-connections, queries, key store,
#      compression, indexer, sparse attention, output, dense GEMMs, routed MoE bf16 and FP8, shared
#      expert; launches per layer (kernels/profiler/layer_parts.py) -> layer_parts_deepseek-v4-flash.json
#   4. Qwen3-30B-A3B's MoE (bf16, FP8) and projections the same way -> layer_parts_qwen3-30b-a3b.json
# provenance.json: GPU, driver, torch, triton, date, commit. Everything else goes to $OUT/visit.log.
# A step the budget cannot hold is skipped and logged.
# Usage (repository root, on the device machine):  bash benchmarks/v4_graph_visit.sh
# Dry run on a CPU (tiny models under the Triton interpreter; no slices: the profiler needs a GPU):
#   TINY=1 OUT=/tmp/v4dry bash benchmarks/v4_graph_visit.sh
# Seconds: BUDGET_S (the whole call, 430; a step that has started may overrun it by 30 at most), TESTS_S, V4SLICE_S, PARTS_S, QPARTS_S (each step's).
# Afterwards, in the repository (no GPU needed; RAW the folder the files came back to):
#   cp RAW/raw_deepseek-v4-flash.slice2.json RAW/raw_deepseek-v4-flash.slice4.json profiles/h200/raw/
#   cp RAW/layer_parts_*.json profiles/h200/
#   python benchmarks/fit_profiles.py --models deepseek-v4-flash   # slices scaled to 43 layers, fitted,
#       projected to B300, B200 and H100 (= dspark-profile fit ... --models deepseek-v4-flash)
#   python benchmarks/moe_costs.py && python benchmarks/v4_engine_steps.py && python benchmarks/doc_blocks.py write
#   python -m dspark_sim.kernels.profiler.layer_parts --show profiles/h200/layer_parts_deepseek-v4-flash.json
set -o pipefail
OUT=${OUT:-/tmp/out}
BUDGET_S=${BUDGET_S:-430}
TESTS_S=${TESTS_S:-40} V4SLICE_S=${V4SLICE_S:-70} PARTS_S=${PARTS_S:-110} QPARTS_S=${QPARTS_S:-40}
START_S=15  # imports and the model's build, beyond a step's own seconds (the hard cap adds 30 more)
source "$(dirname "$0")/visit_common.sh"
TINY_FLAG=()
if [ -n "${TINY:-}" ]; then export TRITON_INTERPRET=1; TINY_FLAG=(--tiny); fi
say "start: $(nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader 2>&1)"
COMMIT=${COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo "not a git checkout")}
python3 - "$OUT/provenance.json" "$COMMIT" <<'PY' 2>&1 | tee -a "$LOG" || exit 1
import json, sys
from dspark_sim.kernels.profiler.provenance import provenance
p = {**provenance(), "commit": sys.argv[2], "script": "benchmarks/v4_graph_visit.sh"}
json.dump(p, open(sys.argv[1], "w"), indent=1)
print({k: p[k] for k in ("gpu", "driver", "torch", "triton", "date", "commit")})
PY

if [ -n "${TINY:-}" ]; then
  run tests "$TESTS_S" python3 -m pytest -q -p no:cacheprovider tests/test_decoder_v4_fused.py tests/test_decoder_moe_fp8.py
else
  run tests "$TESTS_S" python3 -m pytest -q -p no:cacheprovider tests/test_decoder_v4_fused.py \
      tests/test_decoder_moe_fp8.py tests/test_decoder_moe.py tests/test_decoder_v4_kernels.py
fi
for n in 2 4; do
  [ -n "${TINY:-}" ] && { say "SKIPPED v4_slice$n: the profiler needs a GPU"; continue; }
  run "v4_slice$n" "$V4SLICE_S" python3 -m dspark_sim.profiling.cli --gpu h200 --model deepseek-v4-flash \
      --out "$OUT" --max-seconds "$V4SLICE_S" --layers "$n" --part verify,prefill
done
parts() {  # parts MODEL SECONDS
  run "parts_$1" "$2" python3 -m dspark_sim.kernels.profiler.layer_parts --model "$1" --context 4096 \
      --max-seconds "$2" --out "$OUT/layer_parts_$1.json" "${TINY_FLAG[@]}"
}
parts deepseek-v4-flash "$PARTS_S"
parts qwen3-30b-a3b "$QPARTS_S"
grep -h "^  .*| wrote\|passed\|failed\|Error\|launches" "$LOG" | tail -20
say "done; files: $(cd "$OUT" && ls | tr '\n' ' ')"
