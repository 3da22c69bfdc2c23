#!/usr/bin/env bash
# One device call (one H200, at most 540 s): the served conditions the profiler's steps lack.
#   layout   benchmarks/served_steps.py --part layout: whole decode steps (none, MTP-3, DSpark) over
#            long-tailed contexts with KV pages in order and scattered over the pool, and eager
#            steps (decode rows beside a prompt chunk) likewise -> $OUT/served_layout.json (200 s)
#   after    benchmarks/served_steps.py --part after: a decode step right after a prompt step
#            against one right after a decode step, and after a second of prompt steps back to
#            back against after a second idle (the power limit) -> $OUT/served_after.json (200 s)
#   fp8      tests/test_decoder_moe_fp8.py on the GPU (60 s)
#   after_mixed  (not in the default set) --part after --hold-mixed: the decode step after a second of
#            mixed steps (its own rows beside a 4096-token chunk, as served) and those mixed steps' own
#            time hot against cool -> $OUT/served_after_mixed.json (240 s)
#   draft    (not in the default set) --part draft: the profiler's drafter steps (MTP-3, DSpark) replayed
#            back to back against each after a 512 MiB write has overwritten the L2, as the target's
#            forward leaves it in a served step -> $OUT/served_draft.json (150 s)
#   spec_mixed  (not in the default set: a second call) benchmarks/mixed_steps.py --method dspark
#            and --method mtp3: steps with a prompt chunk beside decode rows as the decoder serves
#            those methods, drafter included -> $OUT/spec_mixed_{dspark,mtp3}.json (2 x 150 s)
# Usage (repository root, on the device machine):
#   bash benchmarks/served_visit.sh                # all three, in this order
#   bash benchmarks/served_visit.sh after fp8      # some of them
# Afterwards (no GPU): merge the points into profiles/h200/raw/served_qwen3-8b.json beside the
# shared-prefix and eager points, and read the tables with
#   python benchmarks/served_steps.py --json RES/served_layout.json
set -u
: "${OUT:=/tmp/served_visit}" "${BUDGET_S:=540}" "${START_S:=15}"
source benchmarks/visit_common.sh
export PYTHONPATH=$PYTHONPATH:$PWD/benchmarks
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.sm,power.draw --format=csv > "$OUT/gpu.txt" 2>&1
for stage in "${@:-layout after fp8}"; do
  for s in $stage; do
    case $s in
      layout) run layout 200 python3 benchmarks/served_steps.py --run --part layout --budget-s 180 --out "$OUT/served_layout.json" ;;
      after) run after 200 python3 benchmarks/served_steps.py --run --part after --budget-s 170 --out "$OUT/served_after.json" ;;
      after_mixed) run after_mixed 240 python3 benchmarks/served_steps.py --run --part after --hold-mixed --budget-s 200 --out "$OUT/served_after_mixed.json" ;;
      draft) run draft 150 python3 benchmarks/served_steps.py --run --part draft --budget-s 130 --out "$OUT/served_draft.json" ;;
      fp8) run fp8 60 python3 -m pytest -q tests/test_decoder_moe_fp8.py -p no:cacheprovider ;;
      spec_mixed) for m in dspark mtp3; do
          run "mixed_$m" 150 python3 benchmarks/mixed_steps.py --run --method "$m" --budget-s 120 --out "$OUT/spec_mixed_$m.json"
        done ;;
      *) say "unknown stage $s (layout, after, after_mixed, draft, fp8, spec_mixed)"; exit 2 ;;
    esac
  done
done
say "done"
