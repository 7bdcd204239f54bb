"""Development probe of the fused seed kernel (not collected by pytest): times the seed layout through the
fused kernel (`sfused`), through the preparation + natural path (`spick`) and the natural layout (`pick`)
with device_check.bench (L2 flushed, input sets rotating), without a correctness check, so that a
diagnostic build with wrong results by design can be timed too (run 118's: B's transpose left out, A read
as if K-major, 3 stages; the switches are in commit fa2d1bf's gemm_cuda_wgmma.cu). `--profile` makes one
fused call per shape and nothing else (for Nsight Compute).

    python3 tests/cuda/seed_fused_probe.py [--prebuilt DIR] [--profile] MxNxK ...
"""

from __future__ import annotations

import argparse
import pathlib
import sys

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import device_check as dc  # noqa: E402

from benchmarks.problem import parse_shapes  # noqa: E402  (device_check put the repo root on sys.path)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prebuilt", default=None)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("shapes", nargs="+")
    args = ap.parse_args()
    mod = dc.load_jit(args.prebuilt)
    gen = torch.Generator(device="cuda")
    gen.manual_seed(5)
    for shape in parse_shapes(",".join(args.shapes)):
        m, n, k, spec = shape.m, shape.n, shape.k, shape.id
        sets = []
        for _ in range(1 if args.profile else 4):
            x, w, xs, ws = dc.make_inputs(m, n, k, gen)
            sets.append((x, w, xs, ws, *dc.to_seed(x, w, xs, ws)))
        out = torch.empty((m, n), device="cuda", dtype=torch.bfloat16)
        if args.profile:
            s = sets[0]
            mod.seed_cfg(out, *s[4:], -1, True, 1, 1)
            torch.cuda.synchronize()
            continue
        fns = {
            "pick": [lambda s=s, out=out: mod.gemm_natural(out, *s[:4]) for s in sets],
            "spick": [lambda s=s, out=out: mod.gemm_seed(out, *s[4:]) for s in sets],
            "sfused": [lambda s=s, out=out: mod.seed_cfg(out, *s[4:], -1, True, 1, 1) for s in sets],
        }
        times = {name: dc.bench(lambda i, fs=fs: fs[i](), len(fs)) for name, fs in fns.items()}
        print(f"{spec:>16} " + " ".join(f"{name} {t:8.1f}" for name, t in times.items()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
