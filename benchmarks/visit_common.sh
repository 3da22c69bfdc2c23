# Shared by the device-visit scripts (sourced): the package map, the log and the budgeted runner.
# Expects OUT, BUDGET_S and START_S; defines LOG, say and run.
export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0
mkdir -p "$OUT"
LOG="$OUT/visit.log"
# dspark_sim.kernels lives in kernels/: a package tree of links maps it without pip
SHIM=$(mktemp -d /tmp/dspark_shim.XXXXXX); mkdir -p "$SHIM/dspark_sim"
for f in dspark_sim/*; do ln -s "$PWD/$f" "$SHIM/dspark_sim/"; done
for d in kernels tuner profiles; do ln -s "$PWD/$d" "$SHIM/dspark_sim/$d"; done
export PYTHONPATH=$SHIM${PYTHONPATH:+:$PYTHONPATH} PYTHONSAFEPATH=1  # the repo root must not shadow it
say() { echo "[$(date -u +%H:%M:%S) +${SECONDS}s] $*" | tee -a "$LOG"; }

run() {  # run NAME SECONDS CMD...: CMD capped at SECONDS + START_S + 30, skipped if the budget is short
  local name=$1 secs=$2; shift 2
  local left=$((BUDGET_S - SECONDS))
  if [ "$left" -lt $((secs + START_S)) ]; then say "SKIPPED $name: needs $((secs + START_S)) s, $left s left"; return; fi
  say "begin $name"
  timeout --kill-after=10 $((secs + START_S + 30)) "$@" 2>&1 | sed "s/^/  $name| /" >> "$LOG"
  say "end $name: exit $?"
}
