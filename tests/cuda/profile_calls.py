"""Calls to put under Nsight Compute: the built cuda variant (through kernels) and torch's blockwise FP8
on one shape, each twice (a warm-up, then the one to profile); with --ours-only the variant alone (shapes
torch's blockwise refuses, N % 16 != 0). Not collected by pytest.

    ncu --clock-control none -k regex:'wgmma|Gemm|gemm|xmma' --section SpeedOfLight ... \\
        python3 tests/cuda/profile_calls.py --kernel-dir build --shape 6144x4608x7168   (or --jit)

With --jit, `--variants c7o1,c7o1q1,...` calls those natural-layout variants of tests/cuda/config_sweep.py
instead of the op's own choice, each twice, in that order (the seed-A probes among them: timing only, so
no comparison with torch is printed for them).
"""

from __future__ import annotations

import argparse
import pathlib
import sys

import torch

ROOT = pathlib.Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.impls import _blockwise, blockwise_scale_a, blockwise_scale_b  # noqa: E402
from benchmarks.problem import make_inputs, parse_shapes  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kernel-dir", type=pathlib.Path, help="the built variant (else --jit)")
    ap.add_argument("--jit", action="store_true", help="the JIT binding of tests/cuda/device_check.py")
    ap.add_argument("--shape", default="6144x4608x7168")
    ap.add_argument("--variants", help="with --jit: config_sweep variants of the natural call, comma-separated")
    ap.add_argument("--ours-only", action="store_true", help="leave torch's blockwise out (it refuses N % 16 != 0)")
    args = ap.parse_args()
    if args.variants and not args.jit:
        ap.error("--variants needs --jit")
    (shape,) = parse_shapes(args.shape)
    s = make_inputs(shape, torch.device("cuda"), torch.float8_e4m3fn, torch.Generator().manual_seed(1))
    sa, sb = blockwise_scale_a(s.x_scale), blockwise_scale_b(s.w_scale)
    if args.jit:
        from tests.cuda.device_check import load_jit

        mod = load_jit()
        out = torch.empty(shape.m, shape.n, dtype=torch.bfloat16, device="cuda")
        if args.variants:
            from tests.cuda.config_sweep import parse_variant

            for spec in args.variants.split(","):
                knobs = parse_variant(spec)
                if not knobs or "cfg" not in knobs or knobs.get("layout"):
                    ap.error(f"--variants takes natural-layout variants c<cfg>[knobs] or pick, not {spec!r}")
                try:
                    for _ in range(2):
                        mod.natural_cfg(out, s.x, s.w, s.x_scale, s.w_scale, **knobs)
                        torch.cuda.synchronize()
                except RuntimeError as e:  # refused for this shape: say so, profile the others
                    print(f"{args.shape} {spec}: refused: {str(e).splitlines()[0][:200]}", flush=True)
                    continue
                print(f"{args.shape} {spec}: called twice", flush=True)
            return 0

        def natural():
            mod.gemm_natural(out, s.x, s.w, s.x_scale, s.w_scale)
            return out
    elif args.kernel_dir:
        from kernels import get_local_kernel

        kernel = get_local_kernel(args.kernel_dir)

        def natural():
            return kernel.gemm_natural(s.x, s.w, s.x_scale, s.w_scale)
    else:
        ap.error("give --kernel-dir or --jit")
    for _ in range(2):
        ours = natural()
        torch.cuda.synchronize()
        if not args.ours_only:
            theirs = _blockwise(s.x, s.w, sa, sb)
            torch.cuda.synchronize()
    if args.ours_only:
        print(f"{args.shape}: ours called twice", flush=True)
        return 0
    same = torch.equal(ours, theirs)
    print(f"{args.shape}: ours and torch blockwise bit-identical: {same}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
