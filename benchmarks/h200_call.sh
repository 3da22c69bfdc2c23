#!/usr/bin/env bash
# One device call: GPU checks, the decoder table (issue 6), profiles (issue 7), fidelity runs (8).
# Usage (on the device machine, repo root):
#   bash benchmarks/h200_call.sh check bench "qwen3-32b:260" "qwen3-8b:80:chain,prefill,step:resume:prefill" fidelity
# model:seconds[:parts[:resume[:replace]]] profiles one model (parts: the profiler's --part;
# "resume" keeps the points of the model's raw file ($OUT/raw_<model>.json when this call
# wrote one, else profiles/h200/raw/raw_<model>.json), times the missing ones and whole steps
# without graphs too, "resume-graphs" the same without eager steps, "add" times the parts
# again and keeps the old points beside them (a second process, pooled); replace: parts
# re-timed from scratch);
# "bench" runs the decoder table, "bench-dspark" its DSpark rows only (SPS table from the
# profile), "fidelity" the decoder on trace slices (benchmarks/fidelity.py), "targets" the
# decoder's speed targets (benchmarks/bench_targets.py), "sglang" our kernels beside
# SGLang's (benchmarks/bench_vs_sglang.py; its wheel carried in .sglang/).
set -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
# dspark_sim.kernels lives in kernels/: a shim package tree maps it without pip.
SHIM=/tmp/dspark_shim; rm -rf $SHIM; mkdir -p $SHIM; cp -r dspark_sim $SHIM/
for d in kernels tuner profiles; do ln -s "$PWD/$d" $SHIM/dspark_sim/$d; done
# the repo root must not shadow the shim; benchmarks/ is named (the scripts import their shared modules)
export PYTHONPATH=$SHIM:$PWD/benchmarks${PYTHONPATH:+:$PYTHONPATH} PYTHONSAFEPATH=1
python3 -c "import dspark_sim.kernels.decoder, torch; print('import ok', torch.__version__, torch.cuda.get_device_name(0))" || exit 1
for arg in "$@"; do
  case "$arg" in
    check) python3 benchmarks/gpu_check.py --out "$OUT/gpu_check.json" --only "${CHECK_ONLY:-attention,decoder,prefix,kernels}" 2>&1 | tee "$OUT/check.log" ;;
    bench) python3 benchmarks/bench_decoder.py --run --out "$OUT/decoder_bench.json" --max-seconds "${BENCH_S:-240}" 2>&1 | tee "$OUT/bench.log" | grep -v '^{' ;;
    fidelity) python3 benchmarks/fidelity.py run --out /tmp/fidelity --archive "$OUT/fidelity.tgz" --max-seconds "${FIDELITY_S:-300}" ${FIDELITY_ARGS:-} 2>&1 | tee "$OUT/fidelity.log" | tail -30 ;;
    targets) python3 benchmarks/bench_targets.py --run --out "$OUT/targets.json" --max-seconds "${TARGETS_S:-240}" 2>&1 | tee "$OUT/targets.log" | grep -v '^\[' ;;
    sglang) python3 benchmarks/bench_vs_sglang.py --run --out "$OUT/vs_sglang.json" --budget-s "${SGLANG_S:-150}" --sections "${SGLANG_SECTIONS:-schedule,accept}" 2>&1 | tee "$OUT/vs_sglang.log" | tail -40 ;;
    bench-dspark) python3 benchmarks/bench_decoder.py --run --methods dspark-full dspark --out "$OUT/decoder_bench_dspark.json" --max-seconds "${BENCH_S:-120}" 2>&1 | tee "$OUT/bench.log" | grep -v '^{' ;;
    *:*) IFS=: read -r m s parts resume replace <<< "$arg"
         extra=(--part "${parts:-all}")
         src="$OUT/raw_$m.json"; [ -f "$src" ] || src="profiles/h200/raw/raw_$m.json"
         [ "$resume" = resume ] && extra+=(--resume "$src" --eager-steps)
         [ "$resume" = resume-graphs ] && extra+=(--resume "$src")
         [ "$resume" = add ] && extra+=(--resume "$src" --add "$parts")
         [ -n "$replace" ] && extra+=(--replace "$replace")
         python3 -m dspark_sim.profiling.cli --gpu h200 --model "$m" --out "$OUT" --max-seconds "$s" "${extra[@]}" >> "$OUT/profile.log" 2>&1
         tail -3 "$OUT/profile.log" ;;
  esac
done
python3 benchmarks/bench_decoder.py --json "$OUT/decoder_bench.json" 2>/dev/null | tail -40 || true
