"""Benchmark harness of the gemm kernel: `python -m benchmarks.run` (see benchmarks/README.md)."""
