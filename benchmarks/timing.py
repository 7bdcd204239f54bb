"""Timing: warm-up, then the median of many runs rotated over several input sets, the last-level cache
flushed (a buffer larger than it is written) before every run.

GPU (CUDA, and ROCm through the same torch.cuda API): device events around each call, so only device
time counts; the flush runs on the stream just before the start event. CPU: time.perf_counter around
each call (the op is synchronous on CPU).

Interleaving: a GPU that caps its power (the H200 here) runs slower the longer it is loaded, so timing
each implementation in one block favours whichever runs first. `benchmarks.run` therefore times all of a
shape's implementations either in several rounds of blocks, in a different order each round (round_order,
`--interleave rounds`), or call by call (time_interleaved, `--interleave calls`: every repetition
runs each implementation once, so all of them sample the same stretch of clock and power states), and
takes each one's median over all its samples.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch


@dataclass(frozen=True)
class Budget:
    """How hard to measure one (shape, layout, impl)."""

    warmup_min: int  # at least this many warm-up calls...
    warmup_s: float  # ...and at least this long
    reps_min: int
    reps_max: int
    target_s: float  # aim for this much timed work

    @staticmethod
    def for_device(device_type: str, quick: bool) -> Budget:
        if device_type == "cpu":
            return Budget(1, 0.0, 2, 5, 0.5) if quick else Budget(2, 0.2, 3, 15, 2.0)
        return Budget(3, 0.01, 5, 30, 0.03) if quick else Budget(5, 0.05, 20, 200, 0.25)

    def per_round(self, rounds: int) -> Budget:
        """This budget shared out over `rounds` interleaved rounds (each still warms up)."""
        if rounds <= 1:
            return self
        return Budget(
            self.warmup_min,
            self.warmup_s,
            max(1, -(-self.reps_min // rounds)),
            max(1, -(-self.reps_max // rounds)),
            self.target_s / rounds,
        )


def round_order(items: Sequence, r: int, rounds: int) -> list:
    """The order of `items` in round r of `rounds` interleaved rounds. Rotated, so that each item runs first
    in its turn (spread over the rounds when there are more items than rounds); on odd rounds the items
    after the first also run in reverse, so that no item always runs right after the same neighbour: with
    a rotation alone, one kernel timed in two slots of a round differed by 1.3-2.0 % (gemm/cuda/NOTES.md,
    runs 74-75)."""
    items = list(items)
    n = len(items)
    if n == 0:
        return []
    shift = r % n if rounds >= n else (r * n) // rounds
    order = items[shift:] + items[:shift]
    return order[:1] + order[:0:-1] if r % 2 else order


@dataclass(frozen=True)
class Timing:
    us: float  # median
    us_min: float
    us_max: float
    reps: int

    def to_json(self) -> dict:
        return {"us": self.us, "us_min": self.us_min, "us_max": self.us_max, "reps": self.reps}


def llc_bytes(device: torch.device) -> int:
    """Size of the cache to flush: GPU L2 (or MI300X's 256 MB Infinity Cache), CPU L3."""
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        l2 = int(getattr(props, "L2_cache_size", 0) or 0)
        if getattr(torch.version, "hip", None):
            return max(l2, 256 << 20)  # MI300X: the 256 MB Infinity Cache sits behind the L2
        return max(l2, 50 << 20)  # H200: 50 MB L2 (torch reports 60 MiB)
    best = 0
    for f in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        text = f.read_text().strip()
        try:
            value = int(text.rstrip("KMG"))
        except ValueError:
            continue
        value *= {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
        best = max(best, value)
    return best or (32 << 20)


class Flusher:
    """Writes a buffer twice the size of the last-level cache (at least 64 MB).

    On CUDA it then queues a spin (`torch.cuda._sleep`) long enough to cover the host's own time for the
    call (Python checks, allocation, launches: measured during warm-up by `time_samples`), so the GPU is
    still busy when the start event is recorded and host time never shows up as idle GPU time between the
    two events.
    """

    MIN_SPIN_US = 50.0
    MAX_SPIN_US = 2000.0
    CYCLES_PER_US = 2000  # _sleep counts SM clock cycles; ~2 GHz boost clocks on H200 (and MI300X)

    def __init__(self, device: torch.device) -> None:
        self.nbytes = max(2 * llc_bytes(device), 64 << 20)
        self.buf = torch.empty(self.nbytes // 4, dtype=torch.int32, device=device)
        self._i = 0
        self._spin = device.type == "cuda" and hasattr(torch.cuda, "_sleep")

    def __call__(self, spin_us: float = MIN_SPIN_US) -> None:
        self._i += 1
        self.buf.fill_(self._i)
        if self._spin:
            spin_us = min(max(spin_us, self.MIN_SPIN_US), self.MAX_SPIN_US)
            torch.cuda._sleep(int(spin_us * self.CYCLES_PER_US))


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def warm_up(fns: Sequence[Callable[[], object]], device: torch.device, budget: Budget) -> tuple[float, float]:
    """Runs the warm-up calls; (seconds per call, the host's longest own time per call in us). Launch
    returns before the GPU finishes, so the host time is what the flush's spin must cover; the first call
    may initialise things, so it does not count."""
    if not fns:
        raise ValueError("warm_up: no function to time")
    n = 0
    host_us = 0.0
    t0 = time.perf_counter()
    while n < budget.warmup_min or time.perf_counter() - t0 < budget.warmup_s:
        t_call = time.perf_counter()
        fns[n % len(fns)]()
        if n:
            host_us = max(host_us, (time.perf_counter() - t_call) * 1e6)
        n += 1
        sync(device)
    return max((time.perf_counter() - t0) / n, 1e-7), host_us


def reps_for(budget: Budget, estimate_s: float) -> int:
    """How many timed calls the budget gives a call of `estimate_s` seconds."""
    return int(min(budget.reps_max, max(budget.reps_min, budget.target_s / estimate_s)))


def time_samples(
    fns: Sequence[Callable[[], object]],
    device: torch.device,
    budget: Budget,
    flush: Flusher | None,
    after_warm_up: Callable[[], None] | None = None,
) -> list[float]:
    """Times (us) of calls rotated over `fns` (one per input set), after a warm-up (then `after_warm_up()`)."""
    estimate, host_us = warm_up(fns, device, budget)
    if after_warm_up is not None:
        after_warm_up()
    return time_interleaved([fns], device, [reps_for(budget, estimate)], [host_us], flush)[0]


def time_interleaved(
    impl_fns: Sequence[Sequence[Callable[[], object]]],
    device: torch.device,
    reps: Sequence[int],
    host_us: Sequence[float],
    flush: Flusher | None,
) -> list[list[float]]:
    """Times (us) of reps[i] calls of each implementation i (impl_fns[i]: its functions, one per input set,
    taken in turn), interleaved call by call over max(reps) repetitions: repetition r runs, in
    round_order(r), every implementation due in it, and one with fewer calls is due at evenly spaced
    repetitions (is_due), so all of them sample the same stretch of the GPU's clock and power states (the
    H200 caps its power: a block of one kernel's calls runs at the clock the block before it left), a
    slow reference as well as a fast kernel. host_us[i]: implementation i's host time per call, from its
    warm-up, which the flush's spin covers. On CUDA every call lies between its own pair of device events."""
    n = len(impl_fns)
    if any(not fns for fns in impl_fns):
        raise ValueError("time_interleaved: an implementation without a function to time")
    if len(reps) != n or any(c < 1 for c in reps):
        raise ValueError(f"time_interleaved: want a call count >= 1 per implementation, got {list(reps)}")
    total = max(reps)
    schedule = [[i for i in round_order(range(n), r, total) if is_due(r, reps[i], total)] for r in range(total)]
    done = [0] * n  # calls made so far, per implementation
    if device.type == "cuda":
        # all events made up front, so that nothing but the calls runs on the host between them
        events = [
            [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(c)]
            for c in reps
        ]
        for r in range(total):
            for i in schedule[r]:
                if flush is not None:
                    flush(1.5 * host_us[i] + 20.0)
                start, end = events[i][done[i]]
                start.record()
                impl_fns[i][done[i] % len(impl_fns[i])]()
                end.record()
                done[i] += 1
        sync(device)
        return [[s.elapsed_time(e) * 1e3 for s, e in pairs] for pairs in events]
    times_us: list[list[float]] = [[] for _ in range(n)]
    for r in range(total):
        for i in schedule[r]:
            if flush is not None:
                flush()
            t = time.perf_counter()
            impl_fns[i][done[i] % len(impl_fns[i])]()
            times_us[i].append((time.perf_counter() - t) * 1e6)
            done[i] += 1
    return times_us


def is_due(r: int, count: int, total: int) -> bool:
    """Whether an implementation timed `count` times over `total` repetitions runs in repetition r: when
    r * count / total passes a whole number, so its calls are spread evenly (every repetition when
    count == total)."""
    return (r * count) // total < ((r + 1) * count) // total


def stretches(samples: Sequence[float], parts: int) -> list[list[float]]:
    """`samples` cut into `parts` consecutive stretches of (nearly) equal length (fewer when there are
    fewer samples than parts)."""
    parts = max(1, min(parts, len(samples)))
    return [list(samples[j * len(samples) // parts : (j + 1) * len(samples) // parts]) for j in range(parts)]


def summarize(times_us: Sequence[float]) -> Timing:
    if not times_us:
        raise ValueError("summarize: no samples")
    return Timing(statistics.median(times_us), min(times_us), max(times_us), len(times_us))


def time_fns(
    fns: Sequence[Callable[[], object]], device: torch.device, budget: Budget, flush: Flusher | None
) -> Timing:
    """Median time of calls rotated over `fns` (one per input set)."""
    return summarize(time_samples(fns, device, budget, flush))
