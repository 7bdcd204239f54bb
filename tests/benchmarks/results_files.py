"""Synthetic benchmark results files (schema of benchmarks/report.py) for the tests of the tools that read
them (benchmarks.compare, scripts.gpu_test)."""

from __future__ import annotations

from benchmarks import report

# (m, layout, impl) -> us, or (us, round medians); a shape given as m alone is m x 256 x 512, else (m, n, k)
Times = dict[tuple[int, str, str], "float | tuple[float, list[float]]"]


def results_doc(times: Times, platform: str = "h200") -> dict:
    records = []
    for (shape, layout, impl), t in times.items():
        m, n, k = shape if isinstance(shape, tuple) else (shape, 256, 512)
        us, rounds = t if isinstance(t, tuple) else (t, [t, t, t])
        records.append(
            {
                "m": m,
                "n": n,
                "k": k,
                "layout": layout,
                "impl": impl,
                "us": us,
                "us_min": us,
                "us_max": us,
                "reps": 20,
                "tflops": 1.0,
                "pct_sol": None,
                "check": "elementwise",
                "outside_tol": 0,
                "max_abs_err": 0.0,
                "rel_err": 0.0,
                "round_us": rounds,
            }  # fmt: skip
        )
    doc = {"schema": report.SCHEMA, "platform": platform, "variant": "v", "date": "2026-12-03T00:00:00Z", "env": {},
           "config": {}, "sol": None, "impls": {impl: {} for (_, _, impl) in times}, "records": records,
           "refused": []}  # fmt: skip
    return report.validate(doc)


def ours_and_torch(ours: float, torch: float, m: int = 64, platform: str = "h200") -> dict:
    """One natural-layout shape timed for gemm and torch_blockwise."""
    return results_doc({(m, "natural", "gemm"): ours, (m, "natural", "torch_blockwise"): torch}, platform)
