"""Development sweep for the CUDA backend's K-sliced configuration (not collected by pytest).

For each shape: the heuristic's current choice, the fp32-partials configuration with every slice count
that divides K/128 (up to 16), and torch's blockwise FP8, each checked against the fp32 reference (the
cuda backend's tolerance) and then timed the way benchmarks.run times (interleaved rounds, L2 flushed,
device time only). Prints a table and writes kslice_sweep.json to --out.

    python3 tests/cuda/kslice_sweep.py --out DIR [--shapes challenge,8192x8192x8192]
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

from benchmarks.impls import _blockwise, blockwise_scale_a, blockwise_scale_b  # noqa: E402
from benchmarks.problem import check, magnitude, make_inputs, parse_shapes, reference  # noqa: E402
from benchmarks.timing import Budget, Flusher, time_samples  # noqa: E402
from tests.cuda.device_check import load_jit  # noqa: E402

KSLICE_CFG = 5


def calls(mod, sets, outs, cfg: int, slices: int) -> list:
    """One call per input set of the natural layout with a forced configuration (cfg -1: the heuristic)."""
    return [
        (lambda s=s, o=o: mod.natural_cfg(o, s.x, s.w, s.x_scale, s.w_scale, cfg, kslices=slices))
        for s, o in zip(sets, outs, strict=True)
    ]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=pathlib.Path, required=True)
    ap.add_argument("--shapes", default="challenge,8192x8192x8192")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    mod = load_jit()
    dev = torch.device("cuda")
    flush = Flusher(dev)
    budget = Budget.for_device("cuda", quick=False).per_round(args.rounds)
    gen = torch.Generator().manual_seed(3)
    rows = []
    for shape in parse_shapes(args.shapes):
        m, n, k = shape.m, shape.n, shape.k
        sets = [make_inputs(shape, dev, torch.float8_e4m3fn, gen) for _ in range(3)]
        outs = [torch.empty(m, n, dtype=torch.bfloat16, device=dev) for _ in sets]
        variants: dict[str, list] = {}

        variants["pick"] = calls(mod, sets, outs, -1, 1)
        for slices in (1, 2, 4, 7, 8, 14, 16):
            if (k // 128) % slices == 0:
                variants[f"ks{slices}"] = calls(mod, sets, outs, KSLICE_CFG, slices)
        scales = [(blockwise_scale_a(s.x_scale), blockwise_scale_b(s.w_scale)) for s in sets]
        variants["torch_blockwise"] = [
            (lambda s=s, sc=sc: _blockwise(s.x, s.w, sc[0], sc[1])) for s, sc in zip(sets, scales, strict=True)
        ]
        row = {"m": m, "n": n, "k": k, "pick_tuning": list(mod.pick_tuning(m, n, k))}
        ref, terms = reference(sets[0]), magnitude(sets[0])  # the cuda backend's rule (benchmarks.problem)
        ok = {}
        for name, fns in list(variants.items()):
            try:
                out = fns[0]()
                torch.cuda.synchronize()
            except RuntimeError as e:  # a configuration CUTLASS refuses for this shape: say so, go on
                row[f"{name}_error"] = str(e).splitlines()[0][:200]
                del variants[name]
                continue
            out = outs[0] if out is None else out
            ok[name] = check(out, ref, terms).ok
        samples: dict[str, list[float]] = {name: [] for name in variants}
        names = list(variants)
        for r in range(args.rounds):
            shift = r % len(names)
            for name in names[shift:] + names[:shift]:
                samples[name] += time_samples(variants[name], dev, budget, flush)
        for name in names:
            row[name] = round(statistics.median(samples[name]), 2)
            row[f"{name}_ok"] = ok[name]
        best = min((nm for nm in names if nm.startswith("ks") and ok[nm]), key=lambda nm: row[nm], default=None)
        row["best_ks"] = best
        print(json.dumps(row), flush=True)
        rows.append(row)
        del sets, outs, variants, samples, ref, terms
        torch.cuda.empty_cache()
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "kslice_sweep.json").write_text(json.dumps(rows, indent=1) + "\n")
    print(f"\n{'m, n, k':>18} {'pick':>8} {'best ks':>8} {'us':>8} {'torch':>8} {'pick/best':>9}")
    for r in rows:
        b = r["best_ks"]
        if b is None:
            print(f"{r['m']:>6}x{r['n']}x{r['k']:<6} {r['pick_tuning']!s:>8} no accurate ks variant")
            continue
        print(
            f"{r['m']:>6}x{r['n']}x{r['k']:<6} {r['pick']:>8.1f} {b:>8} {r[b]:>8.1f} {r['torch_blockwise']:>8.1f} "
            f"{r['pick'] / r[b]:>9.2f}"
        )
    bad = [(r["m"], r["n"], r["k"], nm) for r in rows for nm in r if nm.endswith("_ok") and not r[nm]]
    print("inaccurate:", bad or "none")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
