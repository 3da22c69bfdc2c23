#!/usr/bin/env bash
# One device call (one H200, at most 540 s): long contexts, in three capped stages.
#   check    benchmarks/gpu_check.py --only long: Qwen3-8B-shaped decoder (random bf16), single prompts
#            of 1,000 / 8,192 / 9,000 / 16,384 / 32,768 tokens and the whole context (40,960 less the
#            output), alone and among other requests, CUDA graphs on and off, prefill_first and mixed;
#            greedy output against target-only greedy, within the noise measured for each checked
#            position (the reference computed whole, chunked as served, packed with the others)
#            -> $OUT/gpu_check_long.json  (CHECK_S, 100 s; its first run, before the noise, took 49 s;
#            the two extra computations are estimated at 10-20 s more)
#   profile  Qwen3-8B verify steps at 32,768 and 16,384 tokens of context a request and prefill chunks
#            (16-8,192 tokens, kinds none and block) after 24,576 and 32,768 cached tokens, added to
#            the shipped raw file (--resume: its points kept, only the new ones timed)
#            -> $OUT/raw_qwen3-8b.json  (PROFILE_S, 140 s of the profiler's own budget, 1 : 1.5)
#   fidelity the long-context fidelity cases (mc-long-light, mc-long-mid: Mooncake-style sessions,
#            prompts of 9,000-32,768 tokens) for dspark, mtp3 and none, max_model_len 40,960
#            -> $OUT/fidelity_long.tgz and fidelity_long.log  (the rest of BUDGET_S)
# Each stage runs under its own time limit, so a slow stage cannot starve the others; a stage
# left too little time is skipped and said so. The log is $OUT/visit.log; a summary ends it.
# Usage (repository root, on the device machine):
#   bash benchmarks/h200_long_visit.sh                  # all three stages
#   bash benchmarks/h200_long_visit.sh check fidelity   # some of them, in this order
#   DRY=1 OUT=/tmp/dry bash benchmarks/h200_long_visit.sh   # on a CPU: every stage's command
#       run small (tiny model check; the profiler built on a one-layer slice, timing nothing; the
#       cases read, nothing served) to catch a broken command before the device call
# Afterwards, in the repository (no GPU needed), with the call's files under RES and VISIT the
# next free profiles/h200/validation/real/visit<N>:
#   cp RES/gpu_check_long.json profiles/h200/decoder_long_check.json
#   cp RES/raw_qwen3-8b.json profiles/h200/raw/raw_qwen3-8b.json
#   cp RES/visit.log profiles/h200/raw/logs/long_visit_$(date -u +%F).log
#   python benchmarks/fit_profiles.py --models qwen3-8b    # refit, projections, docs/profiles.md held-out block
#   mkdir -p /tmp/fl VISIT && tar xzf RES/fidelity_long.tgz -C /tmp/fl && cp -r /tmp/fl/fidelity_long/. VISIT/
#   cp RES/fidelity_long.log VISIT/fidelity.log            # and VISIT/notes.json as visit16's (host seen or not)
#   python benchmarks/fidelity.py compare --real profiles/h200/validation/real/visit15 VISIT \
#       --replicate profiles/h200/validation/real/visit16   # every case re-simulated with the refitted profile
#   python benchmarks/doc_blocks.py write && python benchmarks/doc_blocks.py check
#   python benchmarks/golden.py make                        # in a commit of its own: the refit moves them
set -o pipefail
OUT=${OUT:-/tmp/out}
BUDGET_S=${BUDGET_S:-540}
CHECK_S=${CHECK_S:-100}
PROFILE_S=${PROFILE_S:-140}
START_S=40
STAGES=${*:-check profile fidelity}
source "$(dirname "$0")/visit_common.sh"
RAW=profiles/h200/raw/raw_qwen3-8b.json
if [ -n "$DRY" ]; then
  export TRITON_INTERPRET=1
  check_extra=(--tiny)
  profile_extra=(--device cpu --layers 1 --kv-tokens 4096)
  PROFILE_S=0; fidelity_extra=(--dry-run)
  say "dry run on the CPU: commands checked, nothing timed"
else
  check_extra=(); profile_extra=(); fidelity_extra=(--archive "$OUT/fidelity_long.tgz")
  say "start: $(nvidia-smi --query-gpu=name,uuid,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader 2>&1)"
fi
python3 -c "import torch, triton, dspark_sim.kernels.decoder; print('torch', torch.__version__, 'triton',
triton.__version__, torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'no GPU')" 2>&1 | tee -a "$LOG" || exit 1

for stage in $STAGES; do
  case "$stage" in
    check)
      START_S=30 run check "$CHECK_S" python3 benchmarks/gpu_check.py --only long --long-seconds "$CHECK_S" \
          --out "$OUT/gpu_check_long.json" "${check_extra[@]}" ;;
    profile)
      START_S=40 run profile "$PROFILE_S" python3 -m dspark_sim.profiling.cli --gpu h200 --model qwen3-8b --out "$OUT" \
          --part verify,prefill --resume "$RAW" --verify-contexts 32768,16384 --shares verify=1,prefill=1.5 \
          --prefill-cached 32768,24576 --prefill-chunks 16,64,256,512,1024,4096,8192 --prefill-kinds none,block \
          --prefill-max-total 40960 --prefill-idle 1 --reps 10 --max-seconds "$PROFILE_S" "${profile_extra[@]}" ;;
    fidelity)
      left=$((BUDGET_S - SECONDS - 15))  # the hard limit below ends the stage before the call's
      cases_s=$((left - 45 - 30))        # no case starts after this (a case takes up to ~35 s)
      [ -n "$DRY" ] && cases_s=60
      START_S=45 run fidelity "$cases_s" python3 benchmarks/fidelity.py run --out /tmp/fidelity_long \
          --only mc-long-light mc-long-mid --methods dspark mtp3 none --no-crosscheck \
          --max-seconds "$cases_s" "${fidelity_extra[@]}"
      grep "fidelity| " "$LOG" | sed 's/^  fidelity| //' > "$OUT/fidelity_long.log" ;;
    *) say "unknown stage $stage (check, profile, fidelity)"; exit 2 ;;
  esac
done

say "summary"
python3 - "$OUT" <<'EOF' 2>&1 | tee -a "$LOG"
import json, sys, tarfile
from pathlib import Path
out = Path(sys.argv[1])
check = out / "gpu_check_long.json"
if check.is_file():
    from dspark_sim.validation.long_prompts import FACTOR
    rows = json.loads(check.read_text())["rows"]

    def why(r):  # the departures outside the measured noise (or why the run did not serve)
        if "sequences" not in r:
            return r.get("skipped") or r.get("error") or "no noise recorded"
        return "; ".join(f"request {s['request']} token {d['index']}: margin {d['margin']} > {FACTOR:g} x noise {d['noise']}"
                         for s in r["sequences"] for d in s["divergences"] if not d["near_tie"]) or "output incomplete"
    ties = sum(1 for r in rows if r.get("ok") and not r.get("outputs_equal", True))
    noise = [x for r in rows for s in r.get("sequences", []) for x in s["noise"]]
    print(f"check: {sum(r['ok'] for r in rows)}/{len(rows)} runs ok ({ties} passed at near ties); noise at "
          f"{len(noise)} positions: max {max(noise, default=0)}; serving {sum(r.get('wall_s', 0) for r in rows):.1f} s, "
          f"checking {sum(r.get('check_s', 0) for r in rows):.1f} s")
    for r in rows:
        if not r["ok"]:
            print("  not ok:", r["case"] + ":", why(r))
for raw in sorted(out.glob("raw_*.json")):
    data = json.loads(raw.read_text())
    long_v = sum(1 for r in data.get("verify", []) if r.get("context", 0) >= 16384)
    long_p = sum(1 for r in data.get("prefill", []) if r.get("context", 0) >= 24576)
    print(f"profile: {raw.name}: {long_v} verify points at >= 16,384 tokens a request, {long_p} prefill points "
          f"after >= 24,576 cached; skipped {sum(len(v) for v in data['provenance'].get('skipped', {}).values())}")
tgz = out / "fidelity_long.tgz"
if tgz.is_file():
    with tarfile.open(tgz) as tar:
        served = sorted({Path(n).parts[1] for n in tar.getnames() if n.endswith("/requests.csv")})
    print(f"fidelity: {len(served)} cases served: {' '.join(served)}")
EOF
say "done; files: $(cd "$OUT" && ls | tr '\n' ' ')"
