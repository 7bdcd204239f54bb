"""Development driver for the CUDA backend on a GPU machine: one call builds, checks and times.

Not collected by pytest (no test_ prefix); run on a Hopper machine:

    python3 tests/cuda/device_check.py --out DIR [--prebuilt DIR] [--skip-bench]

Steps: (1) JIT-build the backend with torch.utils.cpp_extension (tests/cuda/jit_binding.cpp +
gemm/cuda/*.cu; torch-free objects compiled ahead with the same nvcc can be linked instead of compiled
via --prebuilt), (2) correctness on the 29 contract shapes plus odd/random ones, both layouts, every
compiled configuration, NaN-poisoned outputs, signed scales, against an fp32 reference, (3) timing of
every configuration on the 18 challenge shapes and 8192^3 beside torch's blockwise FP8, per-tensor FP8
cuBLAS, bf16 cuBLAS and transpose + torch blockwise, with L2 flushed and 4 input sets rotating.
Writes results.json, tables.md and the log under --out.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import math
import os
import pathlib
import sys
import time

import torch

ROOT = pathlib.Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
FP8 = torch.float8_e4m3fn
BLOCK = 128

from benchmarks.problem import BENCH_SHAPES, TEST_SHAPES  # noqa: E402  (the contract's shape lists)

EXTRA_SHAPES = [
    (1, 1, 128),
    (1, 7168, 512),
    (3, 5, 256),
    (200, 300, 640),
    (129, 257, 384),
    (17, 1000, 1280),
    (250, 130, 128),
    (1000, 24, 256),
    (33, 136, 2048),
]


def cutlass_include_dirs() -> list[str]:
    spec = importlib.util.find_spec("cutlass_library")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("nvidia-cutlass (cutlass_library) is not importable: install the wheel")
    base = pathlib.Path(list(spec.submodule_search_locations)[0]) / "source"
    return [str(base / "include"), str(base / "tools" / "util" / "include")]


# nvcc flags of the JIT build's CUDA sources (and of tests/cuda/prebuild.py's objects, which it links instead).
JIT_NVCC_FLAGS = (
    "-O3",
    "-DNDEBUG",
    "-DCUDA_KERNEL",
    "--expt-relaxed-constexpr",
    "-std=c++20",
    "-U__CUDA_NO_HALF_OPERATORS__",
    "-U__CUDA_NO_HALF_CONVERSIONS__",
    "-U__CUDA_NO_BFLOAT16_CONVERSIONS__",
    "-U__CUDA_NO_HALF2_OPERATORS__",
)


def load_jit(prebuilt: str | None = None, verbose: bool = False):
    """The backend as a JIT extension (with the tuning binding). `prebuilt` (or $GEMM_CUDA_PREBUILT): a
    directory of <stem>.o for every gemm_cuda_*.cu, so that only the torch-facing files compile here.
    The two kinds build under different names: one name for both would make each call with the other
    kind rebuild it, and a build killed by a timeout leaves torch's build lock behind, on which the next
    call waits forever (run 24 lost two calls so)."""
    from torch.utils.cpp_extension import load

    prebuilt = prebuilt or os.environ.get("GEMM_CUDA_PREBUILT") or None
    os.environ.setdefault("TORCH_CUDA_ARCH_LIST", "9.0a")
    cuda_dir = ROOT / "gemm" / "cuda"
    others = sorted(p for p in cuda_dir.glob("gemm_cuda_*.cu"))
    sources = [ROOT / "tests" / "cuda" / "jit_binding.cpp", cuda_dir / "gemm_cuda.cu"]
    ldflags: list[str] = []
    if prebuilt:
        ldflags = [str(pathlib.Path(prebuilt).resolve() / f"{p.stem}.o") for p in others]
        missing = [f for f in ldflags if not os.path.exists(f)]
        if missing:
            raise SystemExit(f"prebuilt objects missing: {missing}")
    else:
        sources += others
    flags = list(JIT_NVCC_FLAGS)
    # $GEMM_CUDA_EXTRA_FLAGS: more nvcc flags for the sources compiled here, e.g. -DGEMM_SEED_DSMEM_EXPERIMENT
    # (the fused seed kernel's diagnostic, gemm/cuda/NOTES.md); a build of its own name, as above.
    extra = os.environ.get("GEMM_CUDA_EXTRA_FLAGS", "").split()
    flags += extra
    suffix = "_" + hashlib.sha256(" ".join(extra).encode()).hexdigest()[:8] if extra else ""
    return load(
        name=("gemm_cuda_jit_prebuilt" if prebuilt else "gemm_cuda_jit") + suffix,
        sources=[str(s) for s in sources],
        extra_include_paths=cutlass_include_dirs() + [str(cuda_dir), str(ROOT / "torch-ext")],
        extra_cflags=["-O2", "-DCUDA_KERNEL"],
        extra_cuda_cflags=flags,
        extra_ldflags=ldflags,
        verbose=verbose,
    )


# ------------------------------------------------------------------------------------------------
# inputs and reference
# ------------------------------------------------------------------------------------------------


def make_inputs(m: int, n: int, k: int, gen: torch.Generator, dev="cuda"):
    kb, nb = k // BLOCK, (n + BLOCK - 1) // BLOCK
    x = torch.randn(m, k, generator=gen, device=dev).to(FP8)
    w = torch.randn(n, k, generator=gen, device=dev).to(FP8)
    xs = torch.randn(m, kb, generator=gen, device=dev)
    ws = torch.randn(nb, kb, generator=gen, device=dev)
    return x, w, xs, ws


def to_seed(x, w, xs, ws):
    return x.t().contiguous(), w.t().contiguous(), xs.t().contiguous(), ws.t().contiguous()


def _dequantized(x, w, xs, ws) -> tuple[torch.Tensor, torch.Tensor]:
    from benchmarks.problem import dequantize_w, dequantize_x

    return dequantize_x(x, xs), dequantize_w(w, ws)


def reference(x, w, xs, ws) -> torch.Tensor:
    xf, wf = _dequantized(x, w, xs, ws)
    return xf @ wf.t()


def magnitude(x, w, xs, ws) -> torch.Tensor:
    """sum_k |terms| per output: what the accumulation allowance scales (benchmarks.problem)."""
    xf, wf = _dequantized(x, w, xs, ws)
    return xf.abs() @ wf.abs().t()


def check_close(out: torch.Tensor, ref: torch.Tensor, terms: torch.Tensor | None = None) -> dict:
    """ok = the contract's elementwise tolerance, else (given terms) benchmarks.problem.check's
    accumulation allowance."""
    from benchmarks.problem import check

    verdict = check(out, ref, terms)
    o = out.float()
    finite = bool(torch.isfinite(o).all())
    diff = (o - ref).abs()
    tol = 1e-3 + 2e-2 * ref.abs()
    bad = int((diff > tol).sum()) if finite else o.numel()
    rel = float(torch.linalg.vector_norm(o - ref) / torch.linalg.vector_norm(ref).clamp_min(1e-30))
    return {
        "ok": finite and verdict.ok,
        "mode": verdict.mode,
        "finite": finite,
        "bad": bad,
        "rel_fro": rel,
        "max_abs": float(diff.max()) if finite else float("nan"),
    }


# ------------------------------------------------------------------------------------------------
# correctness
# ------------------------------------------------------------------------------------------------


def correctness(mod, log, extra: bool = True) -> dict:
    gen = torch.Generator(device="cuda")
    gen.manual_seed(1234)
    results = []
    ncfg = mod.num_configs()
    decode = {c for c in range(ncfg) if "decode" in mod.config_name(c)}
    shapes = [*TEST_SHAPES, *BENCH_SHAPES, *(EXTRA_SHAPES if extra else [])]
    rng = torch.Generator().manual_seed(99)
    for _ in range(8):  # random shapes
        m = int(torch.randint(1, 700, (1,), generator=rng))
        n = int(torch.randint(1, 900, (1,), generator=rng))
        k = BLOCK * int(torch.randint(1, 12, (1,), generator=rng))
        shapes.append((m, n, k))
    for m, n, k in shapes:
        x, w, xs, ws = make_inputs(m, n, k, gen)
        ref, terms = reference(x, w, xs, ws), magnitude(x, w, xs, ws)
        a, b, sa, sb = to_seed(x, w, xs, ws)
        # every configuration on shapes small enough; the decode one takes M <= 64 only
        cfgs = [-1] + ([c for c in range(ncfg) if m <= 64 or c not in decode] if (m * n * k <= 2**33) else [])
        for layout in ("natural", "seed"):
            for cfg in cfgs:
                out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
                try:
                    if layout == "natural":
                        mod.natural_cfg(out, x, w, xs, ws, cfg)
                    else:
                        mod.seed_cfg(out, a, b, sa, sb, cfg)
                    torch.cuda.synchronize()
                    r = check_close(out, ref, terms)
                except Exception as e:  # noqa: BLE001 - report every failure, keep going
                    r = {"ok": False, "error": repr(e)[:300]}
                r.update({"m": m, "n": n, "k": k, "layout": layout, "cfg": cfg})
                results.append(r)
                if not r["ok"]:
                    log(f"FAIL {layout} cfg={cfg} {m}x{n}x{k}: {r}")
        del x, w, xs, ws, ref, a, b, sa, sb
    # determinism: same inputs twice give the same bits (no races between CTAs)
    x, w, xs, ws = make_inputs(1024, 4608, 7168, gen)
    o1 = torch.empty(1024, 4608, device="cuda", dtype=torch.bfloat16)
    o2 = torch.empty_like(o1)
    mod.gemm_natural(o1, x, w, xs, ws)
    mod.gemm_natural(o2, x, w, xs, ws)
    torch.cuda.synchronize()
    deterministic = bool(torch.equal(o1, o2))
    n_ok = sum(r["ok"] for r in results)
    log(f"correctness: {n_ok}/{len(results)} cases passed; deterministic={deterministic}")
    worst = max((r.get("rel_fro", 0.0) for r in results if r["ok"]), default=0.0)
    log(f"worst relative Frobenius error among passing cases: {worst:.3e}")
    return {"cases": results, "passed": n_ok, "total": len(results), "deterministic": deterministic}


# ------------------------------------------------------------------------------------------------
# timing
# ------------------------------------------------------------------------------------------------


def bench(fn, nsets: int, warmup: int = 25, rep: int = 100) -> float:
    from triton.testing import do_bench

    state = {"i": 0}

    def call():
        fn(state["i"] % nsets)
        state["i"] += 1

    return do_bench(call, warmup=warmup, rep=rep, return_mode="median") * 1e3  # us


def time_shape(mod, log, m: int, n: int, k: int, nsets: int, gen, sweep: bool) -> dict:
    import torch.nn.functional as F

    ncfg = mod.num_configs()
    one = torch.ones((), device="cuda")
    kb, nb = k // BLOCK, (n + BLOCK - 1) // BLOCK
    l4 = (kb + 3) // 4 * 4
    sets = []
    for _ in range(nsets):
        x, w, xs, ws = make_inputs(m, n, k, gen)
        a, b, sa, sb = to_seed(x, w, xs, ws)
        sbp = torch.zeros(nb, l4, device="cuda")
        sbp[:, :kb] = ws
        sets.append(
            {
                "x": x,
                "w": w,
                "xs": xs,
                "ws": ws,
                "a": a,
                "b": b,
                "sa": sa,
                "sb": sb,
                "t_sa": xs.t().contiguous().t(),
                "t_sb": sbp.t(),
                "xb": (x.float() * xs.repeat_interleave(BLOCK, 1)).bfloat16(),
                "wb": (w.float() * ws.repeat_interleave(BLOCK, 0)[:n].repeat_interleave(BLOCK, 1)).bfloat16(),
                "out": torch.empty(m, n, device="cuda", dtype=torch.bfloat16),
                "px": torch.empty(m, k, device="cuda", dtype=FP8),
                "pw": torch.empty(n, k, device="cuda", dtype=FP8),
                "psx": torch.empty(m, kb, device="cuda"),
                "psw": torch.empty(nb, kb, device="cuda"),
            }
        )
    flops = 2.0 * m * n * k
    row = {"m": m, "n": n, "k": k, "pick": mod.pick_tuning(m, n, k)}

    def t(name, fn, warmup=25, rep=100):
        try:
            us = bench(fn, nsets, warmup, rep)
            row[name] = us
        except Exception as e:  # noqa: BLE001
            row[name] = None
            row[name + "_error"] = repr(e)[:300]
            log(f"  {name} failed: {e!r}"[:400])

    for c in range(ncfg):
        t(
            f"cfg{c}",
            lambda i, c=c: mod.natural_cfg(sets[i]["out"], sets[i]["x"], sets[i]["w"], sets[i]["xs"], sets[i]["ws"], c),
            10,
            50,
        )
    if sweep:
        for c, r, sw, sp in SWEEP:
            t(
                f"var_{c}_{r}_{sw}_{sp}",
                lambda i, c=c, r=r, sw=sw, sp=sp: mod.natural_cfg(
                    sets[i]["out"], sets[i]["x"], sets[i]["w"], sets[i]["xs"], sets[i]["ws"], c, r, sw, sp
                ),
                10,
                30,
            )
    t(
        "ours_natural",
        lambda i: mod.gemm_natural(sets[i]["out"], sets[i]["x"], sets[i]["w"], sets[i]["xs"], sets[i]["ws"]),
    )
    t("ours_seed", lambda i: mod.gemm_seed(sets[i]["out"], sets[i]["a"], sets[i]["b"], sets[i]["sa"], sets[i]["sb"]))
    t(
        "seed_prep",
        lambda i: mod.seed_prepare(
            sets[i]["px"],
            sets[i]["pw"],
            sets[i]["psx"],
            sets[i]["psw"],
            sets[i]["a"],
            sets[i]["b"],
            sets[i]["sa"],
            sets[i]["sb"],
        ),
    )

    def torch_bw(i):
        s = sets[i]
        return F.scaled_mm(
            s["x"],
            s["w"].t(),
            s["t_sa"],
            F.ScalingType.BlockWise1x128,
            s["t_sb"],
            F.ScalingType.BlockWise128x128,
            output_dtype=torch.bfloat16,
        )

    t("torch_blockwise", torch_bw)
    t("fp8_per_tensor", lambda i: torch._scaled_mm(sets[i]["x"], sets[i]["w"].t(), one, one, out_dtype=torch.bfloat16))
    t(
        "fp8_per_tensor_fast",
        lambda i: torch._scaled_mm(
            sets[i]["x"], sets[i]["w"].t(), one, one, out_dtype=torch.bfloat16, use_fast_accum=True
        ),
    )
    t("bf16", lambda i: sets[i]["xb"] @ sets[i]["wb"].t())

    def seed_torch(i):
        s = sets[i]
        xt = s["a"].t().contiguous()
        wt = s["b"].t().contiguous()
        return F.scaled_mm(
            xt,
            wt.t(),
            s["sa"].t(),
            F.ScalingType.BlockWise1x128,
            s["t_sb"],
            F.ScalingType.BlockWise128x128,
            output_dtype=torch.bfloat16,
        )

    t("seed_transpose_torch_blockwise", seed_torch)
    # correctness of the torch baseline on set 0 (so the comparison is like for like)
    try:
        ins = (sets[0]["x"], sets[0]["w"], sets[0]["xs"], sets[0]["ws"])
        ref, terms = reference(*ins), magnitude(*ins)
        row["torch_blockwise_check"] = check_close(torch_bw(0), ref, terms)
        mod.gemm_natural(sets[0]["out"], *ins)
        row["ours_check"] = check_close(sets[0]["out"], ref, terms)
        del ref, terms
    except Exception as e:  # noqa: BLE001
        row["check_error"] = repr(e)[:300]
    variants = {
        key: v for key, v in row.items() if (key.startswith("cfg") or key.startswith("var_")) and isinstance(v, float)
    }
    if variants:
        best = min(variants, key=variants.get)
        row["best_variant"], row["best_variant_us"] = best, variants[best]
    row["flops"] = flops
    prep_bytes = 2 * (m * k + n * k)
    if row.get("seed_prep"):
        row["seed_prep_GBps"] = prep_bytes / (row["seed_prep"] * 1e-6) / 1e9
    cfgs = " ".join(f"{row.get(f'cfg{c}') or float('nan'):7.1f}" for c in range(ncfg))
    log(
        f"{m:5d} {n:5d} {k:5d} | ours {row.get('ours_natural') or float('nan'):7.1f} seed "
        f"{row.get('ours_seed') or float('nan'):7.1f} prep {row.get('seed_prep') or float('nan'):6.1f} | "
        f"torch {row.get('torch_blockwise') or float('nan'):7.1f} pt {row.get('fp8_per_tensor') or float('nan'):7.1f} "
        f"ptfast {row.get('fp8_per_tensor_fast') or float('nan'):7.1f} bf16 {row.get('bf16') or float('nan'):7.1f} "
        f"seedtorch {row.get('seed_transpose_torch_blockwise') or float('nan'):7.1f} | cfgs {cfgs} "
        f"| pick {row['pick']} | best {row.get('best_variant')} {row.get('best_variant_us') or float('nan'):.1f}"
    )
    return row


# (cfg, raster, swizzle, splits) variants timed besides each configuration's defaults
SWEEP = [
    (0, 1, 1, 1),
    (0, 2, 1, 1),
    (0, 1, 4, 1),
    (0, 2, 4, 1),
    (2, 1, 1, 1),
    (2, 2, 1, 1),
    (2, 1, 4, 1),
    (2, 2, 4, 1),
    (1, 0, 1, 2),
    (1, 0, 1, 4),
    (3, 2, 4, 1),
    (4, 1, 4, 1),
]


def timing(mod, log, nsets: int = 4, shapes=None, sweep: bool = True) -> list[dict]:
    gen = torch.Generator(device="cuda")
    gen.manual_seed(4321)
    rows = []
    shapes = shapes or [*BENCH_SHAPES, (8192, 8192, 8192)]
    for m, n, k in shapes:
        rows.append(time_shape(mod, log, m, n, k, nsets, gen, sweep))
        torch.cuda.empty_cache()
    return rows


def tables(rows: list[dict], ncfg: int, names: list[str]) -> str:
    def tf(row, key):
        v = row.get(key)
        return f"{v:.1f} ({row['flops'] / (v * 1e-6) / 1e12:.0f})" if v else "-"

    out = [
        "| m, n, k | ours natural us (TFLOP/s) | ours seed | torch blockwise | fp8 per-tensor | "
        "fp8 per-tensor fast | bf16 | transpose+torch bw | torch/ours | seed/natural | ours/per-tensor |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    ratios, seed_ratios = [], []
    for r in rows:
        ours, tb = r.get("ours_natural"), r.get("torch_blockwise")
        seed, pt = r.get("ours_seed"), r.get("fp8_per_tensor")
        ratio = tb / ours if ours and tb else None
        sr = seed / ours if ours and seed else None
        if ratio and (r["m"], r["n"], r["k"]) != (8192, 8192, 8192):
            ratios.append(ratio)
        if sr and (r["m"], r["n"], r["k"]) != (8192, 8192, 8192):
            seed_ratios.append(sr)
        out.append(
            f"| {r['m']}, {r['n']}, {r['k']} | {tf(r, 'ours_natural')} | {tf(r, 'ours_seed')} | "
            f"{tf(r, 'torch_blockwise')} | {tf(r, 'fp8_per_tensor')} | {tf(r, 'fp8_per_tensor_fast')} | "
            f"{tf(r, 'bf16')} | {tf(r, 'seed_transpose_torch_blockwise')} | "
            f"{ratio or float('nan'):.3f} | {sr or float('nan'):.3f} | "
            f"{(pt / ours) if pt and ours else float('nan'):.3f} |"
        )
    if ratios:
        gm = math.exp(sum(map(math.log, ratios)) / len(ratios))
        out.append(
            f"\ngeomean torch_blockwise/ours over {len(ratios)} challenge shapes: {gm:.3f}; min {min(ratios):.3f}"
        )
    if seed_ratios:
        gs = math.exp(sum(map(math.log, seed_ratios)) / len(seed_ratios))
        out.append(f"geomean seed/natural: {gs:.3f}; max {max(seed_ratios):.3f}")
    out.append("\n| m, n, k | pick | " + " | ".join(names) + " | best variant (cfg_raster_swizzle_splits) |")
    out.append("|---|---:|" + "---:|" * ncfg + "---|")
    for r in rows:
        vals = " | ".join(f"{r.get(f'cfg{c}'):.1f}" if r.get(f"cfg{c}") else "-" for c in range(ncfg))
        out.append(
            f"| {r['m']}, {r['n']}, {r['k']} | {r['pick']} | {vals} | "
            f"{r.get('best_variant')} {r.get('best_variant_us') or float('nan'):.1f} |"
        )
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/gemm_cuda_out"))
    ap.add_argument("--prebuilt", default=None)
    ap.add_argument("--skip-bench", action="store_true")
    ap.add_argument("--skip-check", action="store_true")
    ap.add_argument("--nsets", type=int, default=4)
    ap.add_argument("--build-only", action="store_true")
    ap.add_argument("--no-extra", action="store_true", help="leave EXTRA_SHAPES out of the correctness pass")
    args = ap.parse_args()
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    logf = open(out / "device_check.log", "a")

    def log(msg: str):
        print(msg, flush=True)
        logf.write(msg + "\n")
        logf.flush()

    torch.backends.cuda.matmul.allow_tf32 = False
    props = torch.cuda.get_device_properties(0)
    log(f"device: {props.name} sms={props.multi_processor_count} torch={torch.__version__} cuda={torch.version.cuda}")
    t0 = time.time()
    mod = load_jit(args.prebuilt, verbose=False)
    log(f"build+load: {time.time() - t0:.1f}s")
    names = [mod.config_name(c) for c in range(mod.num_configs())]
    log(f"configs: {names}")
    result = {"device": props.name, "torch": torch.__version__, "configs": names}
    if args.build_only:
        return 0
    if not args.skip_check:
        t0 = time.time()
        result["correctness"] = correctness(mod, log, extra=not args.no_extra)
        log(f"correctness took {time.time() - t0:.1f}s")
    if not args.skip_bench:
        t0 = time.time()
        rows = timing(mod, log, nsets=args.nsets)
        result["timing"] = rows
        tab = tables(rows, mod.num_configs(), names)
        (out / "tables.md").write_text(tab + "\n")
        log(tab)
        log(f"timing took {time.time() - t0:.1f}s")
    (out / "results.json").write_text(json.dumps(result, indent=1, default=str))
    ok = result.get("correctness", {}).get("passed", 0) == result.get("correctness", {}).get("total", 0)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
