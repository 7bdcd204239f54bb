"""gemm benchmarks in the form `kernels benchmark <repo>` runs (kernels.benchmark.Benchmark, one
setup_/benchmark_/verify_ triple per workload), uploaded beside the kernel.

Workloads are the shapes of benchmarks/problem.py (the same list `python -m benchmarks.run` uses):
on a GPU the 18 challenge benchmark shapes and the 11 challenge test shapes, on CPU the reduced
`cpu-default` set; class GemmSeedBenchmark times `gemm` (challenge layout), GemmNaturalBenchmark times
`gemm_natural`. Workload names read `m1024_n1536_k7168`.

kernels' runner checks `torch.allclose(out, verify(), atol=1e-2)`, far tighter than the op's own
tolerance for outputs of magnitude ~100. So the inputs here draw scales of std 0.22 / K**0.25, which
keeps |C| around 0.05 (well under 2, where one bf16 step is below 1e-2); benchmarks/run.py, which
checks with the contract tolerance, uses the challenge's unit-variance scales. For peers, the L2 flush
and device-event timing, see benchmarks/run.py.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import torch
from kernels.benchmark import Benchmark


def _load_problem():
    # kernels imports this file on its own (not as part of a package): load the shared problem by path.
    name = "gemm_benchmarks_problem"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).resolve().with_name("problem.py"))
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


problem = _load_problem()
SHAPES = [
    problem.Shape(*s)
    for s in (problem.SHAPE_SETS["all"] if torch.cuda.is_available() else problem.SHAPE_SETS["cpu-default"])
]


def _fp8_dtype(kernel) -> torch.dtype:
    dtypes = getattr(kernel, "SUPPORTED_DTYPES", None)
    if dtypes:
        return dtypes[0]
    return torch.float8_e4m3fnuz if getattr(torch.version, "hip", None) else torch.float8_e4m3fn


def _setup(self, shape) -> None:
    gen = torch.Generator().manual_seed(shape.m * 1_000_003 + shape.n * 1_009 + shape.k)
    self.inputs = problem.make_inputs(shape, self.device, _fp8_dtype(self.kernel), gen, scale_std=0.22 / shape.k**0.25)
    self.out = torch.empty(shape.m, shape.n, dtype=torch.bfloat16, device=self.device)


def _verify(self) -> torch.Tensor:
    return problem.reference(self.inputs).to(torch.bfloat16)


def _add_workloads(cls: type, layout: str) -> type:
    for shape in SHAPES:
        name = f"m{shape.m}_n{shape.n}_k{shape.k}"

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
