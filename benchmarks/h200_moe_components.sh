#!/usr/bin/env bash
# One device call (one H200, about 8 minutes): where the MoE and DeepSeek-V4 layers' step time goes
# on the project's kernels, per component, with the layer stack replayed as CUDA graphs.
#   1. Qwen3-30B-A3B, a slice of 4 layers: decode steps of 1 and 64 requests, every kernel of the
#      served step from the device trace grouped by kind (MoE, attention, products, norms, copies)
#      and the time no kernel ran (launch gaps inside the graph, host synchronisation)
#   2. DeepSeek-V4-Flash, slices of 2 and 4 compressed layers: the same (its compressor, indexer and
#      sparse attention as "v4 attention")
#   3. each again with the experts in block-scaled FP8, as the engines run FP8 checkpoints on Hopper
#      (--moe-fp8: $OUT/components_<model>_<layers>_fp8.json); PARTS=bf16 or PARTS=fp8 runs one set
# The difference between the 2- and 4-layer slices is two layers' time per component: the floor a
# layer costs at one request (the engines' MoE roofline fits one per attention kind from published
# runs: docs/external.md) against what the project's kernels take, kernel by kernel.
# Each run writes $OUT/components_<model>_<layers>.json (provenance: GPU, driver, torch, triton, date,
# commit, SM clocks) when it ends; everything else goes to $OUT/visit.log.
# Usage (repository root, on the device machine):  bash benchmarks/h200_moe_components.sh
# Afterwards, in the repository (no GPU needed):
#   python benchmarks/forward_breakdown.py --json RAW/components_deepseek-v4-flash_4.json   # the table
set -o pipefail
OUT=${OUT:-/tmp/out}
BUDGET_S=${BUDGET_S:-480}
STEP_S=${STEP_S:-110}
START_S=20
source "$(dirname "$0")/visit_common.sh"
say "start: $(nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader 2>&1)"
python3 -c "import torch, triton, dspark_sim.kernels.decoder; print('torch', torch.__version__, 'triton',
triton.__version__, torch.cuda.get_device_name(0))" 2>&1 | tee -a "$LOG" || exit 1
components() {  # components MODEL LAYERS [--moe-fp8]
  run "components_$1_$2${3:+_fp8}" "$STEP_S" python3 benchmarks/forward_breakdown.py --run --model "$1" \
      --layers "$2" --cases none:1,none:64 --context 4096 --steps 16 --max-seconds "$STEP_S" \
      --out "$OUT/components_$1_$2${3:+_fp8}.json" $3
}
for part in ${PARTS:-bf16 fp8}; do
  flag=; [ "$part" = fp8 ] && flag=--moe-fp8
  components qwen3-30b-a3b 4 $flag
  components deepseek-v4-flash 2 $flag
  components deepseek-v4-flash 4 $flag
done
say "done; files: $(cd "$OUT" && ls | tr '\n' ' ')"
