"""benchmarks.timing: the order of the implementations in each interleaved round, and call-by-call interleaving."""

from __future__ import annotations

import pytest
import torch

from benchmarks.timing import round_order


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8])
@pytest.mark.parametrize("rounds", [1, 2, 3, 5, 10])
def test_every_item_once_per_round(n, rounds):
    items = [f"impl{i}" for i in range(n)]
    for r in range(rounds):
        order = round_order(items, r, rounds)
        assert sorted(order) == sorted(items), (r, order)


@pytest.mark.parametrize("n", [2, 3, 5, 8])
def test_each_item_first_in_its_turn(n):
    items = list(range(n))
    firsts = [round_order(items, r, n)[0] for r in range(n)]
    assert sorted(firsts) == items


@pytest.mark.parametrize("n", [3, 5, 8])
def test_no_item_always_behind_the_same_neighbour(n):
    # A rotation alone gives every item one predecessor in every round; counterbalanced rounds give two.
    items = list(range(n))
    behind: dict[int, set[int]] = {i: set() for i in items}
    for r in range(2 * n):
        order = round_order(items, r, 2 * n)
        for prev, item in zip(order, order[1:], strict=False):
            behind[item].add(prev)
    assert all(len(prevs) >= 2 for prevs in behind.values()), behind


def test_more_items_than_rounds_spreads_the_first_slot():
    items = list(range(8))
    firsts = [round_order(items, r, 3)[0] for r in range(3)]
    assert len(set(firsts)) == 3


def test_empty():
    assert round_order([], 0, 3) == []


# ------------------------------------------------------------------ call-by-call interleaving (CPU path)


def _recording_impls(n: int, log: list[str], sets: int = 2):
    """n implementations with `sets` functions each, every call appended to `log` as 'i.set'."""
    return [[(lambda i=i, s=s: log.append(f"{i}.{s}")) for s in range(sets)] for i in range(n)]


class _CountingFlush:
    def __init__(self, log: list[str]) -> None:
        self.log = log

    def __call__(self, spin_us: float = 0.0) -> None:
        self.log.append("flush")


@pytest.mark.parametrize("n", [1, 2, 4])
def test_interleaved_runs_every_implementation_once_per_repetition(n):
    from benchmarks.timing import time_interleaved

    log: list[str] = []
    times = time_interleaved(_recording_impls(n, log), torch.device("cpu"), [6] * n, [0.0] * n, _CountingFlush(log))
    assert [len(t) for t in times] == [6] * n and all(x >= 0 for t in times for x in t)
    calls = [c for c in log if c != "flush"]
    assert len(log) == 2 * len(calls), "a flush before every call"
    assert all(log[i] == "flush" for i in range(0, len(log), 2))
    for r in range(6):
        rep = calls[r * n : (r + 1) * n]
        assert sorted(c.split(".")[0] for c in rep) == [str(i) for i in range(n)], rep
        assert {c.split(".")[1] for c in rep} == {str(r % 2)}, "repetition r uses input set r % sets"
    if n > 1:
        firsts = {calls[r * n] for r in range(6)}
        assert len({f.split(".")[0] for f in firsts}) == n, "each implementation goes first in its turn"


def test_interleaved_refuses_an_implementation_without_functions():
    from benchmarks.timing import time_interleaved

    with pytest.raises(ValueError, match="without a function"):
        time_interleaved([[lambda: None], []], torch.device("cpu"), [3, 3], [0.0, 0.0], None)
    with pytest.raises(ValueError, match="call count"):
        time_interleaved([[lambda: None], [lambda: None]], torch.device("cpu"), [3, 0], [0.0, 0.0], None)


def test_a_slower_implementation_with_fewer_calls_is_spread_over_the_whole_stretch():
    from benchmarks.timing import time_interleaved

    log: list[str] = []
    times = time_interleaved(_recording_impls(2, log, sets=3), torch.device("cpu"), [12, 3], [0.0, 0.0], None)
    assert [len(t) for t in times] == [12, 3]
    slow = [j for j, c in enumerate(log) if c.startswith("1.")]
    fast = [j for j, c in enumerate(log) if c.startswith("0.")]
    # one slow call in each quarter of the fast one's calls, not all three at the start
    quarters = [sum(fast[4 * q] < s < fast[4 * q + 3] + 2 for s in slow) for q in range(3)]
    assert quarters == [1, 1, 1], (log, quarters)
    assert [c for c in log if c.startswith("1.")] == ["1.0", "1.1", "1.2"], "each implementation's sets in turn"


@pytest.mark.parametrize(("count", "total"), [(1, 1), (1, 7), (3, 12), (5, 12), (12, 12), (20, 200)])
def test_is_due_spreads_count_calls_over_total_repetitions(count, total):
    from benchmarks.timing import is_due

    due = [r for r in range(total) if is_due(r, count, total)]
    assert len(due) == count
    gaps = [b - a for a, b in zip(due, due[1:], strict=False)]
    assert not gaps or max(gaps) - min(gaps) <= 1, due


@pytest.mark.parametrize(("n", "parts"), [(22, 5), (51, 5), (200, 3), (3, 5), (1, 1)])
def test_stretches_are_consecutive_and_nearly_equal(n, parts):
    from benchmarks.timing import stretches

    got = stretches(list(range(n)), parts)
    assert [x for part in got for x in part] == list(range(n))
    assert len(got) == min(n, parts)
    sizes = [len(p) for p in got]
    assert max(sizes) - min(sizes) <= 1, sizes


def test_reps_for_stays_inside_the_budget():
    from benchmarks.timing import Budget, reps_for

    b = Budget(1, 0.0, 20, 200, 0.25)
    assert reps_for(b, 1.0) == 20  # slow calls: the minimum
    assert reps_for(b, 1e-6) == 200  # fast calls: the maximum
    assert reps_for(b, 0.0025) == 100


def test_the_flush_is_not_in_the_cpu_timings():
    """A flush that takes 30 ms around calls that take none: every sample must stay far below it."""
    import time

    from benchmarks import timing

    def slow_flush(*_):
        time.sleep(0.03)

    (samples,) = timing.time_interleaved([[lambda: None]], torch.device("cpu"), [4], [0.0], slow_flush)
    assert len(samples) == 4 and max(samples) < 10_000, samples  # us


def test_cuda_events_bracket_each_call_and_not_the_flush(monkeypatch):
    """The CUDA branch, with stand-in events: flush (and its spin) first, then the start event, the call and
    the end event, for every call; the samples are the events' elapsed times."""
    from benchmarks import timing

    log = []

    class FakeEvent:
        def __init__(self, enable_timing=False):
            assert enable_timing
            self.t = None

        def record(self):
            self.t = len(log)
            log.append("record")

        def elapsed_time(self, end):
            return (end.t - self.t) / 1e3  # ms

    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    monkeypatch.setattr(timing, "sync", lambda device: None)
    (samples,) = timing.time_interleaved(
        [[lambda: log.append("call")]], torch.device("cuda"), [3], [10.0], lambda spin_us: log.append("flush")
    )
    assert log == ["flush", "record", "call", "record"] * 3
    assert samples == [2.0, 2.0, 2.0]  # each pair spans only its call
