"""gemm benchmarks in the form `kernels benchmark <repo>` runs (kernels.benchmark.Benchmark, one
setup_/benchmark_/verify_ triple per workload), uploaded beside the kernel.

Workloads are the contract's shapes, the same list as benchmarks/problem.py (a unit test holds the two
equal; this file stays self-contained because kernels' runner and the Hub upload take `benchmark*.py`
files alone): on a GPU the 18 challenge benchmark shapes and the 11 challenge test shapes, on CPU the
reduced `cpu-default` set. GemmSeedBenchmark times `gemm` (challenge layout), GemmNaturalBenchmark
`gemm_natural`. Workload names read `m1024_n1536_k7168`.

kernels' runner checks `torch.allclose(out, verify(), atol=1e-2)`, far tighter than the op's own
tolerance for outputs of magnitude ~100. So the inputs here draw scales of std 0.22 / K**0.25, which
keeps |C| around 0.05 (well under 2, where one bf16 step is below 1e-2); benchmarks/run.py, which
checks with the contract tolerance, uses the challenge's unit-variance scales. For peers, the cache
flush and device-event timing, see benchmarks/run.py.
"""

from __future__ import annotations

import torch
from kernels.benchmark import Benchmark

BLOCK = 128
TEST_SHAPES = [
    (64, 64, 128), (64, 1536, 7168), (64, 3072, 1536), (64, 576, 7168), (96, 7168, 256), (96, 7168, 2048),
    (96, 4608, 7168), (128, 7168, 2304), (128, 512, 7168), (512, 4096, 512), (512, 1536, 7168),
]  # fmt: skip
BENCH_SHAPES = [
    (m, n, k)
    for m in (1024, 6144)
    for n, k in [(1536, 7168), (3072, 1536), (576, 7168), (7168, 256), (7168, 2048), (4608, 7168), (7168, 2304),
                 (512, 7168), (4096, 512)]
]  # fmt: skip
CPU_SHAPES = [(64, 64, 128), (64, 3072, 1536), (96, 7168, 256), (128, 512, 7168), (512, 4096, 512),
              (1024, 7168, 256), (1024, 4096, 512)]  # fmt: skip
SHAPES = BENCH_SHAPES + TEST_SHAPES if torch.cuda.is_available() else CPU_SHAPES


class _Inputs:
    """randn cast to FP8, signed randn scales; natural tensors and their seed-layout transposes."""

    def __init__(self, m: int, n: int, k: int, device: str, fp8: torch.dtype, scale_std: float, seed: int):
        g = torch.Generator().manual_seed(seed)
        nb, kb = (n + BLOCK - 1) // BLOCK, k // BLOCK
        self.x = torch.randn(m, k, generator=g).to(fp8).to(device)
        self.w = torch.randn(n, k, generator=g).to(fp8).to(device)
        self.x_scale = (torch.randn(m, kb, generator=g) * scale_std).to(device)
        self.w_scale = (torch.randn(nb, kb, generator=g) * scale_std).to(device)
        self.a, self.b = self.x.t().contiguous(), self.w.t().contiguous()
        self.a_scale, self.b_scale = self.x_scale.t().contiguous(), self.w_scale.t().contiguous()

    def reference(self) -> torch.Tensor:
        """Dequantize to fp32, fp32 matmul (TF32 off), bf16."""
        n = self.w.shape[0]
        x = self.x.float() * self.x_scale.repeat_interleave(BLOCK, dim=1)
        w = self.w.float() * self.w_scale.repeat_interleave(BLOCK, 0)[:n].repeat_interleave(BLOCK, 1)
        prev = torch.get_float32_matmul_precision()
        torch.set_float32_matmul_precision("highest")
        try:
            return (x @ w.t()).to(torch.bfloat16)
        finally:
            torch.set_float32_matmul_precision(prev)


def _fp8_dtype(kernel) -> torch.dtype:
    dtypes = getattr(kernel, "SUPPORTED_DTYPES", None)
    if dtypes:
        return dtypes[0]
    return torch.float8_e4m3fnuz if getattr(torch.version, "hip", None) else torch.float8_e4m3fn


def _setup(self, shape) -> None:
    m, n, k = shape
    fp8 = _fp8_dtype(self.kernel)
    self.inputs = _Inputs(m, n, k, self.device, fp8, scale_std=0.22 / k**0.25, seed=m * 1_000_003 + n * 1_009 + k)
    self.out = torch.empty(m, n, dtype=torch.bfloat16, device=self.device)


def _verify(self) -> torch.Tensor:
    return self.inputs.reference()


def _add_workloads(cls: type, layout: str) -> type:
    for shape in SHAPES:
        name = "m{}_n{}_k{}".format(*shape)

        def setup(self, shape=shape):
            _setup(self, shape)

        if layout == "seed":

            def run(self):
                i = self.inputs
                self.kernel.gemm(i.a, i.b, i.a_scale, i.b_scale, self.out)

        else:

            def run(self):
                i = self.inputs
                self.kernel.gemm_natural(i.x, i.w, i.x_scale, i.w_scale, self.out)

        setattr(cls, f"setup_{name}", setup)
        setattr(cls, f"benchmark_{name}", run)
        setattr(cls, f"verify_{name}", _verify)
    return cls


class GemmSeedBenchmark(Benchmark):
    """gemm(a, b, a_scale, b_scale, c): the challenge layout, a (K, M), b (K, N)."""

    seed = 42


class GemmNaturalBenchmark(Benchmark):
    """gemm_natural(x, w, x_scale, w_scale, out): x (M, K), w (N, K)."""

    seed = 42


_add_workloads(GemmSeedBenchmark, "seed")
_add_workloads(GemmNaturalBenchmark, "natural")
