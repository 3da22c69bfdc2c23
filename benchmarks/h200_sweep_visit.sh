#!/usr/bin/env bash
# The load sweeps of the fidelity suite and the decoder's capacity, on one H200 (kind nvidia-h200),
# one part a device call, each within its cap:
#   sweepA     chat traffic under mixed and prefill_first, sessions under mixed: every level, every
#              method (python benchmarks/fidelity.py run --sweeps; about 465 s, cap 540 s)
#   sweepB     sessions under prefill_first, long prompts under mixed and prefill_first (about 470 s)
#   sweepL     long prompts alone, under mixed and prefill_first (about 470 s: sweepB's second half)
#   capacity   the decoder's capacity, bisection on the Poisson rate for two traces x three methods
#              (python benchmarks/decoder_capacity.py run, a process a method; CAP_METHODS picks them;
#              BUDGET_S 400 by default)
#   dry        every part's plumbing on the CPU with a tiny model (no GPU; minutes)
# Usage (repository root, on the device machine):
#   bash benchmarks/h200_sweep_visit.sh sweepA        # call 1
#   bash benchmarks/h200_sweep_visit.sh sweepB        # call 2
#   bash benchmarks/h200_sweep_visit.sh capacity      # call 3
# BUDGET_S: the call's seconds (540 for a sweep part, 400 for capacity). A sweep part serves whole
# sweeps only (dspark_sim/validation/budget.py): one that would not finish for every method is
# skipped, and the archive, rewritten after every sweep, keeps what a cut-off call served.
# Writes into $OUT, per part: visit_PART.log, gpu_PART.txt, PART.log with PART.tgz (the run
# directories) or capacity.json with capacity_runs.tgz (each probe's run record).
# Afterwards, in the repository (no GPU), with every call's files in one folder F (they do not collide):
#   python benchmarks/fidelity.py import-visit --src F --visit visitNN --parts sweepA sweepB capacity \
#       --command "<the calls as run>"
#     (profiles/h200/validation/real/visitNN/: the archives as they came, logs, notes.json; parts
#      served on different GPUs are different visits: import them apart)
#   python benchmarks/fidelity.py compare --sweeps --real profiles/h200/validation/real/visitNN
#     (profiles/h200/validation/sweep_errors.json and docs/validation_sweeps.md)
#   python benchmarks/decoder_capacity.py page --real profiles/h200/validation/real/visitNN/capacity.json
#     (docs/bench/decoder_capacity.json and .md)
#   python benchmarks/doc_blocks.py check
set -o pipefail
OUT=${OUT:-/tmp/out}
part=${1:?usage: h200_sweep_visit.sh sweepA|sweepB|sweepL|capacity|dry}
case "$part" in capacity) BUDGET_S=${BUDGET_S:-400} ;; dry) BUDGET_S=${BUDGET_S:-3000} ;; *) BUDGET_S=${BUDGET_S:-540} ;; esac
START_S=15  # the interpreter, torch and the decoder's modules before the run's clock starts
source "$(dirname "$0")/visit_common.sh"
LOG="$OUT/visit_$part.log"
RESERVE_S=25  # the interpreter's start, the last archive and this script's own lines
limit=$((BUDGET_S - START_S - RESERVE_S))
say "start $part: $(nvidia-smi --query-gpu=index,name,uuid,driver_version,clocks.sm --format=csv,noheader 2>&1 | tr '\n' ';')"
nvidia-smi --query-gpu=name,uuid,driver_version,memory.total --format=csv > "$OUT/gpu_$part.txt" 2>&1 || true

quiet() { grep -v "UserWarning\|self.model = " || true; }  # the acceptance presets' fallback notes

sweep() {  # sweep NAME ARGS...: fidelity.py run --sweeps ARGS (--only ...), whole sweeps within the limit
  local name=$1; shift
  rm -rf "/tmp/$name"
  timeout --kill-after=5 $((BUDGET_S - 10)) python3 benchmarks/fidelity.py run --sweeps "$@" --out "/tmp/$name" \
      --archive "$OUT/$name.tgz" --max-seconds "$limit" --no-crosscheck 2>&1 | tee "$OUT/$name.log" | quiet
  say "end $name: exit ${PIPESTATUS[0]}"
}

capacity() {  # capacity ARGS...: decoder_capacity.py run ARGS, one process a method of CAP_METHODS (a
  # decoder's freed KV stays cached in its process: the next method's warm-up found no pages, visit19),
  # each within its share of the limit (DSpark's searches take longest: 4 shares to the others' 3),
  # merged into capacity.json
  rm -rf /tmp/capacity_runs; local m share parts=() weights=0
  for m in $CAP_METHODS; do weights=$((weights + $([ "$m" = dspark ] && echo 4 || echo 3))); done
  for m in $CAP_METHODS; do
    share=$((limit * $([ "$m" = dspark ] && echo 4 || echo 3) / weights - 20))
    timeout --kill-after=5 $((share + 40)) python3 benchmarks/decoder_capacity.py run --out "$OUT/capacity_$m.json" \
        --records "/tmp/capacity_runs/$m" --budget-s "$share" --methods "$m" "$@" 2>&1 | tee -a "$OUT/capacity.log" | quiet
    say "end capacity $m: exit ${PIPESTATUS[0]}"
    [ -f "$OUT/capacity_$m.json" ] && parts+=("$OUT/capacity_$m.json")
  done
  [ ${#parts[@]} -gt 0 ] && python3 benchmarks/decoder_capacity.py merge --out "$OUT/capacity.json" "${parts[@]}" \
      && rm -f "${parts[@]}"
  tar -czf "$OUT/capacity_runs.tgz" -C /tmp capacity_runs 2>/dev/null || true
}

case "$part" in
  sweepA) sweep sweepA --only sw-chat sw-sess:mixed ;;
  sweepB) sweep sweepB --only sw-sess:prefill_first sw-long ;;
  sweepL) sweep sweepL --only sw-long ;;
  capacity) CAP_METHODS=${CAP_METHODS:-dspark mtp3 none} capacity ;;
  dry) limit=1000; sweep sweepA --only sw-chat:mixed sw-sess:mixed --methods dspark none --dry-run
       limit=160; CAP_METHODS="dspark none" capacity --traces cap-chat --dry-run ;;
  *) say "unknown part $part (sweepA, sweepB, sweepL, capacity, dry)"; exit 2 ;;
esac
say "done; files: $(cd "$OUT" && ls | tr '\n' ' ')"
