"""Device-side probes for the CUDA backend (not collected by pytest).

    python3 tests/cuda/probe.py crash [--prebuilt DIR]      # each odd shape in its own process
    python3 tests/cuda/probe.py one M N K LAYOUT            # one call (used by `crash`)
    python3 tests/cuda/probe.py precision                   # ours vs torch blockwise vs fp32/fp64 refs

`precision` answers: do the elementwise failures against the contract tolerance come from this
kernel, or from FP8 tensor-core accumulation that torch's own blockwise path shares?
"""

from __future__ import annotations

import pathlib
import subprocess
import sys

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import device_check as dc  # noqa: E402


def one(m: int, n: int, k: int, layout: str) -> int:
    mod = dc.load_jit()
    gen = torch.Generator(device="cuda")
    gen.manual_seed(11)
    x, w, xs, ws = dc.make_inputs(m, n, k, gen)
    ref = dc.reference(x, w, xs, ws)
    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    if layout == "natural":
        mod.gemm_natural(out, x, w, xs, ws)
    else:
        mod.gemm_seed(out, *dc.to_seed(x, w, xs, ws))
    torch.cuda.synchronize()
    r = dc.check_close(out, ref)
    print(f"one {m}x{n}x{k} {layout}: {r}", flush=True)
    return 0 if r["finite"] and r["rel_fro"] < 5e-3 else 1


def crash() -> int:
    bad = 0
    for m, n, k in dc.EXTRA_SHAPES:
        for layout in ("natural", "seed"):
            p = subprocess.run(
                [sys.executable, "-X", "faulthandler", __file__, "one", str(m), str(n), str(k), layout],
                capture_output=True,
                text=True,
                timeout=300,
            )
            tail = (p.stdout + p.stderr).strip().splitlines()[-3:]
            print(f"{m}x{n}x{k} {layout}: rc={p.returncode} {' | '.join(tail)[:600]}", flush=True)
            bad += p.returncode != 0
    return 1 if bad else 0


def precision() -> int:
    import torch.nn.functional as F

    mod = dc.load_jit()
    gen = torch.Generator(device="cuda")
    gen.manual_seed(3)
    for m, n, k in [(64, 64, 128), (512, 512, 128), (1024, 1536, 7168), (1024, 4096, 512)]:
        x, w, xs, ws = dc.make_inputs(m, n, k, gen)
        kb, nb = k // 128, (n + 127) // 128
        l4 = (kb + 3) // 4 * 4
        sbp = torch.zeros(nb, l4, device="cuda")
        sbp[:, :kb] = ws
        ours = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        mod.gemm_natural(ours, x, w, xs, ws)
        tb = F.scaled_mm(
            x,
            w.t(),
            xs.t().contiguous().t(),
            F.ScalingType.BlockWise1x128,
            sbp.t(),
            F.ScalingType.BlockWise128x128,
            output_dtype=torch.bfloat16,
        )
        ref32 = dc.reference(x, w, xs, ws)
        xd = x.double() * xs.double().repeat_interleave(128, 1)
        wd = w.double() * ws.double().repeat_interleave(128, 0)[:n].repeat_interleave(128, 1)
        ref64 = xd @ wd.t()
        # exact-in-bf16 check: round the fp64 reference to bf16 and compare
        for name, o in (("ours", ours), ("torch_blockwise", tb), ("ref32_bf16", ref32.bfloat16())):
            r32 = dc.check_close(o, ref32)
            r64 = dc.check_close(o, ref64.float())
            err = (o.double() - ref64).abs()
            print(
                f"{m}x{n}x{k} {name:16s} vs ref32: bad={r32['bad']} rel={r32['rel_fro']:.3e} "
                f"max_abs={r32['max_abs']:.3e} | vs ref64: bad={r64['bad']} max_abs={float(err.max()):.3e} "
                f"mean_abs={float(err.mean()):.3e}",
                flush=True,
            )
        d = (ours.double() - tb.double()).abs()
        print(
            f"{m}x{n}x{k} ours-vs-torch: max_abs={float(d.max()):.3e} "
            f"equal_frac={float((d == 0).double().mean()):.3f}"
            f" | |ref| mean={float(ref64.abs().mean()):.2f}",
            flush=True,
        )
    return 0


def throw(build_dir: str) -> int:
    """A direct op call with a bad b_scale through the built variant: must raise RuntimeError."""
    from kernels import get_local_kernel

    k = get_local_kernel(pathlib.Path(build_dir))
    a = torch.randn(256, 64, device="cuda").to(torch.float8_e4m3fn)
    b = torch.randn(256, 64, device="cuda").to(torch.float8_e4m3fn)
    sa = torch.randn(2, 64, device="cuda")
    sb = torch.randn(2, 1, device="cuda")[:, :0].contiguous()  # wrong shape (2, 0)
    c = torch.empty(64, 64, device="cuda", dtype=torch.bfloat16)
    print("calling ops.gemm with a bad b_scale", flush=True)
    try:
        k.ops.gemm(a, b, sa, sb, c)
    except RuntimeError as e:
        print("raised RuntimeError as expected:", str(e).splitlines()[0], flush=True)
        return 0
    print("no error raised", flush=True)
    return 1


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "throw":
        sys.exit(throw(sys.argv[2]))
    if cmd == "one":
        sys.exit(one(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]))
    sys.exit(crash() if cmd == "crash" else precision())
