#!/usr/bin/env bash
# One device call (one H200, or the GPU named by GPU): target-only profiles (method none) of models served without
# speculation, a tensor-parallel model as one rank of its replica.
#   each argument MODEL[@TP]:SECONDS profiles MODEL (at TP > 1: one rank of a TP-way replica,
#   dspark-profile --tp-rank, collectives left out) for SECONDS of the profiler's own budget:
#   decode verify steps (one token a request), whole decode steps and the serving loop's host
#   time of kind none, then prefill chunks after cached contexts (PREFILL_CHUNKS x PREFILL_CACHED,
#   levels coarse first; the GPU idles PREFILL_IDLE times each timed call after it).
# The raw files ($OUT/raw_<model>.json: provenance with GPU, uuid, driver, torch, triton, date and
# the decoder's commit) are written when each profiler ends; the log goes to $OUT/visit.log.
# Usage (repository root, on the device machine):
#   bash benchmarks/h200_rank_visit.sh llama-3.1-8b:150 llama-3.1-70b@4:230
#   GPU=h100 bash benchmarks/h200_rank_visit.sh qwen3-14b:200 llama-3.1-70b@4:230   # on an H100
# Seconds: BUDGET_S (the whole call, 540). GPU: the catalog name recorded in the raw files (h200).
# Afterwards, in the repository (no GPU needed):
#   cp RAW_FILES/raw_*.json profiles/$GPU/raw/
#   python benchmarks/fit_profiles.py --models llama-3.1-8b llama-3.1-70b
set -o pipefail
OUT=${OUT:-/tmp/out}
BUDGET_S=${BUDGET_S:-540}
GPU=${GPU:-h200}
PREFILL_CHUNKS=${PREFILL_CHUNKS:-16,32,64,128,256,512,1024,2048,4096,8192}
PREFILL_CACHED=${PREFILL_CACHED:-0,1024,4096}
PREFILL_IDLE=${PREFILL_IDLE:-1}
REPS=${REPS:-10}
START_S=40  # imports, the model's build and its KV cache, beyond the profiler's own seconds
source "$(dirname "$0")/visit_common.sh"
say "start: $(nvidia-smi --query-gpu=name,uuid,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader 2>&1)"
python3 -c "import torch, triton, dspark_sim.kernels.decoder; print('torch', torch.__version__, 'triton',
triton.__version__, torch.cuda.get_device_name(0))" 2>&1 | tee -a "$LOG" || exit 1
for arg in "$@"; do
  IFS=: read -r name secs <<< "$arg"
  model=${name%@*}; tp=1; [ "$name" != "$model" ] && tp=${name#*@}
  run "$name" "$secs" python3 -m dspark_sim.profiling.cli --gpu "$GPU" --model "$model" --out "$OUT" \
      --method none --tp-rank "$tp" --part verify,step,sched,prefill --max-seconds "$secs" --reps "$REPS" \
      --prefill-idle "$PREFILL_IDLE" --prefill-chunks "$PREFILL_CHUNKS" --prefill-cached "$PREFILL_CACHED"
done
grep -h "| wrote\|Error\|error" "$LOG" | tail -6
say "done; files: $(cd "$OUT" && ls | tr '\n' ' ')"
