"""FP8 block-scaled matrix multiply (DeepSeek-V3 style scaling: one scale per 128 elements of K).

Two layouts of the same product, both returning bf16 ``(M, N)``:

* :func:`gemm` takes the AMD fp8-mm challenge layout (M- and N-contiguous operands).
* :func:`gemm_natural` takes what model code holds: activations ``(M, K)`` and an ``nn.Linear``
  weight ``(N, K)``.
* :func:`linear` is an FP8 ``nn.Linear``: it quantizes bf16/fp16/fp32 activations of any leading shape
  (:func:`quantize_activations`) and runs :func:`gemm_natural` on an FP8 weight (:func:`quantize_weight`).

Every argument is validated here, before any kernel runs; a bad call raises ``ValueError`` or
``TypeError`` naming the argument and leaves the output untouched.
"""

from __future__ import annotations

import torch
from torch._subclasses.fake_tensor import is_fake

from . import reference
from ._formats import BLOCK, SUPPORTED_DTYPES
from ._ops import BACKEND, add_op_namespace_prefix, ops
from .quantize import _check_format, check_floating, quantize_activations, quantize_weight, to_e4m3fnuz

__all__ = [
    "gemm",
    "gemm_natural",
    "linear",
    "quantize_activations",
    "quantize_weight",
    "to_e4m3fnuz",
    "layers",
    "reference",
    "BLOCK",
    "SUPPORTED_DTYPES",
    "ACCUMULATION_ALLOWANCE",
]

# How this backend's accuracy is tested: the contract's elementwise rule, plus this multiple of the sum of
# the terms' magnitudes (0 = the rule as written; Hopper's FP8 tensor cores need more: reference.py says why).
ACCUMULATION_ALLOWANCE: float = reference.ACCUMULATION_ALLOWANCE[BACKEND]
_DEVICE_TYPE = "cpu" if BACKEND == "cpu" else "cuda"


def gemm(
    a: torch.Tensor,
    b: torch.Tensor,
    a_scale: torch.Tensor,
    b_scale: torch.Tensor,
    c: torch.Tensor | None = None,
) -> torch.Tensor:
    """Block-scaled FP8 GEMM on the challenge ("seed") layout.

    ``C[m, n] = sum_kb a_scale[kb, m] * b_scale[kb, n // 128] * sum_{k in block kb} a[k, m] * b[k, n]``,
    accumulated in fp32 and rounded once to bf16.

    Args:
        a: ``(K, M)`` FP8, row-major (A transposed; M is contiguous). K is a positive multiple of 128;
            M and N may be 0 (the result is then empty); M, N and K are at most 2^31 - 128.
        b: ``(K, N)`` FP8 of the same dtype, row-major (B transposed).
        a_scale: ``(K // 128, M)`` float32.
        b_scale: ``(K // 128, ceil(N / 128))`` float32.
        c: optional ``(M, N)`` bfloat16 output, written in place; allocated when ``None``.

    Returns:
        ``c``, shape ``(M, N)``, bfloat16. Inference only: the op has no backward, so no gradient reaches
        inputs that require one (their values are used as they are).

    Holding the challenge's views (``a`` as ``(M, K)`` with strides ``(1, M)``)? Pass ``a.T``, ``b.T``,
    ``a_scale.T``, ``b_scale.T``: zero-copy.
    """
    _check_fp8("a", a, ("K", "M"))
    K, M = a.shape
    _check_fp8("b", b, ("K", "N"), like=a)
    if b.shape[0] != K:
        raise ValueError(f"b must have shape (K, N) = ({K}, N) to match a's K, got {tuple(b.shape)}")
    N = b.shape[1]
    _check_k(K, "a.shape[0]")
    _check_size("M", M, "a.shape[1]")
    _check_size("N", N, "b.shape[1]")
    _check_tensor("a_scale", a_scale, (K // BLOCK, M), torch.float32, a, ("K/128", "M"))
    _check_tensor("b_scale", b_scale, (K // BLOCK, _ceil_blocks(N)), torch.float32, a, ("K/128", "ceil(N/128)"))
    c = _output("c", c, M, N, a, (a, b, a_scale, b_scale))
    ops.gemm(a, b, a_scale, b_scale, c)  # M or N of 0: the binding returns at once
    return c


def gemm_natural(
    x: torch.Tensor,
    w: torch.Tensor,
    x_scale: torch.Tensor,
    w_scale: torch.Tensor,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """Block-scaled FP8 GEMM on the natural (K-contiguous) layout: ``out = (x * x_scale) @ (w * w_scale).T``.

    Args:
        x: ``(M, K)`` FP8 activations, row-major. K is a positive multiple of 128; M and N may be 0;
            M, N and K are at most 2^31 - 128.
        w: ``(N, K)`` FP8 weight (an ``nn.Linear`` weight), row-major, same dtype as ``x``.
        x_scale: ``(M, K // 128)`` float32, one scale per row and 128-block of K.
        w_scale: ``(ceil(N / 128), K // 128)`` float32, one scale per 128x128 weight block.
        out: optional ``(M, N)`` bfloat16 output, written in place; allocated when ``None``.

    Returns:
        ``out``, shape ``(M, N)``, bfloat16. Inference only, as :func:`gemm`.
    """
    _check_fp8("x", x, ("M", "K"))
    M, K = x.shape
    _check_fp8("w", w, ("N", "K"), like=x)
    if w.shape[1] != K:
        raise ValueError(f"w must have shape (N, K) = (N, {K}) to match x's K, got {tuple(w.shape)}")
    N = w.shape[0]
    _check_k(K, "x.shape[1]")
    _check_size("M", M, "x.shape[0]")
    _check_size("N", N, "w.shape[0]")
    _check_tensor("x_scale", x_scale, (M, K // BLOCK), torch.float32, x, ("M", "K/128"))
    _check_tensor("w_scale", w_scale, (_ceil_blocks(N), K // BLOCK), torch.float32, x, ("ceil(N/128)", "K/128"))
    out = _output("out", out, M, N, x, (x, w, x_scale, w_scale))
    ops.gemm_natural(x, w, x_scale, w_scale, out)  # M or N of 0: the binding returns at once
    return out


def linear(
    x: torch.Tensor,
    w: torch.Tensor,
    w_scale: torch.Tensor,
    bias: torch.Tensor | None = None,
    *,
    power_of_two: bool = False,
) -> torch.Tensor:
    """An FP8 ``nn.Linear``: ``x @ (w * w_scale).T + bias``, with ``x`` quantized per row and 128-block of K.

    Args:
        x: ``(..., K)`` bfloat16, float16 or float32 activations, any leading shape and strides.
        w: ``(N, K)`` FP8 weight and ``w_scale`` its ``(ceil(N / 128), K // 128)`` float32 block scales:
            what :func:`quantize_weight` returns, or a DeepSeek-V3 checkpoint's weight and ``weight_scale_inv``.
            ``x`` is quantized to ``w``'s format.
        bias: optional ``(N,)`` floating tensor, added to the bfloat16 product.
        power_of_two: round x's scales up to powers of two (see :func:`quantize_activations`).

    Returns:
        ``(..., N)`` bfloat16. Inference only: no gradient flows through it (the FP8 op has no backward).
    """
    _check_fp8("w", w, ("N", "K"))
    _check_format(w.dtype, power_of_two)  # here, not only in the quantizer, which an empty x never reaches
    N, K = w.shape
    if K <= 0 or K % BLOCK:
        raise ValueError(f"w.shape[1] (K) must be a positive multiple of {BLOCK}, got {K}")
    _check_tensor("w_scale", w_scale, (_ceil_blocks(N), K // BLOCK), torch.float32, w, ("ceil(N/128)", "K/128"))
    check_floating("x", x)
    if x.dim() == 0 or x.shape[-1] != K:
        raise ValueError(f"x must have shape (..., K) = (..., {K}) to match w's K, got {tuple(x.shape)}")
    _check_device("x", x, w, "w")
    if bias is not None:
        check_floating("bias", bias)
        if tuple(bias.shape) != (N,):
            raise ValueError(f"bias must have shape (N,) = ({N},) to match w, got {tuple(bias.shape)}")
        _check_device("bias", bias, w, "w")
    rows = x.shape[:-1]
    if x.numel() == 0 or N == 0:
        return torch.empty((*rows, N), dtype=torch.bfloat16, device=x.device)
    with torch.no_grad():  # a bias that requires grad would otherwise make a half-differentiable result
        x_fp8, x_scale = quantize_activations(x.reshape(-1, K), w.dtype, power_of_two=power_of_two)
        out = gemm_natural(x_fp8, w, x_scale, w_scale)
        if bias is not None:
            out.add_(bias)
    return out.reshape(*rows, N)


def _ceil_blocks(n: int) -> int:
    return (n + BLOCK - 1) // BLOCK


def _check_fp8(name: str, t: object, dims: tuple[str, str], like: torch.Tensor | None = None) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dim() != 2:
        raise ValueError(f"{name} must be 2-D ({dims[0]}, {dims[1]}), got {t.dim()}-D shape {tuple(t.shape)}")
    if t.dtype not in SUPPORTED_DTYPES:
        wanted = " or ".join(str(d) for d in SUPPORTED_DTYPES)
        hint = ""
        if t.dtype == torch.float8_e4m3fn and torch.float8_e4m3fnuz in SUPPORTED_DTYPES:
            hint = f" (convert {name} and its scales once, exactly, with gemm.to_e4m3fnuz)"
        raise TypeError(f"{name} must be {wanted} on the {BACKEND} backend, got {t.dtype}{hint}")
    if like is not None and t.dtype != like.dtype:
        raise TypeError(f"{name} must have the same dtype as the first operand ({like.dtype}), got {t.dtype}")
    _check_device(name, t, like)
    _check_layout(name, t, dims)


def _check_tensor(
    name: str,
    t: object,
    shape: tuple[int, int],
    dtype: torch.dtype,
    like: torch.Tensor,
    dims: tuple[str, str],
    output: bool = False,
) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype != dtype:
        raise TypeError(f"{name} must be {dtype}, got {t.dtype}")
    if tuple(t.shape) != shape:
        hint = ""
        if t.dim() == 2 and tuple(t.shape) == shape[::-1] and shape[0] != shape[1] and not output:
            # .T is the fix only where it gives a contiguous tensor; a contiguous one of the reversed shape
            # (scales made in the other layout) needs the copy, or _check_layout would refuse the .T view.
            fix = f"{name}.T" if t.T.is_contiguous() else f"{name}.T.contiguous() (one copy)"
            hint = f"; it looks transposed: pass {fix}"
        raise ValueError(f"{name} must have shape ({dims[0]}, {dims[1]}) = {shape}, got {tuple(t.shape)}{hint}")
    _check_device(name, t, like)
    _check_layout(name, t, dims, output)


# The largest M, N or K on every backend (the binding's kMaxDim): the GPU kernels index in 32 bits, and N
# rounded up to whole scale blocks must still fit.
MAX_DIM = 2**31 - BLOCK


def _check_k(K: int, k_source: str) -> None:
    # K must be a whole number of scale blocks. M or N of 0 is valid (an empty result, as torch's own
    # matmul gives); sizes cannot be negative.
    if K <= 0 or K % BLOCK:
        raise ValueError(f"K ({k_source}) must be a positive multiple of {BLOCK}, got {K}")
    _check_size("K", K, k_source)


def _check_size(dim: str, value: int, source: str) -> None:
    if value > MAX_DIM:
        raise ValueError(f"{dim} ({source}) must be at most 2^31 - {BLOCK} = {MAX_DIM}, got {value}")


def _check_device(name: str, t: torch.Tensor, like: torch.Tensor | None, like_name: str = "the first operand") -> None:
    if t.device.type != _DEVICE_TYPE:
        raise ValueError(
            f"{name} is on {t.device}, but this build of gemm (backend {BACKEND}) only has a kernel "
            f"for {_DEVICE_TYPE} tensors"
        )
    if like is not None and t.device != like.device:
        raise ValueError(f"{name} must be on the same device as {like_name} ({like.device}), got {t.device}")


def _check_layout(name: str, t: torch.Tensor, dims: tuple[str, str], output: bool = False) -> None:
    if t.is_contiguous():
        return
    if output:  # an input's transposed view has a zero-copy fix; an output written in place has none
        raise ValueError(
            f"{name} must be row-major contiguous ({dims[0]}, {dims[1]}), got strides {t.stride()}: pass a "
            f"contiguous tensor, or none and use the one returned"
        )
    if t.dim() == 2 and t.T.is_contiguous():
        # Which fix is right depends on what the view holds, which its shape alone cannot tell when it is
        # square: name both (a review found the zero-copy one alone sent a square weight to a wrong result).
        raise ValueError(
            f"{name} must be a row-major contiguous ({dims[0]}, {dims[1]}) tensor, got a transposed view "
            f"(strides {t.stride()}): if it is the ({dims[1]}, {dims[0]}) view of the values, pass {name}.T "
            f"(zero-copy); if its values are ({dims[0]}, {dims[1]}), pass {name}.contiguous() (one copy)"
        )
    raise ValueError(f"{name} must be row-major contiguous ({dims[0]}, {dims[1]}), got strides {t.stride()}")


def _output(
    name: str,
    out: torch.Tensor | None,
    M: int,
    N: int,
    like: torch.Tensor,
    inputs: tuple[torch.Tensor, ...],
) -> torch.Tensor:
    if out is None:
        return torch.empty((M, N), dtype=torch.bfloat16, device=like.device)
    _check_tensor(name, out, (M, N), torch.bfloat16, like, ("M", "N"), output=True)
    # Compared by the bytes each tensor spans (all are contiguous by now): two tensors can share memory
    # through different storages (views of one numpy buffer), and two slices of one storage need not overlap.
    # Fake tensors (torch.compile) have no addresses: there the check is an op of the graph, run on the real
    # tensors (functionalization would hand the kernel a copy of the output, which overlaps nothing).
    if torch.compiler.is_compiling() or any(_is_traced(t) for t in (out, *inputs)):
        # Dynamo cannot trace is_neg() (a graph break); a negated output fails in torch's own fake-tensor
        # call while tracing instead, with a RuntimeError and no crash. Traced outside Dynamo (make_fx,
        # aot_function, FakeTensorMode), the tensors have no addresses either.
        _check_no_overlap(out, list(inputs), name)
        return out
    # A lazily negated (torch._neg_view) or conjugated view holds other values than its bytes; torch's eager
    # fallback for such an in-place output fails inside torch and takes the interpreter down.
    if out.is_neg() or out.is_conj():
        raise ValueError(f"{name} must not be a negated or conjugated view: pass a plain tensor")
    _refuse_overlap(out, inputs, name)
    return out


def _refuse_overlap(out: torch.Tensor, inputs, name: str) -> None:
    for t in inputs:
        if _overlap(out, t):
            raise ValueError(f"{name} must not share memory with an input")


@torch.library.custom_op(add_op_namespace_prefix("check_no_overlap"), mutates_args=())
def _check_no_overlap(out: torch.Tensor, inputs: list[torch.Tensor], name: str) -> None:
    _refuse_overlap(out, inputs, name)


@_check_no_overlap.register_fake
def _(out, inputs, name) -> None:
    return None


# An op with no outputs would be dropped from the compiled graph as dead code. It reads the output the GEMM
# writes, so the compiled graph runs it first.
torch.fx.node.has_side_effect(_check_no_overlap._opoverload)


def _is_traced(t: torch.Tensor) -> bool:
    """A fake tensor, or a functional wrapper (which is_fake looks through) or proxy-traced one. A plain
    tensor is answered first, as is_fake would: its walk costs 1-3 us a tensor, on every eager call."""
    if torch._is_functional_tensor(t):
        return True
    if type(t) is torch.Tensor and not torch._C._functorch.is_functorch_wrapped_tensor(t):
        return False
    return is_fake(t)


def _overlap(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two contiguous tensors' bytes intersect (an empty tensor spans none)."""
    return a.data_ptr() < b.data_ptr() + b.nbytes and b.data_ptr() < a.data_ptr() + a.nbytes


# The fakes also serve a direct torch.ops call that mixes real tensors with meta ones (the dispatcher routes
# it here, not to the binding's checks): such a call would otherwise return having written nothing.
def _one_device(op: str, **tensors: torch.Tensor) -> None:
    devices = {t.device for t in tensors.values()}
    if len(devices) > 1:
        where = ", ".join(f"{name} on {t.device}" for name, t in tensors.items())
        raise ValueError(f"{op}: every tensor must be on one device, got {where}")


@torch.library.register_fake(add_op_namespace_prefix("gemm"))
def _gemm_fake(a, b, a_scale, b_scale, c) -> None:
    _one_device("gemm", a=a, b=b, a_scale=a_scale, b_scale=b_scale, c=c)


@torch.library.register_fake(add_op_namespace_prefix("gemm_natural"))
def _gemm_natural_fake(x, w, x_scale, w_scale, out) -> None:
    _one_device("gemm_natural", x=x, w=w, x_scale=x_scale, w_scale=w_scale, out=out)


@torch.library.register_fake(add_op_namespace_prefix("quantize_rows"))
def _quantize_rows_fake(x, power_of_two, q, scale) -> None:
    _one_device("quantize_rows", x=x, q=q, scale=scale)


# torch's fallback for a lazily negated tensor (torch._neg_view) copies it first; for an in-place output it
# then fails an internal assert and aborts the interpreter (a direct torch.ops call: the wrappers above refuse
# such an output before). Each op's kernel for the Negative key refuses a negated output instead, and runs
# the op on negated inputs made plain.
_NEGATIVE = torch.library.Library(ops.name, "IMPL")


def _negated_view_kernel(op_name: str):
    schema = getattr(ops, op_name).default._schema
    outputs = [i for i, a in enumerate(schema.arguments) if a.alias_info is not None and a.alias_info.is_write]

    def kernel(*args):
        for i in outputs:
            if args[i].is_neg():
                name = schema.arguments[i].name
                raise ValueError(f"{op_name}: {name} must not be a negated view: pass a plain tensor")
        return getattr(ops, op_name)(*(a.resolve_neg() if isinstance(a, torch.Tensor) else a for a in args))

    return kernel


for _op in ("gemm", "gemm_natural", "quantize_rows"):  # their outputs: the schemas' written arguments
    _NEGATIVE.impl(_op, _negated_view_kernel(_op), "Negative")

# Last: the layers call `linear`, defined above.
from . import layers  # noqa: E402
