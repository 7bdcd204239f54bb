"""benchmarks/benchmark.py in the form `kernels benchmark` runs: discovered and run by kernels' own runner."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from kernels._internals.cli.benchmark import discover_benchmark_classes, run_benchmark_class  # its runner
from kernels.benchmark import Benchmark

from benchmarks import problem

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "benchmark.py"


@pytest.fixture(scope="module")
def classes():
    return {c.__name__: c for c in discover_benchmark_classes(SCRIPT, REPO)}


def test_workloads_are_the_shape_list(classes):
    import torch

    script = sys.modules[next(iter(classes.values())).__module__]
    assert script.TEST_SHAPES == list(problem.TEST_SHAPES)
    assert script.BENCH_SHAPES == list(problem.BENCH_SHAPES)
    assert script.CPU_SHAPES == list(problem.CPU_DEFAULT_SHAPES)
    assert set(classes) == {"GemmSeedBenchmark", "GemmNaturalBenchmark"}
    expected = problem.SHAPE_SETS["all" if torch.cuda.is_available() else "cpu-default"]
    for cls in classes.values():
        names = sorted(n.removeprefix("benchmark_") for n in dir(cls) if n.startswith("benchmark_"))
        assert names == sorted(f"m{m}_n{n}_k{k}" for m, n, k in expected)
        for name in names:
            assert callable(getattr(cls, f"setup_{name}")) and callable(getattr(cls, f"verify_{name}"))


def test_kernels_runner_verifies_a_workload(classes, variant_dir, kernel):
    """kernels' runner on the 64x64x128 workload of both classes: its allclose(atol=1e-2) check passes."""
    if kernel.BACKEND != "cpu":
        pytest.skip("run on the CPU variant here; the GPU variants run it on their machines")
    for name, cls in classes.items():
        tiny = type(name, (Benchmark,), {
            "seed": cls.seed,
            **{f"{p}_m64_n64_k128": getattr(cls, f"{p}_m64_n64_k128") for p in ("setup", "benchmark", "verify")},
        })  # fmt: skip
        results, _ = run_benchmark_class(
            tiny, iterations=2, warmup=1, repo_id=str(variant_dir.parent), is_local=True, revision="local"
        )
        assert results["m64_n64_k128"].verified is True


def test_its_reference_is_the_harness_reference(classes):
    import torch

    script = sys.modules[next(iter(classes.values())).__module__]
    inp = script._Inputs(40, 300, 384, "cpu", torch.float8_e4m3fn, scale_std=0.1, seed=3)
    same = problem.Inputs(problem.Shape(40, 300, 384), inp.x, inp.w, inp.x_scale, inp.w_scale,
                          inp.a, inp.b, inp.a_scale, inp.b_scale)  # fmt: skip
    assert torch.equal(inp.reference(), problem.reference(same).to(torch.bfloat16))
    assert torch.equal(inp.a, inp.x.t()) and torch.equal(inp.b_scale, inp.w_scale.t())
