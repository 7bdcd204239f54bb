"""Development sweep of quantize_activations' CUDA kernel (not collected by pytest): the shipped kernel
(rounds=1, one 128-element block per half-warp) against its experiment forms (rounds=2 and 4: each lane's
loads for that many blocks issued before it uses any; gemm/cuda/gemm_cuda_quant.cu), on activations of the
challenge shapes' M x K. Each form must give the shipped kernel's bits (FP8 values and scales) on check-only cases
(partial last CTAs, every input type, both scale rules, zeros, NaN, inf) and on each timed shape's first
call, else the sweep exits 1; then all are timed call by call (L2 flushed) as benchmarks.run times. Needs objects
built with -DGEMM_QUANT_ROUNDS_EXPERIMENT (tests/cuda/prebuild.py) or $GEMM_CUDA_EXTRA_FLAGS set so.

    python3 tests/cuda/quant_sweep.py --out DIR [--shapes 6144x7168,1024x7168] [--rounds 1,2,4]
"""

from __future__ import annotations

import argparse
import itertools
import json
import pathlib
import statistics
import sys

import torch

ROOT = pathlib.Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.timing import Budget, Flusher, reps_for, time_interleaved, warm_up  # noqa: E402
from tests.cuda.device_check import load_jit  # noqa: E402

# Checked, not timed: a last CTA only partly filled (one half-warp past the end while its partner goes on),
# single rows, every input type, both scale rules, and blocks of zeros, NaN and inf.
CHECK_SHAPES = ((1, 384), (17, 1152), (3, 128), (4097, 7168))
CHECK_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


def quantize(mod, x: torch.Tensor, power_of_two: bool, rounds: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The kernel's bytes and scales as integers, from outputs filled with a sentinel first (an unwritten
    byte or scale shows), so that NaN scales compare too."""
    q = torch.full(x.shape, 0xA5, dtype=torch.uint8, device=x.device)
    scale = torch.full((x.shape[0], x.shape[1] // 128), -7.0, device=x.device)
    mod.quantize_rows(q, scale, x, power_of_two, rounds)
    torch.cuda.synchronize()
    return q, scale.view(torch.int32)


def check_forms(mod, rounds: list[int], gen: torch.Generator) -> int:
    """How many (form, case) pairs differ from the shipped kernel's bits. First, that the build has the
    experiment at all: without the macro every form but 1 is refused, and an object older than
    QuantizeRowsArgs::rounds would run the shipped kernel for every form (and agree with it): it must
    refuse a form that does not exist."""
    try:
        quantize(mod, torch.ones(1, 128, device="cuda"), False, 3)
    except RuntimeError:
        pass
    else:
        raise SystemExit("rounds=3 was accepted: these objects predate QuantizeRowsArgs::rounds; rebuild them")
    bad = 0
    for (m, k), dtype, p2 in itertools.product(CHECK_SHAPES, CHECK_DTYPES, (False, True)):
        x = torch.randn(m, k, generator=gen, device="cuda").to(dtype)
        x[0, :128] = 0  # a block of zeros: the smallest normal scale
        if m > 1:
            x[1, 5], x[1, 200 % k] = float("nan"), float("inf")
        want = quantize(mod, x, p2, 1)
        for r in rounds[1:]:
            got = quantize(mod, x, p2, r)
            if not all(torch.equal(a, b) for a, b in zip(got, want, strict=True)):
                print(f"rounds={r} differs from rounds=1 at {m}x{k} {dtype} power_of_two={p2}", flush=True)
                bad += 1
    return bad


# The activations (M x K) of the 18 challenge shapes, each once.
DEFAULT_SHAPES = ",".join(f"{m}x{k}" for m in (1024, 6144) for k in (7168, 1536, 256, 2048, 2304, 512))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=pathlib.Path, required=True)
    ap.add_argument("--shapes", default=DEFAULT_SHAPES, help="MxK activations, comma-separated")
    ap.add_argument("--rounds", default="1,2,4", help="QuantizeRowsArgs::rounds to compare (1 first)")
    ap.add_argument("--dtype", choices=("bfloat16", "float16", "float32"), default="bfloat16")
    args = ap.parse_args()
    rounds = [int(r) for r in args.rounds.split(",")]
    if rounds[0] != 1:
        ap.error("--rounds must start with 1, the shipped kernel the others are checked against")
    mod = load_jit()
    dev = torch.device("cuda")
    dtype = getattr(torch, args.dtype)
    flush = Flusher(dev)
    budget = Budget.for_device("cuda", quick=False)
    gen = torch.Generator(device=dev).manual_seed(5)
    failures = check_forms(mod, rounds, gen)
    print(f"checked cases: {failures} differ", flush=True)
    rows = []
    for spec in args.shapes.split(","):
        m, k = (int(v) for v in spec.split("x"))
        xs = [torch.randn(m, k, generator=gen, device=dev).to(dtype) for _ in range(3)]
        outs = {
            r: [(torch.empty(m, k, dtype=torch.uint8, device=dev), torch.empty(m, k // 128, device=dev)) for _ in xs]
            for r in rounds
        }
        fns = {
            r: [
                (lambda x=x, o=o, r=r: mod.quantize_rows(o[0], o[1], x, False, r))
                for x, o in zip(xs, outs[r], strict=True)
            ]
            for r in rounds
        }
        row: dict = {"m": m, "k": k, "dtype": args.dtype}
        for r in rounds:
            fns[r][0]()
        torch.cuda.synchronize()
        for r in rounds[1:]:  # the same bits as the shipped kernel's
            same = all(torch.equal(a, b) for a, b in zip(outs[r][0], outs[1][0], strict=True))
            row[f"r{r}_same_bits"] = same
            failures += not same
        warmed = [warm_up(fns[r], dev, budget) for r in rounds]
        reps = [reps_for(budget, max(est for est, _ in warmed))] * len(rounds)
        got = time_interleaved([fns[r] for r in rounds], dev, reps, [h for _, h in warmed], flush)
        moved = m * k * (xs[0].element_size() + 1) + m * (k // 128) * 4  # read x, write q and the scales
        for r, samples in zip(rounds, got, strict=True):
            us = statistics.median(samples)
            row[f"r{r}_us"] = round(us, 2)
            row[f"r{r}_tbps"] = round(moved / us / 1e6, 3)
        print(json.dumps(row), flush=True)
        rows.append(row)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "quant_sweep.json").write_text(json.dumps(rows, indent=1) + "\n")
    print(f"\n{'m x k':>12} " + " ".join(f"{'r' + str(r) + ' us':>9} {'TB/s':>6}" for r in rounds))
    for row in rows:
        cells = " ".join(f"{row[f'r{r}_us']:>9.1f} {row[f'r{r}_tbps']:>6.2f}" for r in rounds)
        print(f"{row['m']:>6}x{row['k']:<6} {cells}")
    print("same bits:", "all" if failures == 0 else f"{failures} forms differ")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
