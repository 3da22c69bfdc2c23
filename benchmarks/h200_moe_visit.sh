#!/usr/bin/env bash
# One device call (one H200, about 8 minutes): the MoE and DeepSeek-V4 measurements.
#   1. the fused MoE and V4 attention kernels' tests on the GPU (bf16, CUDA graphs)
#   2. Qwen3-30B-A3B profiled whole (verify, prefill, drafters)
#   3. Qwen3-30B-A3B slices of 2 and 4 layers (verify): the slice-scaling error
#   4. DeepSeek-V4-Flash slices of 2 and 4 layers (verify, prefill): its profile, scaled
# Each profiler run writes its raw file under $OUT when it ends (raw_<model>[.slice<N>].json);
# everything else goes to $OUT/visit.log. A step the budget cannot hold is skipped and logged.
# Usage (repository root, on the device machine):  bash benchmarks/h200_moe_visit.sh
# Seconds: BUDGET_S (the whole call, 480), TESTS_S, WHOLE_S, QSLICE_S, V4SLICE_S (each step's).
# The profiler runs as dspark-profile does (python -m dspark_sim.profiling.cli, without pip).
# Afterwards, in the repository (no GPU needed): file the raw files and fit them with dspark-profile fit
#   cp RAW_FILES/raw_*.json profiles/h200/raw/
#   python benchmarks/fit_profiles.py --models qwen3-30b-a3b deepseek-v4-flash
#     (= dspark-profile fit --raw-dir profiles/h200/raw --out-dir profiles --img-dir docs/img
#        --docs docs/profiles.md --models ...: Qwen3-30B-A3B fitted whole, its slices' scaling error
#        into profiles/h200/slice_scaling.json; the V4-Flash slices scaled to 43 layers and fitted;
#        both projected to B300, B200 and H100; the held-out table, with verify_levels, into docs/profiles.md)
#   python benchmarks/moe_costs.py && python benchmarks/doc_blocks.py write   # docs/moe.md: slice-scaling and held-out errors from those files
set -o pipefail
OUT=${OUT:-/tmp/out}
BUDGET_S=${BUDGET_S:-480}
TESTS_S=${TESTS_S:-40} WHOLE_S=${WHOLE_S:-120} QSLICE_S=${QSLICE_S:-30} V4SLICE_S=${V4SLICE_S:-75}
START_S=15  # imports and the model's build, beyond a step's own seconds (the hard cap adds 30 more)
source "$(dirname "$0")/visit_common.sh"
say "start: $(nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader 2>&1)"
python3 -c "import torch, triton, dspark_sim.kernels.decoder; print('torch', torch.__version__, 'triton',
triton.__version__, torch.cuda.get_device_name(0))" 2>&1 | tee -a "$LOG" || exit 1

profile() {  # profile NAME SECONDS MODEL [profiler flags...]
  local name=$1 secs=$2 model=$3; shift 3
  run "$name" "$secs" python3 -m dspark_sim.profiling.cli --gpu h200 --model "$model" --out "$OUT" \
      --max-seconds "$secs" "$@"
}

run tests "$TESTS_S" python3 -m pytest -q -p no:cacheprovider tests/test_decoder_moe.py tests/test_decoder_v4_kernels.py
profile qwen3_whole "$WHOLE_S" qwen3-30b-a3b --part verify,prefill,draft,chain
profile qwen3_slice2 "$QSLICE_S" qwen3-30b-a3b --layers 2 --part verify
profile qwen3_slice4 "$QSLICE_S" qwen3-30b-a3b --layers 4 --part verify
profile v4_slice2 "$V4SLICE_S" deepseek-v4-flash --layers 2 --part verify,prefill
profile v4_slice4 "$V4SLICE_S" deepseek-v4-flash --layers 4 --part verify,prefill
grep -h "^  .*| wrote\|passed\|failed\|Error" "$LOG" | tail -12
say "done; files: $(cd "$OUT" && ls | tr '\n' ' ')"
