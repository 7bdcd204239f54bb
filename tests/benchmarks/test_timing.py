"""benchmarks.timing.round_order: the order of the implementations in each interleaved round."""

from __future__ import annotations

import pytest

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
