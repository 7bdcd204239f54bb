"""Speed of light per platform: the time below which no kernel can run a shape.

    sol_us(m, n, k) = max(2*m*n*k / peak_flops, (m*k + n*k + 2*m*n) bytes / bandwidth)

MI300X: AMD's own formula with the datasheet's dense FP8 peak (2614.9 TFLOP/s) and HBM3 (5.3 TB/s),
as docs/mi300x-notes.md tabulates it. H200: the datasheet FP8 number is not reached on the power-capped
card, so the peak is the *measured* per-tensor cuBLAS FP8 ceiling (`torch._scaled_mm`, fast accumulation),
measured in the same run by `benchmarks.run` or, when that is not possible, taken from the notes
(docs/research/h200-baselines.md: ~1.25 PFLOP/s sustained, 4.3 TB/s copy rate). CPU: no speed of light.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class SpeedOfLight:
    peak_tflops: float  # dense FP8 matrix rate, TFLOP/s
    bandwidth_tbps: float  # memory bandwidth, TB/s
    source: str  # where the two numbers come from

    def us(self, m: int, n: int, k: int) -> float:
        compute = 2.0 * m * n * k / (self.peak_tflops * 1e12)
        memory = float(m * k + n * k + 2 * m * n) / (self.bandwidth_tbps * 1e12)
        return max(compute, memory) * 1e6

    def pct(self, m: int, n: int, k: int, us: float) -> float:
        """Percent of the speed of light reached by a run of `us` microseconds."""
        return 100.0 * self.us(m, n, k) / us

    def to_json(self) -> dict:
        return asdict(self)


MI300X = SpeedOfLight(
    peak_tflops=2614.9,
    bandwidth_tbps=5.3,
    source="MI300X datasheet: dense FP8 2614.9 TFLOP/s, HBM3 5.3 TB/s (docs/mi300x-notes.md)",
)

H200_NOTES = SpeedOfLight(
    peak_tflops=1250.0,
    bandwidth_tbps=4.3,
    source=(
        "H200 measured earlier, not in this run (docs/research/h200-baselines.md): per-tensor cuBLAS FP8 "
        "~1.25 PFLOP/s sustained, 4.3 TB/s copy rate"
    ),
)


def geomean(values: list[float]) -> float:
    import math

    vals = [v for v in values if v and v > 0]
    if not vals:
        return float("nan")
    return math.exp(sum(math.log(v) for v in vals) / len(vals))
