"""Objects for the JIT build's prebuilt path (tests/cuda/device_check.load_jit, $GEMM_CUDA_PREBUILT): every
gemm/cuda/gemm_cuda_*.cu compiled here, with this machine's nvcc and load_jit's flags for sm_90a, so that a
device call links them instead of spending its own minutes compiling the kernels. Not collected by pytest.

    python3 tests/cuda/prebuild.py .cache/cuda_prebuilt
    python3 tests/cuda/prebuild.py .cache/cuda_prebuilt_probe -DGEMM_SEED_A_EXPERIMENT \
        -DGEMM_QUANT_ROUNDS_EXPERIMENT   (scripts/device_run.sh probe)

Objects from other sources than the ones the device call compiles (gemm_cuda.cu, the binding) would link
against a different GemmArgs: rebuild them after any change under gemm/cuda/. nvcc flags that take a value
go in their one-word form (--maxrregcount=128). Their host code comes from this machine's compiler, not
the device's /usr/bin/g++; runs 130-132 linked objects built so.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import pathlib
import shutil
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.cuda.device_check import JIT_NVCC_FLAGS, cutlass_include_dirs  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=pathlib.Path, help="directory for <stem>.o")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    # anything else is an nvcc flag (-DGEMM_SEED_A_EXPERIMENT), which argparse would take for an option
    args, flags = ap.parse_known_args()
    if bad := [f for f in flags if not f.startswith("-")]:
        ap.error(f"unexpected arguments {bad}: give one output directory, then nvcc flags")
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        raise SystemExit("nvcc is not on PATH")
    cuda_dir = ROOT / "gemm" / "cuda"
    incs = [f"-I{d}" for d in [*cutlass_include_dirs(), cuda_dir, ROOT / "torch-ext"]]
    arch = ["-gencode=arch=compute_90a,code=sm_90a", "-Xcompiler", "-fPIC"]
    args.out.mkdir(parents=True, exist_ok=True)

    def build(src: pathlib.Path) -> tuple[str, int, str]:
        cmd = [nvcc, "-c", str(src), "-o", str(args.out / f"{src.stem}.o"), *JIT_NVCC_FLAGS, *arch, *flags, *incs]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        return src.name, proc.returncode, proc.stderr

    sources = sorted(cuda_dir.glob("gemm_cuda_*.cu"))
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        results = list(pool.map(build, sources))
    for name, rc, err in results:
        print(f"{name}: {'ok' if rc == 0 else 'FAILED'}", flush=True)
        if rc != 0:
            print(err[-3000:], file=sys.stderr)
    return 0 if all(rc == 0 for _, rc, _ in results) else 1


if __name__ == "__main__":
    sys.exit(main())
