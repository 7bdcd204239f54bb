"""Block quantization to FP8 in the op's scale layouts: what model code does around the GEMM.

- `quantize_activations(x)`: x (M, K) -> x_fp8 (M, K), x_scale (M, K/128). One scale per row and 128
  elements of K: how DeepSeek-V3 quantizes its activations at run time.
- `quantize_weight(w)`: w (N, K) -> w_fp8 (N, K), w_scale (ceil(N/128), K/128). One scale per 128 x 128
  block: the layout of DeepSeek-V3's checkpoints (their `weight_scale_inv`).
- `to_e4m3fnuz(w, w_scale)`: an e4m3fn weight (such a checkpoint's) and its scales as e4m3fnuz, the format
  MI300X computes in, exactly.

Both return exactly what `gemm_natural` takes. On the GPU builds, `quantize_activations` on a GPU the build
has machine code for (Hopper; MI300X) is one kernel launch (`gemm/cuda/gemm_cuda_quant.cu`,
`gemm/rocm/quantize_kernels.h`) that gives the bits the torch code below gives on that GPU; the torch code
runs everywhere else. (On a GPU torch divides by the format's maximum as a product with its reciprocal, on a
CPU as a true division, so the two devices' scales may differ in the last bit.) A scale multiplies its block
back (x ~ x_fp8 * x_scale), the op's convention. It is the block's largest |value| over the format's largest
finite value, so that value lands on the format's maximum; `power_of_two=True` rounds the scale up to a
power of two (the UE8M0 scales of DeepSeek-V3.1), which puts the block's largest value in [max / 2, max]. No
scale is below 2^-126, the smallest normal float32 (a subnormal one could send values past the format's
range): an all-zero block gets that scale, and so does a block whose largest |value| is below max x 2^-126
(about 5e-36), which then keeps fewer bits, down to zeros below about 1e-41. Activations and weights never
come near that.
Values are not inspected (that would cost a device sync): a NaN or inf in a block spoils that block only.
Inference only: the results carry no gradient.
"""

from __future__ import annotations

import functools
import math

import torch
import torch.nn.functional as F

from ._formats import BLOCK, SUPPORTED_DTYPES
from ._ops import BACKEND, ops

INPUT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


def quantize_activations(
    x: torch.Tensor, dtype: torch.dtype | None = None, *, power_of_two: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantize ``x`` (M, K) to FP8 with one scale per row and 128 elements of K.

    Args:
        x: ``(M, K)`` bfloat16, float16 or float32; K a multiple of 128. Any strides.
        dtype: the FP8 format; the backend's own (``SUPPORTED_DTYPES[0]``) when ``None``.
        power_of_two: round every scale up to a power of two.

    Returns:
        ``(x_fp8, x_scale)``: ``(M, K)`` FP8 and ``(M, K // 128)`` float32, both contiguous.
    """
    _check_input("x", x, ("M", "K"))
    fp8 = _check_format(dtype, power_of_two)
    M, K = x.shape
    # Row-major in x's own dtype: a view of a row-major x, else one copy (the op wants rows).
    rows = x.contiguous()
    if _uses_kernel(rows):
        return _quantize_rows_kernel(rows, fp8, power_of_two)
    blocks = rows.view(M, K // BLOCK, BLOCK)
    with torch.no_grad():
        scale = _scales(_block_amax(blocks, dim=2), fp8, power_of_two)
        x_fp8 = _divide_into(fp8, blocks, scale.unsqueeze(2)).view(M, K)
    return x_fp8, scale


def quantize_weight(
    w: torch.Tensor, dtype: torch.dtype | None = None, *, power_of_two: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantize ``w`` (N, K) to FP8 with one scale per 128 x 128 block (the last row block may be partial).

    Args:
        w: ``(N, K)`` bfloat16, float16 or float32, e.g. an ``nn.Linear`` weight; K a multiple of 128.
        dtype: the FP8 format; the backend's own (``SUPPORTED_DTYPES[0]``) when ``None``.
        power_of_two: round every scale up to a power of two.

    Returns:
        ``(w_fp8, w_scale)``: ``(N, K)`` FP8 and ``(ceil(N / 128), K // 128)`` float32, both contiguous.
    """
    _check_input("w", w, ("N", "K"))
    fp8 = _check_format(dtype, power_of_two)
    N, K = w.shape
    row_blocks = -(-N // BLOCK)
    # Zero rows up to a whole block: they do not change any block's largest value.
    padded = F.pad(w.contiguous(), (0, 0, 0, row_blocks * BLOCK - N))
    blocks = padded.view(row_blocks, BLOCK, K // BLOCK, BLOCK)
    with torch.no_grad():
        scale = _scales(_block_amax(blocks, dim=(1, 3)), fp8, power_of_two)
        w_fp8 = _divide_into(fp8, blocks, scale[:, None, :, None]).view(row_blocks * BLOCK, K)[:N]
    return w_fp8.contiguous(), scale


def to_e4m3fnuz(w: torch.Tensor, w_scale: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Convert an ``float8_e4m3fn`` tensor and its scales to ``float8_e4m3fnuz`` (MI300X's format), exactly.

    The two formats differ only in the exponent bias (7 and 8), so every bit pattern means half as much in
    e4m3fnuz: the bits are kept and the scales doubled, and each product is unchanged. The one pattern whose
    meaning changes otherwise, 0x80 (-0 in e4m3fn, NaN in e4m3fnuz), becomes 0, and the NaNs (0x7F, 0xFF)
    become e4m3fnuz's NaN (0x80). Do it once, when the weights load (DeepSeek-V3's checkpoints are e4m3fn).

    Args:
        w: float8_e4m3fn values, any shape.
        w_scale: the float32 scales that multiply them, any shape.

    Returns:
        ``(w_fnuz, 2 * w_scale)``, new tensors.
    """
    if not isinstance(w, torch.Tensor) or w.dtype != torch.float8_e4m3fn:
        got = w.dtype if isinstance(w, torch.Tensor) else type(w).__name__
        raise TypeError(f"w must be a torch.float8_e4m3fn tensor, got {got}")
    if not isinstance(w_scale, torch.Tensor) or w_scale.dtype != torch.float32:
        got = w_scale.dtype if isinstance(w_scale, torch.Tensor) else type(w_scale).__name__
        raise TypeError(f"w_scale must be a torch.float32 tensor, got {got}")
    bits = w.view(torch.uint8)
    bits = torch.where(bits == 0x80, torch.zeros_like(bits), bits)  # -0: NaN in e4m3fnuz
    bits = torch.where((bits & 0x7F) == 0x7F, torch.full_like(bits, 0x80), bits)  # NaN stays NaN
    return bits.view(torch.float8_e4m3fnuz), w_scale * 2


def _uses_kernel(x: torch.Tensor) -> bool:
    """Whether `quantize_activations` runs the GPU build's kernel on x (the tests compare it with the
    torch code by turning this off). ROCm tensors are "cuda" tensors in torch."""
    return BACKEND in ("cuda", "rocm") and x.device.type == "cuda" and _kernel_runs_on(x.device.index)


@torch.compiler.assume_constant_result  # a fact of the machine: torch.compile reads it once, as a constant
def _kernel_runs_on(device_index: int) -> bool:
    """Whether this build holds machine code for that GPU: sm_90a (Hopper) for the CUDA build, gfx942
    (MI300X) for the ROCm one. Elsewhere the torch code quantizes, as it did before the kernel."""
    return _build_targets(device_index)


# Cached apart: torch.compile would trace through a cache wrapper, and lose the constant marker above.
@functools.cache  # eager calls ask the driver once a device, not once a call
def _build_targets(device_index: int) -> bool:
    if BACKEND == "cuda":
        return torch.cuda.get_device_capability(device_index) == (9, 0)
    return torch.cuda.get_device_properties(device_index).gcnArchName.startswith("gfx942")


def _quantize_rows_kernel(
    rows: torch.Tensor, fp8: torch.dtype, power_of_two: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """The kernel on a row-major (M, K) tensor: FP8 values and the (M, K / 128) scales, one launch."""
    M, K = rows.shape
    q = torch.empty((M, K), dtype=fp8, device=rows.device)
    scale = torch.empty((M, K // BLOCK), dtype=torch.float32, device=rows.device)
    with torch.no_grad():
        ops.quantize_rows(rows, power_of_two, q, scale)
    return q, scale


def _one_pass_forms(t: torch.Tensor) -> bool:
    """Whether to use the one-pass forms below (GPUs) or the plain ones (CPU, where they are faster). Both
    give the same bits; the tests run both on CPU tensors."""
    return t.device.type != "cpu"


def _block_amax(blocks: torch.Tensor, dim: int | tuple[int, ...]) -> torch.Tensor:
    """The largest |value| of each block, in fp32 (exact: it is one of the values)."""
    if not _one_pass_forms(blocks):  # torch's CPU infinity norm is a slow path (7x abs + amax, measured)
        return blocks.abs().amax(dim=dim).float()
    # On a GPU, one pass reading the input's own dtype instead of writing |blocks| and reading it back.
    return torch.linalg.vector_norm(blocks, ord=math.inf, dim=dim, dtype=torch.float32)


def _scales(amax: torch.Tensor, fp8: torch.dtype, power_of_two: bool) -> torch.Tensor:
    # Never below the smallest normal float32: a subnormal scale has too few bits for the division below to
    # stay within the format's range, and an all-zero block then gets this smallest scale.
    scale = (amax / torch.finfo(fp8).max).clamp(min=torch.finfo(torch.float32).tiny)
    if power_of_two:
        scale = torch.exp2(torch.ceil(torch.log2(scale)))
    return scale


def _divide_into(fp8: torch.dtype, values: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """values / scale in fp32, rounded once to fp8 (round to nearest even): the same bits either way below.

    No clamp is needed: |values| / scale is at most the format's maximum times (1 + a few fp32 ulps), well
    short of where the cast leaves the range (e4m3fnuz gives NaN from 248; e4m3fn saturates in torch 2.13,
    and gave NaN from 464 in older versions)."""
    if not _one_pass_forms(values):  # the cast on store is slower than a separate cast on CPU (measured)
        return (values / scale).to(fp8)
    # On a GPU, one pass: the quotient is cast as it is stored, with no fp32 tensor written and read back.
    return torch.div(values, scale, out=torch.empty(values.shape, dtype=fp8, device=values.device))


def check_floating(name: str, t: object) -> None:
    """t is a tensor of one of INPUT_DTYPES (the quantizers' and `linear`'s unquantized arguments)."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.layout != torch.strided:  # sparse or nested: the quantizers and the bias add read dense memory
        raise TypeError(f"{name} must be a dense (strided) tensor, got layout {t.layout}")
    if t.dtype not in INPUT_DTYPES:
        wanted = ", ".join(str(d) for d in INPUT_DTYPES)
        raise TypeError(f"{name} must be one of {wanted}, got {t.dtype}")


def _check_input(name: str, t: object, dims: tuple[str, str]) -> None:
    check_floating(name, t)
    if t.dim() != 2:
        raise ValueError(f"{name} must be 2-D ({dims[0]}, {dims[1]}), got {t.dim()}-D shape {tuple(t.shape)}")
    K = t.shape[1]
    if K <= 0 or K % BLOCK:
        raise ValueError(f"{name}.shape[1] (K) must be a positive multiple of {BLOCK}, got {K}")


def _check_format(dtype: object, power_of_two: object) -> torch.dtype:
    if not isinstance(power_of_two, bool):
        raise TypeError(f"power_of_two must be a bool, got {type(power_of_two).__name__}")
    if dtype is None:
        return SUPPORTED_DTYPES[0]
    if dtype not in SUPPORTED_DTYPES:
        wanted = " or ".join(str(d) for d in SUPPORTED_DTYPES)
        raise TypeError(f"dtype must be {wanted} on the {BACKEND} backend, got {dtype}")
    return dtype
