"""The benchmarked problem: shape lists, random inputs in both layouts, the fp32 reference and the
pass criterion of docs/op-contract.md.

Depends on torch only and uses no relative imports: `benchmarks/benchmark.py` (run by `kernels benchmark`,
which imports that file on its own) loads this file by path.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import torch

BLOCK = 128
LAYOUTS = ("seed", "natural")

# The AMD Developer Challenge 2025 fp8-mm shapes (m, n, k), as op-contract.md lists them.
TEST_SHAPES: tuple[tuple[int, int, int], ...] = (
    (64, 64, 128),
    (64, 1536, 7168),
    (64, 3072, 1536),
    (64, 576, 7168),
    (96, 7168, 256),
    (96, 7168, 2048),
    (96, 4608, 7168),
    (128, 7168, 2304),
    (128, 512, 7168),
    (512, 4096, 512),
    (512, 1536, 7168),
)
BENCH_NK: tuple[tuple[int, int], ...] = (
    (1536, 7168),
    (3072, 1536),
    (576, 7168),
    (7168, 256),
    (7168, 2048),
    (4608, 7168),
    (7168, 2304),
    (512, 7168),
    (4096, 512),
)
BENCH_SHAPES: tuple[tuple[int, int, int], ...] = tuple((m, n, k) for m in (1024, 6144) for n, k in BENCH_NK)

# What a plain CPU run measures: the CPU kernel is a correctness backend, and the 29 contract shapes take
# tens of minutes on two shared cores. Small test shapes plus the two cheapest benchmark shapes at M=1024.
CPU_DEFAULT_SHAPES: tuple[tuple[int, int, int], ...] = (
    (64, 64, 128),
    (64, 3072, 1536),
    (96, 7168, 256),
    (128, 512, 7168),
    (512, 4096, 512),
    (1024, 7168, 256),
    (1024, 4096, 512),
)

SHAPE_SETS: dict[str, tuple[tuple[int, int, int], ...]] = {
    "challenge": BENCH_SHAPES,
    "tests": TEST_SHAPES,
    "all": BENCH_SHAPES + TEST_SHAPES,
    "cpu-default": CPU_DEFAULT_SHAPES,
}

# Pass criterion of the contract (the challenge's): |out - ref| <= ATOL + RTOL * |ref|.
ATOL = 1e-3
RTOL = 2e-2


@dataclass(frozen=True, order=True)
class Shape:
    m: int
    n: int
    k: int

    def __post_init__(self) -> None:
        if self.m < 1 or self.n < 1:
            raise ValueError(f"shape {self.m}x{self.n}x{self.k}: M and N must be positive")
        if self.k < BLOCK or self.k % BLOCK:
            raise ValueError(f"shape {self.m}x{self.n}x{self.k}: K must be a positive multiple of {BLOCK}")

    @property
    def id(self) -> str:
        return f"{self.m}x{self.n}x{self.k}"

    @property
    def flops(self) -> int:
        return 2 * self.m * self.n * self.k

    @property
    def bytes(self) -> int:
        """Bytes each operand moves once: fp8 A and B, bf16 C (AMD's speed-of-light count, scales excluded)."""
        return self.m * self.k + self.n * self.k + 2 * self.m * self.n


def parse_shapes(spec: str) -> list[Shape]:
    """`challenge`, `tests`, `all`, `cpu-default`, or a comma list of MxNxK (sets may be mixed in)."""
    if not spec or not spec.strip():
        raise ValueError("--shapes is empty: give challenge, tests, all, cpu-default or MxNxK[,MxNxK...]")
    out: list[Shape] = []
    for item in (s.strip() for s in spec.split(",")):
        if not item:
            continue
        if item in SHAPE_SETS:
            out.extend(Shape(*t) for t in SHAPE_SETS[item])
            continue
        match = re.fullmatch(r"(\d+)[xX](\d+)[xX](\d+)", item)
        if match is None:
            raise ValueError(
                f"--shapes: cannot read {item!r}; expected one of {sorted(SHAPE_SETS)} or MxNxK like 1024x1536x7168"
            )
        out.append(Shape(*(int(g) for g in match.groups())))
    seen: set[Shape] = set()
    unique = [s for s in out if not (s in seen or seen.add(s))]
    if not unique:
        raise ValueError("--shapes selected no shape")
    return unique


def parse_layouts(spec: str) -> list[str]:
    layouts = [s.strip() for s in spec.split(",") if s.strip()]
    bad = [s for s in layouts if s not in LAYOUTS]
    if bad or not layouts:
        raise ValueError(f"--layouts: expected a comma list of {', '.join(LAYOUTS)}, got {spec!r}")
    return list(dict.fromkeys(layouts))


def ceil_blocks(n: int) -> int:
    return (n + BLOCK - 1) // BLOCK


@dataclass
class Inputs:
    """One random problem in both layouts (the seed tensors are contiguous transposes of the natural ones)."""

    shape: Shape
    x: torch.Tensor  # (M, K) fp8
    w: torch.Tensor  # (N, K) fp8
    x_scale: torch.Tensor  # (M, K/128) f32
    w_scale: torch.Tensor  # (ceil(N/128), K/128) f32
    a: torch.Tensor  # (K, M) fp8 = x.T
    b: torch.Tensor  # (K, N) fp8 = w.T
    a_scale: torch.Tensor  # (K/128, M) f32 = x_scale.T
    b_scale: torch.Tensor  # (K/128, ceil(N/128)) f32 = w_scale.T


def make_inputs(
    shape: Shape,
    device: torch.device | str,
    fp8_dtype: torch.dtype,
    generator: torch.Generator | None = None,
    scale_std: float = 1.0,
) -> Inputs:
    """randn cast to FP8, signed randn scales times `scale_std` (the challenge's generate_input draw)."""
    m, n, k = shape.m, shape.n, shape.k
    kb = k // BLOCK

    def randn(*size: int) -> torch.Tensor:
        return torch.randn(*size, generator=generator, device="cpu", dtype=torch.float32)

    x = randn(m, k).to(fp8_dtype).to(device)
    w = randn(n, k).to(fp8_dtype).to(device)
    x_scale = (randn(m, kb) * scale_std).to(device)
    w_scale = (randn(ceil_blocks(n), kb) * scale_std).to(device)
    return Inputs(
        shape=shape,
        x=x,
        w=w,
        x_scale=x_scale,
        w_scale=w_scale,
        a=x.t().contiguous(),
        b=w.t().contiguous(),
        a_scale=x_scale.t().contiguous(),
        b_scale=w_scale.t().contiguous(),
    )


def dequantize_x(x: torch.Tensor, x_scale: torch.Tensor) -> torch.Tensor:
    """(M, K) fp8 with (M, K/128) scales -> (M, K) fp32."""
    return x.float() * x_scale.repeat_interleave(BLOCK, dim=1)


def dequantize_w(w: torch.Tensor, w_scale: torch.Tensor) -> torch.Tensor:
    """(N, K) fp8 with (ceil(N/128), K/128) scales -> (N, K) fp32."""
    n = w.shape[0]
    s = w_scale.repeat_interleave(BLOCK, dim=0)[:n].repeat_interleave(BLOCK, dim=1)
    return w.float() * s


def dequantize_seed(a: torch.Tensor, a_scale: torch.Tensor, b: torch.Tensor, b_scale: torch.Tensor):
    """Seed layout -> (A (K, M), B (K, N)) fp32, still transposed."""
    n = b.shape[1]
    a32 = a.float() * a_scale.repeat_interleave(BLOCK, dim=0)
    b32 = b.float() * b_scale.repeat_interleave(BLOCK, dim=0).repeat_interleave(BLOCK, dim=1)[:, :n]
    return a32, b32


def reference(inp: Inputs) -> torch.Tensor:
    """The contract's reference in fp32 (not yet rounded): dequantize, fp32 matmul with TF32 off."""
    with fp32_matmul():
        return dequantize_x(inp.x, inp.x_scale) @ dequantize_w(inp.w, inp.w_scale).t()


class fp32_matmul:
    """Context manager: true fp32 matmuls (TF32 off) on CUDA while it is active."""

    def __enter__(self) -> None:
        self._prev = torch.get_float32_matmul_precision()
        torch.set_float32_matmul_precision("highest")

    def __exit__(self, *exc: object) -> None:
        torch.set_float32_matmul_precision(self._prev)


# Hopper's FP8 tensor cores add each instruction's products with fewer bits than fp32, which moves
# outputs that cancel to near zero by more than atol = 1e-3 (benchmarks/precision.py measures it; torch's
# blockwise and per-tensor FP8 paths do the same). Such a result is accepted, per element, when
# |out - ref| <= ATOL + RTOL |ref| + ACCUMULATION_ALLOWANCE * sum_k |terms|: the rule the tests hold the
# cuda backend to (gemm.reference.ACCUMULATION_ALLOWANCE["cuda"]; tests/benchmarks keeps them equal).
# A wrong element (a missed block or scale, a bad index, an unwritten tile) fails it.
ACCUMULATION_ALLOWANCE = 2.0**-10


def magnitude(inp: Inputs) -> torch.Tensor:
    """sum over k of |x_scale * x| * |w_scale * w| for every output, (M, N) fp32: what the allowance scales."""
    with fp32_matmul():
        return dequantize_x(inp.x, inp.x_scale).abs() @ dequantize_w(inp.w, inp.w_scale).abs().t()


@dataclass(frozen=True)
class Check:
    ok: bool  # accepted: elementwise, or with the accumulation allowance (see above)
    mode: str  # "elementwise" | "accumulation-allowance" | "failed"
    bad: int  # elements outside the elementwise tolerance (or non-finite where the reference is finite)
    numel: int
    max_abs_err: float
    rel_fro_err: float
    message: str


def check(
    out: torch.Tensor,
    ref: torch.Tensor,
    terms: torch.Tensor | None = None,
    allowance: float = ACCUMULATION_ALLOWANCE,
) -> Check:
    """Check `out` against the fp32 reference `ref`: the contract's elementwise criterion, else (given the
    terms' magnitude and a non-zero allowance) the same criterion per element plus allowance * terms."""
    numel = ref.numel()
    if tuple(out.shape) != tuple(ref.shape):
        return Check(
            False, "failed", numel, numel, float("inf"), float("inf"), f"shape {tuple(out.shape)} != {tuple(ref.shape)}"
        )
    o = out.float()
    r = ref.float()
    finite_ref = torch.isfinite(r)
    err = torch.where(finite_ref, (o - r).abs(), torch.zeros_like(r))
    err = torch.where(torch.isnan(err), torch.full_like(err, float("inf")), err)  # NaN out counts as infinite
    tol = ATOL + RTOL * r.abs()
    bad_mask = (err > tol) & finite_ref
    bad = int(bad_mask.sum())
    max_abs = float(err.max()) if numel else 0.0
    denom = float(torch.where(finite_ref, r, torch.zeros_like(r)).norm()) or 1.0
    rel = float(torch.where(finite_ref, o - r, torch.zeros_like(r)).norm()) / denom
    if not bad:
        return Check(True, "elementwise", 0, numel, max_abs, rel, f"ok (max abs err {max_abs:.3g}, rel err {rel:.3g})")
    worst = int(torch.argmax(torch.where(bad_mask, err / tol, torch.zeros_like(err))))
    i, j = divmod(worst, r.shape[1]) if r.dim() == 2 else (worst, 0)
    detail = (
        f"{bad} of {numel} elements outside |out-ref| <= {ATOL} + {RTOL}*|ref| (worst [{i},{j}]: out "
        f"{float(o.flatten()[worst]):.6g}, ref {float(r.flatten()[worst]):.6g}); rel Frobenius err {rel:.3g}"
    )
    if terms is not None and allowance:
        widened = tol + allowance * terms.float()
        still_bad = int(((err > widened) & finite_ref).sum())
        if not still_bad:
            note = "accepted with the accumulation allowance: " + detail
            return Check(True, "accumulation-allowance", bad, numel, max_abs, rel, note)
        detail += f"; {still_bad} outside even with the accumulation allowance"
    return Check(False, "failed", bad, numel, max_abs, rel, detail)
