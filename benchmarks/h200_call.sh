#!/usr/bin/env bash
# One device call: GPU checks, the decoder table (issue 6) and profiles (issue 7).
# Usage (on the device machine, repo root): bash benchmarks/h200_call.sh "qwen3-8b:150" [bench]
# Each argument model:seconds profiles one model; "bench" also runs the decoder table first.
set -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
# dspark_sim.kernels lives in kernels/: a shim package tree maps it without pip.
SHIM=/tmp/dspark_shim; rm -rf $SHIM; mkdir -p $SHIM; cp -r dspark_sim $SHIM/
for d in kernels tuner profiles; do ln -s "$PWD/$d" $SHIM/dspark_sim/$d; done
export PYTHONPATH=$SHIM${PYTHONPATH:+:$PYTHONPATH} PYTHONSAFEPATH=1  # the repo root must not shadow the shim
python3 -c "import dspark_sim.kernels.decoder, torch; print('import ok', torch.__version__, torch.cuda.get_device_name(0))" || exit 1
for arg in "$@"; do
  case "$arg" in
    check) python3 benchmarks/gpu_check.py --out "$OUT/gpu_check.json" 2>&1 | tee "$OUT/check.log" ;;
    bench) python3 benchmarks/bench_decoder.py --run --out "$OUT/decoder_bench.json" --max-seconds "${BENCH_S:-240}" 2>&1 | tee "$OUT/bench.log" | grep -v '^{' ;;
    *:*) m=${arg%%:*}; s=${arg##*:}
         python3 -m dspark_sim.kernels.profiler --gpu h200 --model "$m" --out "$OUT" --max-seconds "$s" > "$OUT/profile_$m.log" 2>&1
         tail -3 "$OUT/profile_$m.log" ;;
  esac
done
python3 benchmarks/bench_decoder.py --json "$OUT/decoder_bench.json" 2>/dev/null | tail -40 || true
