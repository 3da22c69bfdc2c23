#!/usr/bin/env bash
# One device call (one H200, about 8 minutes): prefill chunks after cached contexts.
#   MODEL's (default Qwen3-8B) prefill steps as served (CUDA graphs up to 512 tokens, eager above; first token
#   sampled), every chunk of PREFILL_CHUNKS after every cached context of PREFILL_CACHED,
#   drafter kinds PREFILL_KINDS (none: the target alone; block: with DSpark's context projection)
#   (levels coarse first, so a cut run still spans the range; kinds alternating);
#   median and 90th percentile of each point's synchronised calls (--reps: at least 10 calls
#   for steps under 0.1 s). The other parts of the shipped raw file are kept as they are
#   (--resume profiles/h200/raw/raw_$MODEL.json --replace prefill).
# The raw file ($OUT/raw_$MODEL.json: provenance with GPU, driver, torch, triton, date and
# the decoder's commit) is written when the profiler ends; the log goes to $OUT/visit.log.
# Usage (repository root, on the device machine):  bash benchmarks/h200_prefill_visit.sh
# Qwen3-32B (steps about 4x the 8B's; the target alone, 10 calls a point, 5 above 0.1 s):
#   MODEL=qwen3-32b PREFILL_KINDS=none REPS=10 PREFILL_CHUNKS=16,32,64,128,256,384,512,768,1024,2048,4096 \
#   PREFILL_CACHED=0,512,1024,2048,3072,4096,6144,8192,12288,16384 PREFILL_S=225 BUDGET_S=290 \
#   bash benchmarks/h200_prefill_visit.sh
# Seconds: BUDGET_S (the whole call, 500), PREFILL_S (the profiler's own budget, 400).
# PREFILL_IDLE=r: the GPU idles r times each timed call's seconds after it (served prefills run
#   between decode steps; back to back they run at a lower clock: benchmarks/prefill_clocks.py).
# Afterwards, in the repository (no GPU needed):
#   cp RAW_FILES/raw_$MODEL.json profiles/h200/raw/
#   python benchmarks/fit_profiles.py --models $MODEL
set -o pipefail
OUT=${OUT:-/tmp/out}
BUDGET_S=${BUDGET_S:-500}
PREFILL_S=${PREFILL_S:-400}
MODEL=${MODEL:-qwen3-8b}
PREFILL_CHUNKS=${PREFILL_CHUNKS:-16,32,64,128,256,384,512,768,1024,1536,2048,3072,4096,8192}
PREFILL_CACHED=${PREFILL_CACHED:-0,512,1024,2048,3072,4096,6144,8192,12288,16384}
PREFILL_KINDS=${PREFILL_KINDS:-none,block}
PREFILL_MAX_TOTAL=${PREFILL_MAX_TOTAL:-20480}
REPS=${REPS:-20}
PREFILL_IDLE=${PREFILL_IDLE:-0}  # idle seconds after each timed prefill per second it took
START_S=40  # imports, the model's build and its KV cache, beyond the profiler's own seconds
source "$(dirname "$0")/visit_common.sh"
say "start: $(nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader 2>&1)"
python3 -c "import torch, triton, dspark_sim.kernels.decoder; print('torch', torch.__version__, 'triton',
triton.__version__, torch.cuda.get_device_name(0))" 2>&1 | tee -a "$LOG" || exit 1
RAW=${RAW:-profiles/h200/raw/raw_$MODEL.json}
resume=(); [ -f "$RAW" ] && resume=(--resume "$RAW" --replace prefill)
run prefill "$PREFILL_S" python3 -m dspark_sim.profiling.cli --gpu h200 --model "$MODEL" --out "$OUT" \
    --part prefill --max-seconds "$PREFILL_S" --reps "$REPS" --prefill-idle "$PREFILL_IDLE" "${resume[@]}" \
    --prefill-chunks "$PREFILL_CHUNKS" --prefill-cached "$PREFILL_CACHED" \
    --prefill-kinds "$PREFILL_KINDS" --prefill-max-total "$PREFILL_MAX_TOTAL"
grep -h "| wrote\|Error" "$LOG" | tail -4
say "done; files: $(cd "$OUT" && ls | tr '\n' ' ')"
