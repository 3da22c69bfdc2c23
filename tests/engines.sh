#!/usr/bin/env bash
# The serving engines' released packages, for the export tests (tests/test_engines_configs.py, tests/test_engines_files.py); README command 2 runs it.
# Each wheel is fetched with pip (--no-deps: their dependency trees pull CUDA builds) and
# unpacked into .engines/<engine>/ without its compiled kernels and C/CUDA headers, which a
# CPU never loads (vLLM's are 700 MB of its 780); the modules their config code imports
# come with the project's [engines] extra.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
for spec in sglang==0.5.23 vllm==0.33.0; do
  name=${spec%%==*}
  if [ -f ".engines/$name/.installed-$spec" ]; then
    continue
  fi
  rm -rf ".engines/$name" ".engines/wheels/$name"
  "$PY" -m pip download --quiet --no-deps --dest ".engines/wheels/$name" "$spec"
  "$PY" - ".engines/wheels/$name" ".engines/$name" <<'PYEOF'
import sys, zipfile
from pathlib import Path

SKIP = (".so", ".hpp", ".h", ".cuh", ".cu", ".cubin", ".fatbin", ".a")
wheel = next(Path(sys.argv[1]).glob("*.whl"))
with zipfile.ZipFile(wheel) as z:
    keep = [i.filename for i in z.infolist() if not i.is_dir()
            and not any(i.filename.endswith(s) or f"{s}." in i.filename.rsplit("/", 1)[-1] for s in SKIP)
            and ("." in i.filename.rsplit("/", 1)[-1] or i.file_size < 1 << 20)]  # no bare binaries
    z.extractall(sys.argv[2], keep)
PYEOF
  rm -rf ".engines/wheels/$name"
  touch ".engines/$name/.installed-$spec"
done
rmdir .engines/wheels 2>/dev/null || true
