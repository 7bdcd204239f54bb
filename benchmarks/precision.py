"""How far FP8 tensor-core accumulation lands from exact arithmetic, measured on the GPU at hand.

The contract's pass rule is elementwise: |out - ref| <= 1e-3 + 2e-2 |ref|. Where outputs cancel to near
zero, only the 1e-3 term is left, so any accumulation that keeps fewer bits than fp32 misses it on a few
elements. This script measures, per shape and per way of computing the op:

- strict_bad: elements outside the contract's rule (bf16 outputs against the exact reference);
- c_needed: the smallest c such that |out - ref| <= 1e-3 + 2e-2 |ref| + c * S holds for every element, where
  S = sum over k of |a_scale * A| * |b_scale * B| (the sum of the terms' magnitudes: the quantity that
  floating-point dot-product error bounds scale with);
- rel_fro: relative Frobenius error.

Ways of computing it: this kernel (both layouts, loaded through `kernels` from a build dir); torch's
blockwise `F.scaled_mm`; emulated promotion every 32 or 128 of K (torch._scaled_mm per chunk of K with
unit scales, fp32 out, chunks scaled and summed in float64: the accumulation a kernel that promotes every
wgmma (32) or every scale block (128) would have); the fp32 CUDA-core reference rounded to bf16.
The exact reference is float64.

    python -m benchmarks.precision --build-dir build --out benchmarks/results/h200
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from .problem import ATOL, BLOCK, RTOL, dequantize_w, dequantize_x, make_inputs, parse_shapes, reference

DEFAULT_SHAPES = "64x64x128,4096x4096x128,6144x7168x256,128x512x7168,1024x4096x512,1024x1536x7168,6144x512x7168"


def exact(x: torch.Tensor, sx: torch.Tensor, w: torch.Tensor, sw: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """float64 reference and S = sum_k |terms| (both (M, N), float64)."""
    xd = dequantize_x(x, sx).double()
    wd = dequantize_w(w, sw).double()
    return xd @ wd.t(), xd.abs() @ wd.abs().t()


def chunked_fp8(x, sx, w, sw, chunk: int) -> torch.Tensor:
    """Sum over K-chunks of an FP8 tensor-core product (torch._scaled_mm, unit scales, fp32 out), each chunk
    scaled by its block scales and added in float64: promotion every `chunk` of K, exactly."""
    m, k = x.shape
    n = w.shape[0]
    one = torch.ones((), dtype=torch.float32, device=x.device)
    sw_rows = sw.repeat_interleave(BLOCK, dim=0)[:n]  # (N, K/128)
    acc = torch.zeros(m, n, dtype=torch.float64, device=x.device)
    for k0 in range(0, k, chunk):
        part = torch._scaled_mm(
            x[:, k0 : k0 + chunk].contiguous(),
            w[:, k0 : k0 + chunk].contiguous().t(),
            scale_a=one,
            scale_b=one,
            out_dtype=torch.float32,
        )
        kb = k0 // BLOCK
        acc += part.double() * (sx[:, kb : kb + 1].double() * sw_rows[:, kb].double()[None, :])
    return acc


def chunk_error(x, w, chunk: int) -> float:
    """max |fp8 tensor-core dot product - exact| / sum |terms| over every chunk of one instruction's K."""
    one = torch.ones((), dtype=torch.float32, device=x.device)
    worst = 0.0
    for k0 in range(0, x.shape[1], chunk):
        xs, ws = x[:, k0 : k0 + chunk].contiguous(), w[:, k0 : k0 + chunk].contiguous()
        got = torch._scaled_mm(xs, ws.t(), scale_a=one, scale_b=one, out_dtype=torch.float32).double()
        xd, wd = xs.double(), ws.double()
        worst = max(worst, float(((got - xd @ wd.t()).abs() / (xd.abs() @ wd.abs().t()).clamp_min(1e-300)).max()))
    return worst


def measure(out: torch.Tensor, ref: torch.Tensor, absum: torch.Tensor) -> dict:
    o = out.double()
    err = (o - ref).abs()
    allowed = ATOL + RTOL * ref.abs()
    bad = int((err > allowed).sum())
    c_needed = float(((err - allowed).clamp_min(0) / absum.clamp_min(1e-300)).max())
    return {
        "strict_bad": bad,
        "strict_bad_fraction": bad / out.numel(),
        "c_needed": c_needed,
        "max_abs_err": float(err.max()),
        "rel_fro": float((o - ref).norm() / ref.norm()),
        "finite": bool(torch.isfinite(o).all()),
    }


def methods(kernel, inp):
    x, w, sx, sw = inp.x, inp.w, inp.x_scale, inp.w_scale
    out = {}
    if kernel is not None:
        out["ours_natural"] = lambda: kernel.gemm_natural(x, w, sx, sw)
        out["ours_seed"] = lambda: kernel.gemm(inp.a, inp.b, inp.a_scale, inp.b_scale)
    from .impls import _blockwise, blockwise_scale_a, blockwise_scale_b

    out["torch_blockwise"] = lambda: _blockwise(x, w, blockwise_scale_a(sx), blockwise_scale_b(sw))
    out["promote_every_32"] = lambda: chunked_fp8(x, sx, w, sw, 32).float().to(torch.bfloat16)
    out["promote_every_128"] = lambda: chunked_fp8(x, sx, w, sw, 128).float().to(torch.bfloat16)

    out["fp32_cuda_cores"] = lambda: reference(inp).to(torch.bfloat16)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default=DEFAULT_SHAPES)
    ap.add_argument("--build-dir", type=Path, default=None, help="a built variant dir (parent of it) to include")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("precision: needs a CUDA GPU (FP8 tensor cores)", file=sys.stderr)
        return 2
    kernel = None
    if args.build_dir is not None:
        from .run import load_kernel

        kernel, _, _ = load_kernel(args.build_dir)
    gen = torch.Generator().manual_seed(args.seed)
    rows = []
    for shape in parse_shapes(args.shapes):
        inp = make_inputs(shape, "cuda", torch.float8_e4m3fn, gen)
        ref, absum = exact(inp.x, inp.x_scale, inp.w, inp.w_scale)
        for name, fn in methods(kernel, inp).items():
            try:
                row = {"shape": shape.id, "method": name, **measure(fn(), ref, absum)}
            except Exception as e:  # a path this GPU or torch lacks: say so, keep going
                row = {"shape": shape.id, "method": name, "error": f"{type(e).__name__}: {e}"[:300]}
            rows.append(row)
            print(json.dumps(row), flush=True)
        for chunk in (32, 128):
            row = {"shape": shape.id, "method": f"one_product_of_k{chunk}", "u_eff": chunk_error(inp.x, inp.w, chunk)}
            rows.append(row)
            print(json.dumps(row), flush=True)
        del inp, ref, absum
    doc = {
        "schema": "gemm-precision/1",
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "rule": f"|out - ref| <= {ATOL} + {RTOL}|ref| (+ c * sum|terms| for c_needed); ref exact (float64)",
        "rows": rows,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "precision.json"
    path.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"\n{'shape':>16} {'method':>20} {'strict_bad':>10} {'fraction':>9} {'c_needed':>9} {'rel_fro':>9}")
    for r in rows:
        if "strict_bad" in r:
            print(
                f"{r['shape']:>16} {r['method']:>20} {r['strict_bad']:>10} {r['strict_bad_fraction']:>9.2e} "
                f"{r['c_needed']:>9.2e} {r['rel_fro']:>9.2e}"
            )
        elif "u_eff" in r:
            print(f"{r['shape']:>16} {r['method']:>20}  max |err| / sum|terms| = {r['u_eff']:.3e}")
        else:
            print(f"{r['shape']:>16} {r['method']:>20}  {r['error']}")
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
