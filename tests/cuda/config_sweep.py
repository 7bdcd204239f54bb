"""Development sweep of the CUDA backend's configurations (not collected by pytest).

For each shape: named variants of the natural-layout call (the heuristic's pick, forced configurations
with scheduler knobs, K slices) and torch's blockwise FP8, each first checked against the fp32 reference
(the cuda backend's rule) and then timed the way benchmarks.run times (L2 flushed, device time only;
interleaved call by call by default, `--interleave rounds` for blocks in rotated rounds). Prints a table
and writes config_sweep.json to --out; with call-by-call timing each row also gives torch's time over
each variant's in `--rounds` consecutive stretches (`<variant>_vs_torch`), which say how steady the ratio is.

    python3 tests/cuda/config_sweep.py --out DIR [--shapes challenge,8192x8192x8192]
        [--variants pick,c6,c7,c7r2,c5k4,torch]

A variant is `pick` (pick_tuning's choice), `torch` (F.scaled_mm blockwise), `pertensor` (cuBLAS's
per-tensor FP8 GEMM on the same operands, unit scales: a different op, timed as the speed of light of the
block-scaled one; its check fails by design), or `c<cfg>` followed by
optional knobs `r<raster>` `s<swizzle>` `p<splits>` `k<kslices>` `o<overlap_store: 0 or 1>` (see Tuning in
gemm/cuda/gemm_cuda_pick.h) and `q<seed_probe>`: the seed-A kernel of that configuration (6, 7 or 8) on the
natural call's bytes, timing only (wrong results by design, so listed as inaccurate): `q1` the kernel as
shipped, `q2`-`q5` its probes, `q6` its staged form (SeedProbe in gemm/cuda/gemm_cuda_wgmma.cu; objects built with
-DGEMM_SEED_A_EXPERIMENT, else refused).
Run 8 swept the K-sliced configuration with `c5k1,c5k2,c5k4,...`. Seed-layout variants (the same
problems passed as a, b, a_scale, b_scale): `spick` (the op's own choice), `sfused` (the fused seed
kernel), `sfused2` / `sfused4` (its timing-only diagnostic in clusters of 2 / 4 CTAs, wrong results by design:
objects built with -DGEMM_SEED_DSMEM_EXPERIMENT, see gemm/cuda/NOTES.md; `sfused2c` / `sfused4c` its control
without the copies between CTAs), `sprep` (the preparation pass of a and b
and the natural path's choice), `sraw` (the pass of b alone, and the natural path's choice reading a as it
is: Tuning.seed_a), `sstaged` (the same through the staged form: experiment builds), `seed<cfg>[p<splits>]` (the
preparation pass, then that cfg and split tail), `seedraw<cfg>[p<splits>]` (the same reading a as it is) and
`seedstaged<cfg>[p<splits>]` (through the staged form);
`spick` and `seed<cfg>` optionally followed by `nopdl` (the
GEMM launched after the preparation has finished, not as its programmatic dependent: Tuning.pdl in
gemm/cuda/gemm_cuda.h);
runs 18-19 swept the fused seed kernels of commit e32161e this way, runs 29-30 the dependent launch, runs
54-57 the shared-memory-transposing seed kernel of commit 379a35f.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import re
import statistics
import sys

import torch

ROOT = pathlib.Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.impls import _blockwise, blockwise_scale_a, blockwise_scale_b, pertensor_fp8  # noqa: E402
from benchmarks.problem import check, magnitude, make_inputs, parse_shapes, reference  # noqa: E402
from benchmarks.timing import (  # noqa: E402
    Budget,
    Flusher,
    reps_for,
    round_order,
    stretches,
    time_interleaved,
    time_samples,
    warm_up,
)
from tests.cuda.device_check import load_jit  # noqa: E402

_KNOB = re.compile(r"([rspkoq])(\d+)")
_KNOB_NAMES = {"r": "raster", "s": "swizzle", "p": "splits", "k": "kslices", "o": "overlap_store", "q": "seed_probe"}


def parse_variant(spec: str) -> dict | None:
    """'c7r2s16' -> {'cfg': 7, 'raster': 2, 'swizzle': 16}; 'pick' -> {'cfg': -1}; 'torch' -> None."""
    if spec == "torch":
        return None
    if spec == "pertensor":
        return {"pertensor": True}
    if spec == "pick":
        return {"cfg": -1}
    if m := re.fullmatch(r"sfused([24])(c?)", spec):  # the fused kernel's timing-only diagnostic, in clusters
        share = int(m.group(1)) * (10 if m.group(2) else 1)  # c: its control (Tuning.seed_fused 20 or 40)
        return {"cfg": -1, "layout": "seed", "pdl": True, "splits": 1, "fused": share}
    if spec in ("sfused", "sprep", "sraw", "sstaged"):  # the fused seed kernel, or the preparation pass
        # sprep: the pass transposes a and b; sraw: b alone, and the GEMM reads a as it is (Tuning.seed_a);
        # sstaged: the same through the staged form (experiment builds)
        knobs = {"cfg": -1, "layout": "seed", "pdl": True, "splits": 1, "fused": int(spec == "sfused")}
        return knobs | {"seed_a": {"sfused": -1, "sprep": 0, "sraw": 1, "sstaged": 2}[spec]}
    if m := re.fullmatch(r"(?:spick|seed(raw|staged)?(\d+)(?:p(\d+))?)(nopdl)?", spec):  # nopdl: Tuning.pdl off
        # spick: the op's whole choice; seed<cfg>: the preparation pass, then that configuration (seedraw<cfg>:
        # the pass on b alone, that configuration reading a as it is; seedstaged<cfg>: through the staged form)
        knobs = {"cfg": int(m.group(2) or -1), "layout": "seed", "pdl": not m.group(4), "splits": int(m.group(3) or 1)}
        seed_a = -1 if knobs["cfg"] < 0 else {None: 0, "raw": 1, "staged": 2}[m.group(1)]
        return knobs | {"fused": -1 if knobs["cfg"] < 0 else 0, "seed_a": seed_a}
    m = re.fullmatch(r"c(\d+)((?:[rspkoq]\d+)*)", spec)
    if not m:
        raise SystemExit(f"bad variant {spec!r}: want pick, torch or c<cfg>[r<n>][s<n>][p<n>][k<n>][o<0|1>][q<n>]")
    knobs = {"cfg": int(m.group(1))}
    for key, val in _KNOB.findall(m.group(2)):
        knobs[_KNOB_NAMES[key]] = bool(int(val)) if key == "o" else int(val)
    return knobs


def calls(mod, sets, outs, knobs: dict | None) -> list:
    """One call per input set: the natural layout with forced knobs, or torch's blockwise path."""
    if knobs is None:
        scales = [(blockwise_scale_a(s.x_scale), blockwise_scale_b(s.w_scale)) for s in sets]
        return [(lambda s=s, sc=sc: _blockwise(s.x, s.w, sc[0], sc[1])) for s, sc in zip(sets, scales, strict=True)]
    if knobs.get("pertensor"):
        one = torch.ones((), dtype=torch.float32, device=sets[0].x.device)
        return [(lambda s=s: pertensor_fp8(s.x, s.w, one)) for s in sets]
    if knobs.get("layout") == "seed":
        return [
            (
                lambda s=s, o=o: mod.seed_cfg(
                    o,
                    s.a,
                    s.b,
                    s.a_scale,
                    s.b_scale,
                    knobs["cfg"],
                    knobs["pdl"],
                    knobs["splits"],
                    knobs["fused"],
                    knobs["seed_a"],
                )
            )
            for s, o in zip(sets, outs, strict=True)
        ]
    return [
        (lambda s=s, o=o: mod.natural_cfg(o, s.x, s.w, s.x_scale, s.w_scale, **knobs))
        for s, o in zip(sets, outs, strict=True)
    ]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=pathlib.Path, required=True)
    ap.add_argument("--shapes", default="challenge,8192x8192x8192")
    ap.add_argument("--variants", default="pick,c6,c7,c7r2,torch")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="benchmarks' quick budget (fewer repetitions)")
    ap.add_argument("--interleave", choices=("calls", "rounds"), default="calls")
    args = ap.parse_args()
    if args.rounds < 1:
        ap.error(f"--rounds must be >= 1, got {args.rounds}")
    specs = args.variants.split(",")
    knobs_of = {spec: parse_variant(spec) for spec in specs}
    mod = load_jit()
    dev = torch.device("cuda")
    flush = Flusher(dev)
    whole_budget = Budget.for_device("cuda", quick=args.quick)
    budget = whole_budget.per_round(args.rounds)
    gen = torch.Generator().manual_seed(3)
    rows = []
    for shape in parse_shapes(args.shapes):
        m, n, k = shape.m, shape.n, shape.k
        sets = [make_inputs(shape, dev, torch.float8_e4m3fn, gen) for _ in range(3)]
        outs = [torch.empty(m, n, dtype=torch.bfloat16, device=dev) for _ in sets]
        row = {"m": m, "n": n, "k": k, "pick_tuning": list(mod.pick_tuning(m, n, k))}
        ref, terms = reference(sets[0]), magnitude(sets[0])  # the cuda backend's rule (benchmarks.problem)
        variants, ok = {}, {}
        for spec in specs:
            fns = calls(mod, sets, outs, knobs_of[spec])
            outs[0].fill_(float("nan"))  # an unwritten element fails the check
            try:
                out = fns[0]()
                torch.cuda.synchronize()
            except (RuntimeError, ValueError) as e:  # a variant refused for this shape: say so, go on
                row[f"{spec}_error"] = str(e).splitlines()[0][:200]
                continue
            out = outs[0] if out is None else out
            # pertensor computes a different op (unit scales): its check is not a verdict (None)
            ok[spec] = None if knobs_of[spec] and knobs_of[spec].get("pertensor") else check(out, ref, terms).ok
            variants[spec] = fns
        samples: dict[str, list[float]] = {spec: [] for spec in variants}
        names = list(variants)
        if args.interleave == "calls" and names:
            warmed = [warm_up(variants[spec], dev, whole_budget) for spec in names]
            # the same count for every variant (they take similar times), so that stretch j of each covers
            # the same calls' time
            reps = [reps_for(whole_budget, max(est for est, _ in warmed))] * len(names)
            got = time_interleaved([variants[s] for s in names], dev, reps, [h for _, h in warmed], flush)
            samples = dict(zip(names, got, strict=True))
            if "torch" in samples:  # torch's time over each variant's, stretch by stretch
                theirs = stretches(samples["torch"], args.rounds)
                for spec in names:
                    ours = stretches(samples[spec], args.rounds)
                    row[f"{spec}_vs_torch"] = [
                        round(statistics.median(t) / statistics.median(o), 4) for t, o in zip(theirs, ours, strict=True)
                    ]
        for r in range(args.rounds if args.interleave == "rounds" else 0):
            for spec in round_order(names, r, args.rounds):
                samples[spec] += time_samples(variants[spec], dev, budget, flush)
        for spec in names:
            row[spec] = round(statistics.median(samples[spec]), 2)
            row[f"{spec}_ok"] = ok[spec]
        ours = [s for s in names if s != "torch" and ok[s]]
        row["best"] = min(ours, key=lambda s: row[s], default=None)
        print(json.dumps(row), flush=True)
        rows.append(row)
        del sets, outs, variants, samples, ref, terms
        torch.cuda.empty_cache()
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "config_sweep.json").write_text(json.dumps(rows, indent=1) + "\n")
    shown = [s for s in specs if s != "torch"]
    head = " ".join(f"{s:>9}" for s in shown)
    print(f"\n{'m x n x k':>18} {head} {'torch':>9} {'best':>9} {'torch/best':>10}")
    for r in rows:
        cells = " ".join(f"{r[s]:>9.1f}" if s in r else f"{'-':>9}" for s in shown)
        b = r["best"]
        tail = f"{r['torch']:>9.1f} {b:>9} {r['torch'] / r[b]:>10.3f}" if b and "torch" in r else ""
        print(f"{r['m']:>6}x{r['n']}x{r['k']:<6} {cells} {tail}")
    bad = [(r["m"], r["n"], r["k"], s) for r in rows for s in specs if r.get(f"{s}_ok") is False]
    refused = [(r["m"], r["n"], r["k"], s) for r in rows for s in specs if f"{s}_error" in r]
    print("inaccurate:", bad or "none")
    print("refused:", refused or "none")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
