#!/usr/bin/env bash
# One device call for the CUDA backend (run from the repo root on the GPU machine, with .whl carried):
#   bash scripts/device_run.sh jit     # JIT build + correctness + timing + sanitizers (no build stage)
#   bash scripts/device_run.sh full    # build stage + kernels load + pytest + benchmarks.run + benchmarks.clocks
#                                      # + sanitizers (+ benchmarks.precision unless SKIP_PRECISION=1)
#   bash scripts/device_run.sh study   # build stage + benchmarks.precision + benchmarks.run + benchmarks.clocks (no tests)
#   bash scripts/device_run.sh bench   # full without the sanitizers (SKIP_CLOCKS=1: without benchmarks.clocks)
#   bash scripts/device_run.sh test    # build stage + pytest (tests/kernel, tests/cuda) only
#   bash scripts/device_run.sh check   # test + sanitizers + Nsight Compute counters (PROFILE_SHAPE)
#   bash scripts/device_run.sh verify  # test + sanitizers
#   bash scripts/device_run.sh sanitize  # build stage + compute-sanitizer (memcheck, racecheck) only
#   bash scripts/device_run.sh split   # JIT build + compute-sanitizer on split tails forced where
#                                      # pick_tuning never puts them (run 45's calls, SPLIT_SPECS), and
#                                      # racecheck on the 128x192 split tail with the overlapped store
#   bash scripts/device_run.sh sweep   # JIT build once, then tests/cuda/config_sweep.py (SWEEP_VARIANTS,
#                                      # SWEEP_SHAPES, SWEEP_ROUNDS); .cache/cuda_prebuilt/*.o if carried
#                                      # (linked as they are: carry them only if built from these sources,
#                                      # by tests/cuda/prebuild.py)
#   bash scripts/device_run.sh fused   # JIT build + the fused seed kernel (Tuning.seed_fused): fp32 checks,
#                                      # memcheck, racecheck where its stage ring wraps, sweep pick,spick,sfused
#   bash scripts/device_run.sh seeda   # JIT build + the seed layout's a read as it is (GemmArgs::seed_a): fp32
#                                      # checks per configuration (SEEDA_CHECKS=0: none; SEEDA_SANITIZE=1:
#                                      # memcheck and racecheck), then the sweep pick,spick,sprep,sraw
#   bash scripts/device_run.sh probe   # JIT build with -DGEMM_SEED_A_EXPERIMENT: the staged form's fp32 checks
#                                      # and sanitizers (PROBE_NO_SANITIZE=1: none), then the seed-A kernel,
#                                      # its timing-only probes (SeedProbe) and its staged form beside the
#                                      # natural kernel, shape by shape (PROBE_SPECS), the quantizer's
#                                      # experiment forms, then Nsight Compute on the seed-A forms
#                                      # (PROBE_NCU_SHAPE, PROBE_NCU_BASE)
# Logs and results go to $OUT. See gemm/cuda/NOTES.md.
# .whl (gitignored, carried) holds the wheels the device lacks, for its Python 3.12, filled here with
#   pip download --no-deps --python-version 3.12 --only-binary=:all: -d .whl \
#     -r requirements/build.txt -r requirements/cuda-headers.txt tomlkit
set -u -o pipefail
mode=${1:-jit}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  > /tmp/pip.log 2>&1 || { cat /tmp/pip.log; exit 1; }
export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
export TORCH_CUDA_ARCH_LIST=9.0a MAX_JOBS=16 PYTHONUNBUFFERED=1
# The image's CXX=/opt/gcc/bin/g++ builds extensions that segfault when a C++ exception is thrown
# (the process loads the system libstdc++; tests/cuda/throw_probe.py shows it): use the system g++.
[ -x /usr/bin/g++ ] && export CXX=/usr/bin/g++
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv > "$OUT/gpu.txt" 2>&1
rc=0
# compute-sanitizer on the built variant: shapes 1, 6 and 7 take the decode kernel (one K slice, 14, and
# 2 slices of 16 K blocks, round its stage ring twice), shape 2 the K-sliced path, shapes 3-5 the
# hand-written kernel (128x192, 192x128 and 128x128 tiles), shape 8 its 128x128 form with a split tail,
# shape 9 its 192x144 form, shape 10 (memcheck only) its 128x192 form with a split tail and the overlapped
# store, shape 11 (memcheck only) its 128x96 form with two batch accumulators, shape 12 (memcheck only)
# 128x128 tiles with partial M and N tiles of 112. Both tools also take 256x1024x1024 and 96x7168x2048,
# where the fused seed kernel's stage ring wraps (8 and 16 K blocks on 4 stages; pick_seed_fused takes it
# there, through the op while kSeedFusedOnTheOpsPath; run 121's racecheck report came only once it
# wrapped). And 5776x512x4096 and 3008x960x1536, where the op's 192x128 and 128x192 kernels read the seed
# layout's a as it is (GemmArgs::seed_a; the first with two raw A boxes wholly past M in its last tile).
# (The split mode's default specs below take the first 5 and 7: the shapes before the 192x144
# one.) SANITIZE_SHAPES="MxNxK ...":
# those shapes instead, e.g. racecheck on shapes 10-11 in a call of its own.
# run_sanitizer TIMEOUT TOOL LOG ARGS...: tests/cuda/sanitize_calls.py ARGS under compute-sanitizer; an
# error or a wrong result fails the call (rc=1).
run_sanitizer() {
  local limit=$1 tool=$2 log=$3; shift 3
  timeout "$limit" compute-sanitizer --tool "$tool" --error-exitcode 1 --print-limit 20 \
    python3 tests/cuda/sanitize_calls.py "$@" > "$log" 2>&1
  local st=$?; echo "sanitizer $tool $* exit=$st"; tail -n 3 "$log"; [ $st -eq 0 ] || rc=1
}
sanitize() {
  # SANITIZE_TOOLS: a subset, when racecheck would not fit in the call's time with the rest (it takes
  # 200-320 s; run it in its own call then).
  for tool in ${SANITIZE_TOOLS:-memcheck racecheck}; do
    # racecheck takes the 10th's split tail in split mode (within its own timeout); it needs more than 200 s
    # for its 9 shapes since the 192x144 one joined (run 100 stopped after 8, no hazard)
    n=12 limit=240; [ "$tool" = racecheck ] && n=9 limit=380
    sel=(--shapes "$n" --shape 256x1024x1024 --shape 96x7168x2048 --shape 5776x512x4096 --shape 3008x960x1536)
    if [ -n "${SANITIZE_SHAPES:-}" ]; then sel=(); for s in $SANITIZE_SHAPES; do sel+=(--shape "$s"); done; fi
    run_sanitizer "$limit" "$tool" "$OUT/sanitizer_$tool.log" --kernel-dir build "${sel[@]}"
  done
}
# sweep TIMEOUT ROUNDS VARIANTS: tests/cuda/config_sweep.py into $OUT/sweep, on SWEEP_SHAPES (default the
# challenge shapes and 8192^3); SWEEP_ROUNDS and SWEEP_VARIANTS override the mode's defaults.
sweep() {
  timeout "$1" python3 tests/cuda/config_sweep.py --out "$OUT/sweep" --rounds "${SWEEP_ROUNDS:-$2}" \
    --variants "${SWEEP_VARIANTS:-$3}" --shapes "${SWEEP_SHAPES:-challenge,8192x8192x8192}" \
    > "$OUT/sweep.log" 2>&1 || rc=1
  tail -n 26 "$OUT/sweep.log" | cut -c1-200
}
# Every JIT load (tests/cuda/device_check.load_jit) links .cache/cuda_prebuilt/*.o when carried, so all
# tools of one call share one build: a tool that built its own under a timeout could leave torch's build
# lock behind, and every later load waits on it.
# (GEMM_CUDA_PREBUILT set by the caller picks another directory, e.g. .cache/cuda_prebuilt_dsmem.)
if [ -z "${GEMM_CUDA_PREBUILT:-}" ] && [ -d .cache/cuda_prebuilt ]; then export GEMM_CUDA_PREBUILT=.cache/cuda_prebuilt; fi
if [ "$mode" = jit ]; then
  python3 tests/cuda/device_check.py --out "$OUT" --build-only 2>&1 | tail -n 30 || exit 1
  timeout 120 python3 tests/cuda/probe.py crash 2>&1 | tee -a "$OUT/probes.log" | tail -n 12
  if grep -q "^1x1x128 natural: rc=-11\|^1x1x128 natural: rc=139" "$OUT/probes.log"; then
    timeout 120 cuda-gdb -batch -ex run -ex bt --args python3 tests/cuda/probe.py one 1 1 128 natural \
      > /tmp/gdb.log 2>&1; grep -E "^#[0-9]+" /tmp/gdb.log | head -n 25 | tee -a "$OUT/probes.log"
  fi
  timeout 120 python3 tests/cuda/probe.py precision 2>&1 | tee -a "$OUT/probes.log" | tail -n 20
  python3 tests/cuda/device_check.py --out "$OUT" --no-extra 2>&1 | grep -v "^FAIL" | tail -n 60 || rc=1
  for tool in memcheck racecheck; do
    n=4; [ $tool = racecheck ] && n=2
    run_sanitizer 150 $tool "$OUT/sanitizer_$tool.log" --shapes $n
  done
elif [ "$mode" = split ]; then
  # 128x192 in up to 4 pieces (a wave of whole tiles before the split one, tiles straddling two w_scale
  # blocks, rows past M) and 192x128 in 3 (a warpgroup without rows): tests/cuda/sanitize_calls.py shapes.
  python3 -c "from tests.cuda.device_check import load_jit; load_jit()" 2>&1 | tail -n 5 || exit 1
  # SPLIT_SPECS ("tool cfg splits shapes;...", default: run 45's three) may be set empty to skip them.
  IFS=';' read -r -a specs <<< "${SPLIT_SPECS-memcheck 7 4 7;racecheck 7 4 5;memcheck 8 3 4}"
  for spec in "${specs[@]}"; do
    read -r tool cfg splits n <<< "$spec"
    run_sanitizer 200 "$tool" "$OUT/sanitizer_${tool}_c${cfg}p${splits}.log" --cfg "$cfg" --splits "$splits" --shapes "$n"
  done
  # 128x192 past a wave with its last 44 tiles in 3 K pieces and the store overlapped (what pick_tuning
  # gives 1000x4200x4096), also at K = 1024 (2-3 K blocks a piece).
  run_sanitizer 300 racecheck "$OUT/sanitizer_racecheck_c7p8o1.log" --cfg 7 --splits 8 --overlap \
    --shape 1000x4200x1024 --shape 1000x4200x4096
elif [ "$mode" = fused ]; then
  # The fused seed kernel (Tuning.seed_fused), JIT-built: every call checked against the fp32 reference
  # (FUSED_SHAPES), memcheck on them, racecheck on the first and where its stage ring wraps; then the
  # sweep below (SWEEP_VARIANTS, ...).
  python3 -c "from tests.cuda.device_check import load_jit; load_jit()" 2>&1 | tail -n 5 || exit 1
  shapes=(); for s in ${FUSED_SHAPES:-1008x1520x384 128x128x128 256x2304x4096 1024x1536x7168}; do shapes+=(--shape "$s"); done
  timeout 120 python3 tests/cuda/sanitize_calls.py --seed-fused "${shapes[@]}" > "$OUT/fused_smoke.log" 2>&1 || rc=1
  tail -n 12 "$OUT/fused_smoke.log"
  [ $rc -eq 0 ] || exit $rc
  run_sanitizer 200 memcheck "$OUT/sanitizer_memcheck_fused.log" --seed-fused "${shapes[@]}"
  run_sanitizer 240 racecheck "$OUT/sanitizer_racecheck_fused.log" --seed-fused "${shapes[@]:0:2}" \
    --shape 256x1024x1024 --shape 96x7168x2048
  sweep "${SWEEP_TIMEOUT:-300}" 2 pick,spick,sfused
elif [ "$mode" = seeda ]; then
  # Each hand-written configuration that can read a as it is (seed_a_config), forced, on shapes with partial
  # tiles, a split tail and a stage ring that wraps: every call checked against the fp32 reference (both
  # layouts; the seed one with a read as it is wherever M % 16 == 0).
  python3 -c "from tests.cuda.device_check import load_jit; load_jit()" 2>&1 | tail -n 5 || exit 1
  specs=("6 1 1008x1520x384 256x1024x1024 1152x2048x256" "6 3 1024x576x7168 256x2304x4096"
         "7 1 1008x3072x1536 1024x3072x1536 6144x1536x2560" "7 8 1008x4200x1024 1008x4208x4096"
         "8 1 6144x512x1024 1152x2048x256 5776x512x4096")
  [ "${SEEDA_CHECKS:-1}" = 0 ] && specs=()  # SEEDA_CHECKS=0: straight to the sanitizers and the sweep
  for spec in "${specs[@]}"; do
    read -r cfg splits shapes <<< "$spec"
    sel=(); for s in $shapes; do sel+=(--shape "$s"); done
    timeout 150 python3 tests/cuda/sanitize_calls.py --cfg "$cfg" --splits "$splits" "${sel[@]}" \
      > "$OUT/seeda_c${cfg}p${splits}.log" 2>&1 || rc=1
    echo "seed_a cfg $cfg splits $splits: rc=$rc"; tail -n 4 "$OUT/seeda_c${cfg}p${splits}.log"
  done
  if [ -n "${SEEDA_SANITIZE:-}" ]; then
    run_sanitizer 200 memcheck "$OUT/sanitizer_memcheck_seeda.log" --cfg 8 --shape 1152x2048x256 --shape 5776x512x1024
    run_sanitizer 200 memcheck "$OUT/sanitizer_memcheck_seeda7.log" --cfg 7 --splits 8 --shape 1008x4200x1024 --shape 1008x3072x1536
    run_sanitizer 240 racecheck "$OUT/sanitizer_racecheck_seeda.log" --cfg 6 --shape 256x1024x1024 --shape 1008x1520x384
  fi
  # The sweep checks every variant's first call too: run it whatever the checks above said.
  sweep "${SWEEP_TIMEOUT:-360}" 2 pick,spick,sprep,sraw
elif [ "$mode" = probe ]; then
  # Where the seed-A kernel's 1.11-1.2x per K block goes (gemm/cuda/NOTES.md, "Left to do"): on natural calls,
  # x's bytes read as if they were a (K, M), the natural kernel (<base>), the seed-A kernel as shipped (q1)
  # and its probes (q2: register A without the loads, q3: the loads with A from shared memory, q4: neither,
  # q5: the loads written back K-major for an SS wgmma, the staged form's work; q6: the staged form itself,
  # configurations 6 and 7 only: 192x128 tiles refuse it).
  # The probes' results are wrong by design: each sweep lists them as inaccurate and exits 1 (not counted).
  # Then, with time left, the quantizer's experiment forms (tests/cuda/quant_sweep.py).
  # Objects built here from these sources with both macros: .cache/cuda_prebuilt_probe (tests/cuda/prebuild.py
  # .cache/cuda_prebuilt_probe -DGEMM_SEED_A_EXPERIMENT -DGEMM_QUANT_ROUNDS_EXPERIMENT); else the device builds.
  if [ -d .cache/cuda_prebuilt_probe ]; then export GEMM_CUDA_PREBUILT=.cache/cuda_prebuilt_probe
  else unset GEMM_CUDA_PREBUILT; export GEMM_CUDA_EXTRA_FLAGS="-DGEMM_SEED_A_EXPERIMENT -DGEMM_QUANT_ROUNDS_EXPERIMENT"; fi
  python3 -c "from tests.cuda.device_check import load_jit; load_jit()" 2>&1 | tail -n 5 || exit 1
  # The staged form (Tuning.seed_a = 2, correct results) on seed calls first: fp32 checks per configuration
  # (partial tiles, a wrapping ring, split tails, the overlapped store), then memcheck and racecheck. Its two
  # warpgroup barriers a block guard the tile between the warps' stmatrix and wgmma's reads, which racecheck
  # may not track (wgmma reads through the async proxy): a missing barrier would more likely show as an
  # intermittent fp32 failure. The call's limit is 600 s: each later step starts only with time left
  # (SECONDS), so that the logs still come back.
  for spec in "6 1 0 1008x1520x384 256x1024x1024 6144x512x1024" "6 3 1 1024x576x7168" \
              "7 1 1 1008x3072x1536 5776x512x4096" "7 8 0 1008x4200x1024 1008x4208x4096"; do
    read -r cfg splits overlap shapes <<< "$spec"
    sel=(); for sh in $shapes; do sel+=(--shape "$sh"); done
    [ "$overlap" = 1 ] && sel+=(--overlap)
    timeout 100 python3 tests/cuda/sanitize_calls.py --cfg "$cfg" --splits "$splits" --seed-a 2 "${sel[@]}" \
      > "$OUT/staged_c${cfg}p${splits}.log" 2>&1
    st=$?; [ $st -eq 0 ] || rc=1
    echo "staged cfg $cfg splits $splits overlap $overlap: exit $st"; tail -n 3 "$OUT/staged_c${cfg}p${splits}.log"
  done
  if [ -z "${PROBE_NO_SANITIZE:-}" ]; then
    run_sanitizer 150 memcheck "$OUT/sanitizer_memcheck_staged.log" --cfg 7 --splits 8 --seed-a 2 \
      --shape 1008x4200x1024 --shape 5776x512x1024
    run_sanitizer 150 racecheck "$OUT/sanitizer_racecheck_staged.log" --cfg 6 --seed-a 2 --shape 256x1024x1024 \
      --shape 1008x1520x384
  fi
  i=0
  # "shape:base" pairs; base = the natural pick's knobs with the configuration named (tests/cuda/test_cuda_pick.py)
  for spec in ${PROBE_SPECS:-6144x512x7168:c8r2o1 8192x8192x8192:c7o1 6144x4608x7168:c7o1 6144x4608x7168:c6o1 1024x576x7168:c6p3o1}; do
    shape=${spec%%:*} b=${spec#*:} i=$((i + 1))
    [ "$SECONDS" -lt 420 ] || { echo "probe $shape $b: skipped, ${SECONDS} s gone"; continue; }
    timeout 100 python3 tests/cuda/config_sweep.py --out "$OUT/probe$i" --rounds 2 --shapes "$shape" \
      --variants "$b,${b}q1,${b}q2,${b}q3,${b}q4,${b}q5,${b}q6" > "$OUT/probe$i.log" 2>&1
    echo "probe $shape $b: exit $? (1: the probes' wrong results, expected)"; grep -A2 "m x n x k" "$OUT/probe$i.log" | cut -c1-150
  done
  if [ "$SECONDS" -lt 430 ]; then
    timeout 90 python3 tests/cuda/quant_sweep.py --out "$OUT/quant" > "$OUT/quant.log" 2>&1
    st=$?; [ $st -eq 0 ] || rc=1
    echo "quant_sweep: exit $st"; tail -n 15 "$OUT/quant.log" | cut -c1-150
  fi
  b=${PROBE_NCU_BASE:-c7o1}
  # Nsight Compute with what time is left (540 s of the call's 600, the rest for the logs).
  left=$((540 - SECONDS)); [ "$left" -gt 60 ] || left=0
  [ "$left" -gt 0 ] && timeout "$left" ncu --clock-control none -k regex:wgmma --section SpeedOfLight --section WarpStateStats \
    --section SchedulerStats --section InstructionStats --section MemoryWorkloadAnalysis_Tables \
    python3 tests/cuda/profile_calls.py --jit --shape "${PROBE_NCU_SHAPE:-6144x4608x7168}" \
    --variants "$b,${b}q1,${b}q2,${b}q3,${b}q6" > "$OUT/ncu-probe.txt" 2>&1
  echo "ncu exit=$?"; grep -E "^  [a-z_]+.*wgmma|Duration|Stall Long|Stall Wait|Stall Math|Issued Warp|Bank" "$OUT/ncu-probe.txt" | head -n 60 | cut -c1-150
elif [ "$mode" = sweep ]; then
  # Build first, with no timeout (see GEMM_CUDA_PREBUILT above).
  python3 -c "from tests.cuda.device_check import load_jit; load_jit()" 2>&1 | tail -n 5 || exit 1
  sweep 420 3 pick,c6,c7,torch
else
  # CUTLASS headers (nvidia-cutlass wheel) and -DNDEBUG for nvcc, until scripts/build.py adds them itself.
  cut=$(python3 -c "import importlib.util as u, pathlib as p; b = p.Path(list(u.find_spec('cutlass_library').submodule_search_locations)[0]) / 'source'; print(f'-I{b}/include -I{b}/tools/util/include')")
  export NVCC_APPEND_FLAGS="$cut -DNDEBUG"
  # On this throwaway copy only: list every CUDA source in build.toml if the checked-in one does not yet.
  if ! grep -q gemm_cuda_cfg0.cu build.toml; then
    srcs=$(find gemm/cuda -maxdepth 1 \( -name '*.cu' -o -name '*.cuh' -o -name '*.h' \) | sort | sed 's|^|"|; s|$|"|' | paste -sd, -)
    python3 - "$srcs" <<'PY'
import re, sys
t = open("build.toml").read()
t = re.sub(r'(\[kernel\.gemm_cuda\].*?\nsrc = )\[[^\]]*\]', lambda m: m.group(1) + "[" + sys.argv[1] + "]", t, flags=re.S)
open("build.toml", "w").write(t)
PY
    echo "build.toml (device copy) patched:"; grep -A5 "kernel.gemm_cuda" build.toml
  fi
  # scripts/build.py passes -fPIC straight to nvcc (nvcc wants -Xcompiler=-fPIC): until that is fixed,
  # point CUDA_HOME at a shim whose nvcc rewrites it.
  real=$(python3 -c "from torch.utils.cpp_extension import CUDA_HOME; print(CUDA_HOME)")
  mkdir -p /tmp/cudahome/bin && ln -sfn "$real/include" /tmp/cudahome/include && ln -sfn "$real/lib64" /tmp/cudahome/lib64
  # shellcheck disable=SC2016  # the shim's own "$@" / "${a[@]}" must stay literal
  printf '#!/bin/bash\na=(); for x in "$@"; do [ "$x" = -fPIC ] && x=-Xcompiler=-fPIC; a+=("$x"); done\nexec %s/bin/nvcc "${a[@]}"\n' "$real" > /tmp/cudahome/bin/nvcc
  chmod +x /tmp/cudahome/bin/nvcc; export CUDA_HOME=/tmp/cudahome
  timeout 400 python3 -m scripts.build 2>&1 | tee "$OUT/build.log" | tail -n 12 || rc=1
  if [ "$mode" = debug ]; then
    timeout 60 python3 -X faulthandler tests/cuda/probe.py throw build 2>&1 | tail -n 8
    timeout 120 cuda-gdb -batch -ex run -ex bt --args python3 tests/cuda/probe.py throw build > /tmp/gdb.log 2>&1
    grep -E "^#[0-9]+|signal" /tmp/gdb.log | head -n 40 | cut -c1-220
    TORCH_SHOW_CPP_STACKTRACES=0 TORCH_DISABLE_ADDR2LINE=1 timeout 60 python3 tests/cuda/probe.py throw build 2>&1 | tail -n 3
    timeout 150 python3 -m pytest -q -p no:cacheprovider tests/kernel tests/cuda/test_cuda_gpu.py \
      --deselect tests/kernel/test_bad_input.py::test_direct_op_call_is_checked_in_cpp 2>&1 | tee "$OUT/pytest.log" | tail -n 30
    exit 0
  fi
  if [ "$mode" = sanitize ]; then sanitize; exit $rc; fi
  # Correctness before speed: pytest first, so that a call cut short by its time limit still tests. The
  # clocks tests include one that needs the GPU (a wrong timed result must fail benchmarks.clocks).
  if [ "$mode" != study ]; then
    timeout 200 python3 -m pytest -q -p no:cacheprovider tests/kernel tests/cuda/test_cuda_gpu.py \
      tests/benchmarks/test_clocks.py 2>&1 \
      | tee "$OUT/pytest.log" | tail -n 25 || rc=1
  fi
  if [ "$mode" = test ] || [ "$mode" = check ] || [ "$mode" = verify ]; then
    [ "$mode" = test ] && exit $rc
    sanitize
    [ "$mode" = verify ] && exit $rc
    # Hardware counters of ours and torch's blockwise kernel on one compute-bound shape.
    timeout 150 ncu --clock-control none -k 'regex:wgmma|Gemm|gemm|xmma' --section SpeedOfLight \
      --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section WarpStateStats \
      --section LaunchStats python3 tests/cuda/profile_calls.py --kernel-dir build \
      --shape "${PROFILE_SHAPE:-6144x4608x7168}" > "$OUT/ncu.txt" 2>&1
    echo "ncu exit=$?"; grep -E "bit-identical|^  [a-z_]+.*gemm|Duration|SM Frequency|Compute \(SM\) Throughput|Memory Throughput" "$OUT/ncu.txt" | head -n 30
    exit $rc
  fi
  # The results folder of this card (benchmarks/results/h100 or h200; the lent kind may be either): the
  # harness's own name for it, so that the committed file this run is compared with is the same card's.
  card=$(python3 -c 'import torch; from benchmarks.run import detect; print(detect(torch)[1])')
  card=${card:-gpu}
  if [ -z "${SKIP_PRECISION:-}" ]; then
    timeout 150 python3 -m benchmarks.precision --build-dir build --out "$OUT/$card" \
      --shapes "${PRECISION_SHAPES:-64x64x128,128x512x7168,96x4608x7168,1024x4096x512,1024x1536x7168,1024x7168x2304,6144x512x7168}" \
      > "$OUT/precision.log" 2>&1 || rc=1
    tail -n 45 "$OUT/precision.log"
  fi
  # shellcheck disable=SC2086  # BENCH_ARGS: extra options, word-split on purpose (e.g. "--rounds 5")
  timeout 360 python3 -m benchmarks.run --shapes challenge,8192x8192x8192 --out "$OUT/$card" ${BENCH_ARGS:-} 2>&1 \
    | tee "$OUT/bench.log" | tail -n 50 || rc=1
  # Against the committed results of the same variant: what moved beyond the drift torch's own times show.
  for f in "$OUT/$card"/torch*.json; do
    # Issue 4's targets, shape by shape (benchmarks.targets), into the log that comes back.
    python3 -m benchmarks.targets "$f" 2>&1 | tee -a "$OUT/targets.txt" | tail -n 5
    variant=$(basename "$f" .json); committed=benchmarks/results/$card/$variant.json
    [ -f "$committed" ] || continue
    python3 -m benchmarks.compare "$committed" "$f" --json "$OUT/compare-$variant.json" > "$OUT/compare-$variant.log" 2>&1
    grep -E "drift|slower|faster|geomean|error" "$OUT/compare-$variant.log"
  done
  # SM clock and board power under sustained load (is a shape bound by the power cap?): benchmarks.clocks.
  [ -n "${SKIP_CLOCKS:-}" ] || timeout 300 python3 -m benchmarks.clocks --build-dir build --out "$OUT/$card/clocks.json" \
    --shapes "${CLOCK_SHAPES:-1024x1536x7168,1024x7168x2048,1024x4608x7168,6144x7168x2304,6144x4608x7168,8192x8192x8192}" \
    > "$OUT/clocks.log" 2>&1 || rc=1
  [ -f "$OUT/clocks.log" ] && cat "$OUT/clocks.log"
  [ "$mode" = bench ] || [ "$mode" = study ] || sanitize
fi
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv >> "$OUT/gpu.txt" 2>&1
# The device tool brings back at most 8 files (run 100 lost its results JSON and plot so): past that, the
# logs go into one logs.tar, the benchmark's results (h200/ or h100/) stay as they are.
if [ "$(find "$OUT" -type f | wc -l)" -gt 8 ]; then
  (cd "$OUT" && find . -type f ! -path "./${card:-h200}/*" ! -name logs.tar -print0 \
    | tar --null -cf logs.tar -T - --remove-files)
fi
exit $rc
