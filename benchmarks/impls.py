"""What gets timed: this kernel and the peers available on the platform.

Every implementation gives, for one input set and one layout, a zero-argument callable returning the
(M, N) bf16 output, plus the fp32 reference that output must match (the op's reference, or for peers
that compute on other inputs, e.g. bf16 copies or per-tensor scales, the fp32 product of exactly
those inputs). `benchmarks.run` checks that output against that reference before timing; a peer whose
output fails the contract tolerance gets no number.

Set-up that a caller does once per weight (scale re-layouts for torch's blockwise path, bf16 copies for
the bf16 peer) happens outside the timed call; everything needed to go from the given layout to the
peer's layout (the transposes of `*_t` peers) happens inside it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType

import torch
import torch.nn.functional as F

from .problem import Inputs, dequantize_seed, dequantize_w, dequantize_x, fp32_matmul

Fn = Callable[[], torch.Tensor]


@dataclass(frozen=True)
class Context:
    device: torch.device
    backend: str  # cpu | cuda | rocm
    fp8_dtype: torch.dtype
    kernel: ModuleType | None = None


@dataclass
class Impl:
    name: str  # key in the JSON (`impl`, `ratio_vs_<name>`)
    label: str  # for tables and plots
    layouts: tuple[str, ...]
    build: Callable[[Context, Inputs, str], tuple[Fn, Callable[[], tuple[torch.Tensor, torch.Tensor]] | None]]
    # build(ctx, inputs, layout) -> (call, own_reference or None for the op's reference); own_reference()
    # returns (fp32 product of exactly the peer's inputs, the sum of its terms' magnitudes)
    available: Callable[[Context], str | None] = field(default=lambda ctx: None)  # None = available, else why not
    peer: bool = True


OURS = "gemm"

# ---------------------------------------------------------------------------------------------- ours


def _writes(call: Fn, out: torch.Tensor) -> Fn:
    """Marks `call` as writing `out` in place on every call: run.py poisons it before timing and checks it
    after, so the timed calls are checked too, not only the first one."""
    call.output = out  # type: ignore[attr-defined]
    return call


def _build_ours(ctx: Context, inp: Inputs, layout: str):
    k = ctx.kernel
    # Poisoned: the first call is the checked one, so an element the kernel never writes fails the check.
    out = torch.full((inp.shape.m, inp.shape.n), float("nan"), dtype=torch.bfloat16, device=ctx.device)
    if layout == "seed":
        a, b, sa, sb = inp.a, inp.b, inp.a_scale, inp.b_scale
        return _writes(lambda: k.gemm(a, b, sa, sb, out), out), None
    x, w, sx, sw = inp.x, inp.w, inp.x_scale, inp.w_scale
    return _writes(lambda: k.gemm_natural(x, w, sx, sw, out), out), None


def _build_ours_linear(ctx: Context, inp: Inputs, layout: str):
    # What model code calls on bf16 activations: gemm.linear, the activations' quantization and the GEMM.
    k = ctx.kernel
    hidden = dequantize_x(inp.x, inp.x_scale).to(torch.bfloat16)
    w, sw = inp.w, inp.w_scale

    def ref() -> tuple[torch.Tensor, torch.Tensor]:
        # Quantized here with the plain formula, not with k.quantize_activations (which k.linear calls, so a
        # quantizer bug would cancel out); the kernel's quantizer gives these bits (tests/kernel/test_quantize).
        x32 = dequantize_x(*_quantize_rows_plain(hidden, w.dtype))
        w32 = dequantize_w(w, sw)
        with fp32_matmul():
            return x32 @ w32.t(), x32.abs() @ w32.abs().t()

    return (lambda: k.linear(hidden, w, sw)), ref


def _quantize_rows_plain(x: torch.Tensor, fp8: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """One scale per row and 128-block: amax / the format's max (at least the smallest normal fp32), then
    x / scale in fp32 and one round-to-nearest cast."""
    m, k = x.shape
    blocks = x.float().reshape(m, k // 128, 128)
    scale = (blocks.abs().amax(dim=2) / torch.finfo(fp8).max).clamp(min=torch.finfo(torch.float32).tiny)
    return (blocks / scale[..., None]).reshape(m, k).to(fp8), scale


# ---------------------------------------------------------------------------------- naive reference


def _build_torch_ref(ctx: Context, inp: Inputs, layout: str):
    if layout == "seed":
        a, b, sa, sb = inp.a, inp.b, inp.a_scale, inp.b_scale

        def call() -> torch.Tensor:
            a32, b32 = dequantize_seed(a, sa, b, sb)
            with fp32_matmul():
                return (a32.t() @ b32).to(torch.bfloat16)

        return call, None
    x, w, sx, sw = inp.x, inp.w, inp.x_scale, inp.w_scale

    def call_natural() -> torch.Tensor:
        with fp32_matmul():
            return (dequantize_x(x, sx) @ dequantize_w(w, sw).t()).to(torch.bfloat16)

    return call_natural, None


# ------------------------------------------------------------------------------ torch blockwise FP8


def _probe(ctx: Context, build) -> str | None:
    """Run a peer once on a small problem: None if it runs (its results are checked per shape later),
    else why not (e.g. a recipe this GPU or torch build lacks, as blockwise scaling on ROCm)."""
    from .problem import Shape, make_inputs

    try:
        inp = make_inputs(Shape(128, 256, 512), ctx.device, ctx.fp8_dtype, torch.Generator().manual_seed(0))
        build(ctx, inp, "natural")[0]()
    except Exception as e:
        return f"probe call failed: {type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
    return None


def _blockwise_available(ctx: Context) -> str | None:
    if ctx.device.type != "cuda":
        return "needs a GPU"
    if not hasattr(F, "scaled_mm") or not hasattr(F, "ScalingType"):
        return f"torch {torch.__version__} has no torch.nn.functional.scaled_mm / ScalingType"
    if not all(hasattr(F.ScalingType, n) for n in ("BlockWise1x128", "BlockWise128x128")):
        return "torch.nn.functional.ScalingType lacks BlockWise1x128 / BlockWise128x128"
    return _probe(ctx, _build_blockwise)


def _round_up(v: int, to: int) -> int:
    return (v + to - 1) // to * to


def blockwise_scale_b(w_scale: torch.Tensor) -> torch.Tensor:
    """(ceil(N/128), L) -> the layout cuBLASLt's 128x128 recipe takes: (L4, ceil(N/128)) with strides
    (1, L4), L4 = round_up(L, 4) (h200-baselines.md, after PyTorch's test_scaled_mm_block_wise_numerics)."""
    kb = w_scale.shape[1]
    return F.pad(w_scale, (0, _round_up(kb, 4) - kb)).contiguous().t()


def blockwise_scale_a(x_scale: torch.Tensor) -> torch.Tensor:
    """(M, L) -> same shape, outer-dim-major (strides (1, M))."""
    return x_scale.t().contiguous().t()


def _blockwise(x: torch.Tensor, w: torch.Tensor, sa: torch.Tensor, sb: torch.Tensor) -> torch.Tensor:
    return F.scaled_mm(
        x, w.t(), sa, F.ScalingType.BlockWise1x128, sb, F.ScalingType.BlockWise128x128, output_dtype=torch.bfloat16
    )


def _build_blockwise(ctx: Context, inp: Inputs, layout: str):
    x, w = inp.x, inp.w
    sa, sb = blockwise_scale_a(inp.x_scale), blockwise_scale_b(inp.w_scale)
    return (lambda: _blockwise(x, w, sa, sb)), None


def _build_blockwise_t(ctx: Context, inp: Inputs, layout: str):
    a, b, a_scale, b_scale = inp.a, inp.b, inp.a_scale, inp.b_scale

    def call() -> torch.Tensor:
        # a_scale (L, M) contiguous viewed as (M, L) is already outer-dim-major: zero-copy.
        return _blockwise(a.t().contiguous(), b.t().contiguous(), a_scale.t(), blockwise_scale_b(b_scale.t()))

    return call, None


# ------------------------------------------------------------------------------ per-tensor FP8, bf16


def _pertensor_available(ctx: Context) -> str | None:
    if ctx.device.type != "cuda":
        return "needs a GPU"
    if not hasattr(torch, "_scaled_mm"):
        return f"torch {torch.__version__} has no torch._scaled_mm"
    return _probe(ctx, _build_pertensor)


def pertensor_fp8(x: torch.Tensor, w: torch.Tensor, one: torch.Tensor, fast_accum: bool = False) -> torch.Tensor:
    return torch._scaled_mm(x, w.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16, use_fast_accum=fast_accum)


def _build_pertensor(ctx: Context, inp: Inputs, layout: str):
    x, w = inp.x, inp.w
    one = torch.ones((), dtype=torch.float32, device=ctx.device)

    def ref() -> tuple[torch.Tensor, torch.Tensor]:
        with fp32_matmul():
            return x.float() @ w.float().t(), x.float().abs() @ w.float().abs().t()

    return (lambda: pertensor_fp8(x, w, one)), ref


def _gpu_only(ctx: Context) -> str | None:
    return None if ctx.device.type == "cuda" else "needs a GPU"


def _build_bf16(ctx: Context, inp: Inputs, layout: str):
    # The same values, dequantized once to bf16 (as a model without FP8 kernels would hold them).
    if layout == "seed":
        a32, b32 = dequantize_seed(inp.a, inp.a_scale, inp.b, inp.b_scale)
        a16, b16 = a32.to(torch.bfloat16), b32.to(torch.bfloat16)
        del a32, b32

        def ref_seed() -> tuple[torch.Tensor, torch.Tensor]:
            with fp32_matmul():
                return a16.float().t() @ b16.float(), a16.float().abs().t() @ b16.float().abs()

        return (lambda: torch.matmul(a16.t(), b16)), ref_seed
    x16 = dequantize_x(inp.x, inp.x_scale).to(torch.bfloat16)
    w16 = dequantize_w(inp.w, inp.w_scale).to(torch.bfloat16)

    def ref() -> tuple[torch.Tensor, torch.Tensor]:
        with fp32_matmul():
            return x16.float() @ w16.float().t(), x16.float().abs() @ w16.float().abs().t()

    return (lambda: torch.matmul(x16, w16.t())), ref


# --------------------------------------------------------------------------------------- ROCm: aiter


def _aiter_available(ctx: Context) -> str | None:
    if ctx.backend != "rocm":
        return "ROCm only"
    try:
        import aiter  # noqa: F401
    except Exception as e:  # aiter raises assorted errors when its JIT or ROCm pieces are missing
        return f"import aiter failed: {type(e).__name__}: {e}"
    if not hasattr(aiter, "gemm_a8w8_blockscale"):
        return "aiter has no gemm_a8w8_blockscale"
    return _probe(ctx, _build_aiter)


def _aiter(x, w, sx, sw) -> torch.Tensor:
    import aiter

    # aiter's CK block-scale GEMM: x (M, K), w (N, K), x_scale (M, K/128), w_scale (N/128, K/128).
    return aiter.gemm_a8w8_blockscale(x, w, sx, sw, dtype=torch.bfloat16)


def _build_aiter(ctx: Context, inp: Inputs, layout: str):
    x, w, sx, sw = inp.x, inp.w, inp.x_scale, inp.w_scale
    return (lambda: _aiter(x, w, sx, sw)), None


def _build_aiter_t(ctx: Context, inp: Inputs, layout: str):
    a, b, sa, sb = inp.a, inp.b, inp.a_scale, inp.b_scale
    return (lambda: _aiter(a.t().contiguous(), b.t().contiguous(), sa.t().contiguous(), sb.t().contiguous())), None


# ---------------------------------------------------------------------------------------------------


def _ours_available(ctx: Context) -> str | None:
    return None if ctx.kernel is not None else "no kernel loaded"


IMPLS: tuple[Impl, ...] = (
    Impl(OURS, "gemm (this kernel)", ("seed", "natural"), _build_ours, _ours_available, peer=False),
    Impl(
        "gemm_linear",
        "gemm.linear (bf16 x quantized by gemm.quantize_activations, then gemm)",
        ("natural",),
        _build_ours_linear,
        _ours_available,
        peer=False,
    ),
    Impl("torch_ref", "naive torch (dequant, fp32 matmul)", ("seed", "natural"), _build_torch_ref),
    Impl("torch_blockwise", "torch blockwise scaled_mm", ("natural",), _build_blockwise, _blockwise_available),
    Impl(
        "torch_blockwise_t",
        "transpose + torch blockwise scaled_mm",
        ("seed",),
        _build_blockwise_t,
        _blockwise_available,
    ),
    Impl("fp8_pertensor", "per-tensor FP8 cuBLAS (_scaled_mm)", ("natural",), _build_pertensor, _pertensor_available),
    Impl("bf16", "bf16 matmul (cuBLAS / hipBLASLt)", ("seed", "natural"), _build_bf16, _gpu_only),
    Impl("aiter_blockscale", "aiter a8w8 block-scale GEMM", ("natural",), _build_aiter, _aiter_available),
    Impl("aiter_blockscale_t", "transpose + aiter block-scale GEMM", ("seed",), _build_aiter_t, _aiter_available),
)

BY_NAME = {i.name: i for i in IMPLS}
