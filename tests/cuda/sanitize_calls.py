"""A few small calls of the CUDA backend for compute-sanitizer (memcheck, racecheck, ...).

Not collected by pytest. On the GPU machine, after tests/cuda/device_check.py has JIT-built the module
(or with --kernel-dir to load a built variant through kernels):

    compute-sanitizer --tool memcheck python3 tests/cuda/sanitize_calls.py [--prebuilt DIR] [--cfg N [--splits S]]

Each call's output is checked against the fp32 reference, so a silent wrong answer fails too. With
--kernel-dir, quantize_activations runs on each shape's (M, K) activations as well, against the torch code.
Exit status 0 only when every call matched.
"""

from __future__ import annotations

import argparse
import functools
import pathlib
import sys

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import device_check as dc  # noqa: E402

from benchmarks.problem import parse_shapes  # noqa: E402  (device_check put the repo root on sys.path)

# (512, 1024, 4096): the K-sliced configuration (fp32 partials + summing pass); (1000, 2999, 512): the
# hand-written 128x192 wgmma kernel with partial tiles; (5800, 512, 4096): its 192x128 form (three
# consumer warpgroups), whose last M tile leaves two of them without rows; (1000, 2056, 384): its 128x128
# form with partial M and N tiles; (64, 576, 256), (3, 520, 7168) and (1, 4096, 4096): the decode kernel
# (M <= 64), in one K slice, in 14, and in 2 slices of 16 K blocks (past its 8-stage ring); (256, 2304,
# 4096): the 128x128 form with each tile cut into 3 K pieces summed in the kernel (a split tail); (5800,
# 568, 4096): the 192x144 form, its last M tile 40 rows, and in its last N tile one of the two directly
# stored 8-column groups written and the other past N; (1000, 4200, 4096): the 128x192 form past a wave,
# its last 44 tiles in 3 K pieces, the store overlapped; (1000, 1500, 4224): its 128x96 form with two batch
# accumulators, partial M and N tiles, an odd count of K blocks (33) and an output TMA cannot store (N % 8
# = 4: plain stores); (1008, 1520, 384): partial M and N tiles of 112 (with --seed-fused, JIT only: the
# fused seed kernel's); (1152, 2047, 256): the 128x128 form with N odd (plain stores at odd element offsets).
SHAPES = [
    (64, 576, 256),
    (512, 1024, 4096),
    (1000, 2999, 512),
    (5800, 512, 4096),
    (1000, 2056, 384),
    (3, 520, 7168),
    (1, 4096, 4096),
    (256, 2304, 4096),
    (5800, 568, 4096),
    (1000, 4200, 4096),
    (1000, 1500, 4224),
    (1008, 1520, 384),
    (1152, 2047, 256),
    (200, 300, 640),
    (96, 1024, 256),
    (256, 512, 384),
    (1, 1, 128),
]


def poison_scratch(*sizes: int) -> None:
    """Leaves freed blocks of these byte sizes full of FP8 NaN (0x7F) in torch's caching allocator, so that
    the seed path's scratch (x and w) most likely starts as NaN: a GEMM that read a tile before the
    preparation wrote it (its dependent launch waits for that: GemmArgs::pdl) gives NaN, not a stale copy
    of an earlier call's data. (Runs 59-64's streamed seed path, which read tiles while they were being
    written, was checked so.)"""
    blocks = [torch.full((size,), 0x7F, dtype=torch.uint8, device="cuda") for size in sizes]
    torch.cuda.synchronize()
    del blocks


def quantize_matches(k, m: int, k_: int, gen: torch.Generator) -> bool:
    """k.quantize_activations on bf16 and fp32 (m, k_) activations (its kernel, on the CUDA build) gives
    the bits of the torch code it replaces."""
    ok = True
    for dtype in (torch.bfloat16, torch.float32):
        x = torch.randn(m, k_, generator=gen, device="cuda").to(dtype)
        q, scale = k.quantize_activations(x)
        uses_kernel = k.quantize._uses_kernel
        k.quantize._uses_kernel = lambda t: False
        try:
            q_ref, scale_ref = k.quantize_activations(x)
        finally:
            k.quantize._uses_kernel = uses_kernel
        same = torch.equal(scale, scale_ref) and torch.equal(q.view(torch.uint8), q_ref.view(torch.uint8))
        print(f"quantize {m}x{k_} {dtype}: same bits as the torch code={same}", flush=True)
        ok &= same
    return ok


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prebuilt", default=None)
    ap.add_argument("--kernel-dir", default=None, help="a build/ dir to load through kernels instead")
    ap.add_argument("--shapes", type=int, default=None, help="the first N shapes (default: all, unless --shape)")
    ap.add_argument("--cfg", type=int, default=-1, help="JIT build only: force this configuration on every call")
    ap.add_argument("--splits", type=int, default=1, help="with --cfg: Tuning.splits of the calls")
    ap.add_argument("--overlap", action="store_true", help="with --cfg: the calls' Tuning.overlap_store")
    ap.add_argument("--seed-fused", action="store_true", help="JIT only: seed calls take the fused kernel")
    ap.add_argument(
        "--seed-a", type=int, default=-1, help="with --cfg: the seed calls' Tuning.seed_a (2: the staged form)"
    )
    ap.add_argument("--shape", action="append", default=[], metavar="MxNxK", help="these shapes too (repeatable)")
    args = ap.parse_args()
    extra = [(s.m, s.n, s.k) for spec in args.shape for s in parse_shapes(spec)]
    first = args.shapes if args.shapes is not None else (0 if extra else len(SHAPES))
    shapes = SHAPES[:first] + extra
    torch.backends.cuda.matmul.allow_tf32 = False
    if args.kernel_dir:
        from kernels import get_local_kernel

        k = get_local_kernel(pathlib.Path(args.kernel_dir))

        def natural(out, x, w, xs, ws):
            k.gemm_natural(x, w, xs, ws, out=out)

        def seed(out, a, b, sa, sb):
            k.gemm(a, b, sa, sb, c=out)
    else:
        mod = dc.load_jit(args.prebuilt)
        natural, seed = mod.gemm_natural, mod.gemm_seed
        if args.cfg >= 0:
            natural = functools.partial(mod.natural_cfg, cfg=args.cfg, splits=args.splits, overlap_store=args.overlap)
            seed = functools.partial(
                mod.seed_cfg, cfg=args.cfg, splits=args.splits, fused=0, seed_a=args.seed_a, overlap_store=args.overlap
            )
        if args.seed_fused:
            seed = functools.partial(mod.seed_cfg, cfg=-1, fused=1)
    gen = torch.Generator(device="cuda")
    gen.manual_seed(7)
    failures = 0
    for m, n, k_ in shapes:
        x, w, xs, ws = dc.make_inputs(m, n, k_, gen)
        a, b, sa, sb = dc.to_seed(x, w, xs, ws)
        ref, terms = dc.reference(x, w, xs, ws), dc.magnitude(x, w, xs, ws)
        for name, fn, ins in (("natural", natural, (x, w, xs, ws)), ("seed", seed, (a, b, sa, sb))):
            out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
            if name == "seed":
                poison_scratch(m * k_, n * k_)
            fn(out, *ins)
            torch.cuda.synchronize()
            r = dc.check_close(out, ref, terms)
            print(f"{name} {m}x{n}x{k_}: ok={r['ok']} rel={r['rel_fro']:.2e}", flush=True)
            failures += not r["ok"]
        if args.kernel_dir:  # quantize_activations' kernel on (m, k) activations, against the torch code's bits
            failures += not quantize_matches(k, m, k_, gen)
    print(f"sanitize_calls: {failures} failures", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
