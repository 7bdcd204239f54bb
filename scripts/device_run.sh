#!/usr/bin/env bash
# One device call for the CUDA backend (run from the repo root on the GPU machine, with .whl carried):
#   bash scripts/device_run.sh jit     # JIT build + correctness + timing + sanitizers (no build stage)
#   bash scripts/device_run.sh full    # build stage + kernels load + pytest + sanitizers + benchmarks.run
# Logs and results go to $OUT. See gemm/cuda/NOTES.md.
set -u -o pipefail
mode=${1:-jit}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  > /tmp/pip.log 2>&1 || { cat /tmp/pip.log; exit 1; }
export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
export TORCH_CUDA_ARCH_LIST=9.0a MAX_JOBS=16 PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv > "$OUT/gpu.txt" 2>&1
rc=0
if [ "$mode" = jit ]; then
  prebuilt=()
  [ -d .cache/cuda_prebuilt ] && prebuilt=(--prebuilt .cache/cuda_prebuilt)
  python3 tests/cuda/device_check.py --out "$OUT" "${prebuilt[@]}" --build-only 2>&1 | tail -n 30 || exit 1
  timeout 120 python3 tests/cuda/probe.py crash 2>&1 | tee -a "$OUT/probes.log" | tail -n 12
  if grep -q "^1x1x128 natural: rc=-11\|^1x1x128 natural: rc=139" "$OUT/probes.log"; then
    timeout 120 cuda-gdb -batch -ex run -ex bt --args python3 tests/cuda/probe.py one 1 1 128 natural \
      > /tmp/gdb.log 2>&1; grep -E "^#[0-9]+" /tmp/gdb.log | head -n 25 | tee -a "$OUT/probes.log"
  fi
  timeout 120 python3 tests/cuda/probe.py precision 2>&1 | tee -a "$OUT/probes.log" | tail -n 20
  python3 tests/cuda/device_check.py --out "$OUT" "${prebuilt[@]}" --no-extra 2>&1 | grep -v "^FAIL" | tail -n 60 || rc=1
  for tool in memcheck racecheck; do
    n=4; [ $tool = racecheck ] && n=2
    timeout 150 compute-sanitizer --tool $tool --print-limit 20 python3 tests/cuda/sanitize_calls.py "${prebuilt[@]}" \
      --shapes $n > "$OUT/sanitizer_$tool.log" 2>&1
    echo "sanitizer $tool exit=$?"; tail -n 4 "$OUT/sanitizer_$tool.log"
  done
else
  python3 -m scripts.build 2>&1 | tee "$OUT/build.log" | tail -n 15 || rc=1
  python3 -m pytest -q -x tests/kernel tests/cuda 2>&1 | tee "$OUT/pytest.log" | tail -n 25 || rc=1
  for tool in memcheck racecheck; do
    n=5; [ $tool = racecheck ] && n=3
    timeout 150 compute-sanitizer --tool $tool --print-limit 20 python3 tests/cuda/sanitize_calls.py --kernel-dir build \
      --shapes $n > "$OUT/sanitizer_$tool.log" 2>&1
    echo "sanitizer $tool exit=$?"; tail -n 4 "$OUT/sanitizer_$tool.log"
  done
  python3 -m benchmarks.run --out "$OUT/h200" 2>&1 | tee "$OUT/bench.log" | tail -n 40 || rc=1
fi
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv >> "$OUT/gpu.txt" 2>&1
exit $rc
