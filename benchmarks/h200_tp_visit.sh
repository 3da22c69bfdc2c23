#!/usr/bin/env bash
# The runs left for a multi-GPU H200 kind (nvidia-h200-x2 for tp 2, nvidia-h200-x4 for tp 4):
#   comm2 / comm4     all-reduce and all-to-all curves by message size at tp 2 / 4
#                     (dspark-profile comm -> $OUT/comm_tp<N>.json)
#   steps2 / steps4   whole decode steps of Qwen3-32B on the tensor-parallel decoder, drafters none,
#                     MTP-3 and DSpark (dspark-profile steps -> $OUT/steps_qwen3-32b.tp<N>.json)
#   fidelity2         the tp-2 fidelity cases (profiles/h200/validation/cases_tp2: Qwen3-32B, traces
#                     syn-light and syn-mid, none / MTP-3 / DSpark) served by dspark-decode --tp 2
#                     -> $OUT/fidelity_tp2/<case>/{requests,steps}.csv
#   check2            the tensor-parallel tests on the GPUs (NCCL, CUDA graphs per rank)
# Usage (repository root, on the device machine; each call at most 10 minutes):
#   bash benchmarks/h200_tp_visit.sh check2 comm2 steps2      # x2 kind, call 1
#   bash benchmarks/h200_tp_visit.sh fidelity2                # x2 kind, call 2
#   bash benchmarks/h200_tp_visit.sh comm4 steps4             # x4 kind
# Seconds: BUDGET_S (the call, 540), COMM_S, STEPS_S, CASE_S (each fidelity case), CHECK_S.
# Afterwards, in the repository (no GPU needed):
#   cp $OUT/comm_tp*.json $OUT/steps_qwen3-32b.tp*.json profiles/h200/raw/
#   python benchmarks/fit_profiles.py --models qwen3-32b
#     (dspark-profile fit: the curves go into every H200 profile fitted, and projected with them to
#      B300 / B200 / H100 by the NVLink ratio; tp 8 from the tp-4 curves by the ring model, labelled
#      "projected"; the tp steps give held_out["step_tp2"], ["step_tp4"])
#   for c in $OUT/fidelity_tp2/*/; do n=$(basename $c)
#     dspark-sim validate --scenario profiles/h200/validation/cases_tp2/$n.yaml --real $c; done
#   python benchmarks/golden.py update   # capacity answers at tp 2-8 re-made from the measured terms
set -o pipefail
OUT=${OUT:-/tmp/out}
BUDGET_S=${BUDGET_S:-540}
COMM_S=${COMM_S:-90} STEPS_S=${STEPS_S:-240} CASE_S=${CASE_S:-90} CHECK_S=${CHECK_S:-90}
START_S=40  # imports, a rank per GPU, the model built whole on each and cut to its slice
source "$(dirname "$0")/visit_common.sh"
say "start: $(nvidia-smi --query-gpu=index,name,driver_version,clocks.sm --format=csv,noheader 2>&1 | tr '\n' ';')"
python3 -c "import torch, dspark_sim.kernels.decoder; print('torch', torch.__version__, 'gpus', torch.cuda.device_count(),
'nccl', torch.cuda.nccl.version())" 2>&1 | tee -a "$LOG" || exit 1

comm() { run "comm$1" "$COMM_S" python3 -m dspark_sim.profiling.cli comm --gpu h200 --tp "$1" --out "$OUT"; }
steps() {
  run "steps$1" "$STEPS_S" python3 -m dspark_sim.profiling.cli steps --gpu h200 --model qwen3-32b --tp "$1" \
      --out "$OUT" --reqs "${STEPS_REQS:-1,8,32,64,128}" --timeout-s "$STEPS_S"
}
fidelity() {  # every tp-$1 case, one dspark-decode --tp $1 each
  local dir=profiles/h200/validation/cases_tp$1
  for case in "$dir"/*__*.yaml; do
    local name; name=$(basename "$case" .yaml)
    run "case_$name" "$CASE_S" python3 -m dspark_sim.kernels.decoder.cli --config "$case" --model qwen3-32b \
        --tp "$1" --max-model-len 10240 --out "$OUT/fidelity_tp$1/$name" --timeout-s "$CASE_S"
  done
}

for arg in "$@"; do
  case "$arg" in
    check2) DSPARK_TP_DEVICE=cuda run check2 "$CHECK_S" python3 -m pytest -q -p no:cacheprovider tests/test_decoder_tp.py ;;
    comm2) comm 2 ;; comm4) comm 4 ;;
    steps2) steps 2 ;; steps4) steps 4 ;;
    fidelity2) fidelity 2 ;;
    *) say "unknown step $arg" ;;
  esac
done
grep -h "wrote\|passed\|failed\|Error\|error:" "$LOG" | tail -20
say "done; files: $(cd "$OUT" && ls | tr '\n' ' ')"
