#!/usr/bin/env bash
# One device visit for the tuner's pruned-against-unpruned comparison on many cores (CPU work
# alone; the GPU idles): a command of dspark_sim/reports/registry.py (COMMAND, default
# PRUNING_OVERLOAD_COMMAND), cut at BUDGET_S seconds. The studies live in the command's
# --storage folder (bench.db); carry that folder (and .whl, the wheels simpy, optuna and their
# needs) and a second visit resumes where the first stopped. Usage, on the device machine in
# the repo root:
#   COMMIT=<sent revision> BUDGET_S=540 [COMMAND=PRUNING_BUDGET_COMMAND] bash benchmarks/tune_visit.sh
# (TUNE_CMD=... runs another bench_tune.py command: a small one to try the visit out.)
# Back under $OUT: the studies' database, the figures' JSON and docs/tuning.md once finished,
# and the log.
set -o pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1
BUDGET_S=${BUDGET_S:-540}
source benchmarks/visit_common.sh
export PYTHONPATH=$PYTHONPATH:$PWD/benchmarks
CMD=${TUNE_CMD:-$(python3 -c "from dspark_sim.reports import registry; print(registry.${COMMAND:-PRUNING_OVERLOAD_COMMAND})")} || exit 1
STORE=$(sed -E 's/.*--storage ([^ ]+).*/\1/' <<< "$CMD"); TAG=$(sed -E 's/.*--markdown [^ ]+ ([^ ]+).*/\1/' <<< "$CMD")
say "cores $(nproc --all); $(python3 -c 'import numpy, scipy, simpy, optuna; print(numpy.__version__, scipy.__version__, simpy.__version__, optuna.__version__)')"
say "begin: $CMD"
# the recorded command says python; here it is python3. timeout signals the whole process group,
# so dspark-tune stops its workers, and every finished trial is already committed
timeout --kill-after=20 "$BUDGET_S" bash -c "${CMD/#python /python3 }" 2>&1 | tee -a "$LOG"
rc=$?
say "end: exit $rc"
mkdir -p "$OUT/db"
cp "$STORE"/bench.db* "$OUT/db/"
if [ "$rc" = 0 ]; then
  cp "docs/bench/tune_$TAG.json" docs/tuning.md "$OUT/"
fi
