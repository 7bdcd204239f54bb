"""How long the seed layout's preparation pass takes alone, next to the natural-layout GEMM (not collected
by pytest). For each shape: the preparation (gemm_cuda_prep.cu: a, b and both scale tensors made
K-major), the natural call, and the whole seed call, timed like benchmarks.run (L2 flushed, device time);
the preparation's bandwidth counts the 2 (MK + NK) bytes it must move.

    python3 tests/cuda/seed_prep_timing.py [--shapes challenge] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import sys

import torch

ROOT = pathlib.Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.problem import make_inputs, parse_shapes  # noqa: E402
from benchmarks.timing import Budget, Flusher, time_samples  # noqa: E402
from tests.cuda.device_check import load_jit  # noqa: E402


def measure(mod, shape, dev, budget, flush, gen) -> dict:
    """Device times (us) of the preparation alone, the natural call and the seed call on one shape."""
    m, n, k = shape.m, shape.n, shape.k
    s = make_inputs(shape, dev, torch.float8_e4m3fn, gen)
    x, w = torch.empty_like(s.x), torch.empty_like(s.w)  # the K-major outputs of the preparation
    sx, sw = torch.empty_like(s.x_scale), torch.empty_like(s.w_scale)
    out = torch.empty(m, n, dtype=torch.bfloat16, device=dev)
    fns = {
        "prep": lambda: mod.seed_prepare(x, w, sx, sw, s.a, s.b, s.a_scale, s.b_scale),
        "natural": lambda: mod.gemm_natural(out, s.x, s.w, s.x_scale, s.w_scale),
        "seed": lambda: mod.gemm_seed(out, s.a, s.b, s.a_scale, s.b_scale),
    }
    row = {"m": m, "n": n, "k": k}
    for name, fn in fns.items():
        row[f"{name}_us"] = round(statistics.median(time_samples([fn], dev, budget, flush)), 2)
    row["prep_tbs"] = round(2 * (m * k + n * k) / (row["prep_us"] * 1e-6) / 1e12, 2)
    return row


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="challenge")
    ap.add_argument("--out", type=pathlib.Path)
    args = ap.parse_args()
    mod = load_jit()
    dev = torch.device("cuda")
    flush = Flusher(dev)
    budget = Budget.for_device("cuda", quick=True)
    gen = torch.Generator().manual_seed(4)
    rows = []
    print(f"{'m x n x k':>18} {'prep us':>8} {'TB/s':>6} {'natural':>8} {'seed':>8} {'seed-nat':>8}")
    for shape in parse_shapes(args.shapes):
        r = measure(mod, shape, dev, budget, flush, gen)
        rows.append(r)
        gap = r["seed_us"] - r["natural_us"]
        print(
            f"{r['m']:>6}x{r['n']}x{r['k']:<6} {r['prep_us']:>8.1f} {r['prep_tbs']:>6.2f} {r['natural_us']:>8.1f} "
            f"{r['seed_us']:>8.1f} {gap:>8.1f}",
            flush=True,
        )
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "seed_prep_timing.json").write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
