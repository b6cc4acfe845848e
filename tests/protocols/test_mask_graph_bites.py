"""protocols/_mask_graph.py pinned down (issue 14, mutation testing).

The expected graphs are built here from the module docstring's definition of the Harary
graph H_{k,n} with frozensets (position i joined to i +- 1..floor(k/2) mod n; odd k: even n
adds {i, i + n/2}, odd n adds {i, i + (n+1)/2 mod n} for i = 0..(n-1)/2; H_{1,n} the path;
k = 0 or k >= n - 1 the complete graph), and small cases are written out by hand.
"""

from __future__ import annotations

import itertools
import re

import numpy as np
import pytest

from finite_field import ParameterError
from protocols._mask_graph import (check_mask_degree, collusion_threshold, mask_edges,
                                   mask_neighbours)

pytestmark = pytest.mark.timeout(120)


def exactly(message: str) -> str:
    return f"^{re.escape(message)}$"


def _harary(n: int, k: int) -> set:
    if k == 0 or k >= n - 1:
        return {frozenset(e) for e in itertools.combinations(range(n), 2)}
    if k == 1:
        return {frozenset((i, i + 1)) for i in range(n - 1)}
    edges = set()
    for i in range(n):
        for step in range(1, k // 2 + 1):
            edges.add(frozenset((i, (i + step) % n)))
            edges.add(frozenset((i, (i - step) % n)))
    if k % 2 == 1:
        if n % 2 == 0:
            edges |= {frozenset((i, i + n // 2)) for i in range(n // 2)}
        else:
            edges |= {frozenset((i, (i + (n + 1) // 2) % n)) for i in range((n - 1) // 2 + 1)}
    return edges


@pytest.mark.parametrize("n", range(2, 12))
def test_mask_edges_are_the_harary_graph_of_the_docstring(n):
    for k in range(0, n + 2):
        got = mask_edges(n, k)
        assert all(type(e) is tuple and len(e) == 2 and e[0] < e[1] for e in got), (n, k)
        assert {frozenset(e) for e in got} == _harary(n, k), (n, k)
        assert len(got) == len(_harary(n, k))


def test_small_graphs_written_out():
    assert mask_edges(2, 0) == {(0, 1)}
    assert mask_edges(2, 1) == {(0, 1)}
    assert mask_edges(4, 1) == {(0, 1), (1, 2), (2, 3)}                 # a path, no cycle
    assert mask_edges(5, 2) == {(0, 1), (1, 2), (2, 3), (3, 4), (0, 4)}  # the cycle
    assert mask_edges(6, 3) == {(0, 1), (1, 2), (2, 3), (3, 4), (4, 5), (0, 5),
                                (0, 3), (1, 4), (2, 5)}
    # odd n, odd k: the cycle plus {0,3}, {1,4}, {2,0}: vertex 0 has degree k + 1 = 4
    assert mask_edges(5, 3) == {(0, 1), (1, 2), (2, 3), (3, 4), (0, 4), (0, 3), (1, 4),
                                (0, 2)}
    assert mask_edges(7, 4) == {(i, j) for i in range(7) for j in range(i + 1, 7)
                                if (j - i) % 7 in (1, 2, 5, 6)}


def test_neighbours_and_degrees():
    assert mask_neighbours(5, 0, 3) == [1, 2, 3, 4]
    assert mask_neighbours(5, 2, 3) == [0, 1, 3]
    assert mask_neighbours(5, 4, 3) == [0, 1, 3]
    assert mask_neighbours(4, 0, 1) == [1] and mask_neighbours(4, 3, 1) == [2]
    assert mask_neighbours(4, 1, 1) == [0, 2]
    assert mask_neighbours(3, 2, 0) == [0, 1]
    for n in range(2, 10):
        for k in range(0, n + 1):
            edges = _harary(n, k)
            for position in range(n):
                expected = sorted(j for e in edges if position in e for j in e
                                  if j != position)
                assert mask_neighbours(n, position, k) == expected, (n, k, position)


@pytest.mark.parametrize("position", [-1, 5, 6, 100])
def test_a_position_outside_the_responders_is_refused(position):
    with pytest.raises(ParameterError, match=exactly(f"position must be in [0, 5), got "
                                                     f"{position}")):
        mask_neighbours(5, position, 2)


def test_collusion_threshold_is_the_effective_degree_minus_one():
    assert collusion_threshold(6, 3) == 2
    assert collusion_threshold(6, 0) == 4 and collusion_threshold(6, 5) == 4
    assert collusion_threshold(6, 9) == 4 and collusion_threshold(6, 4) == 3
    assert collusion_threshold(2, 0) == 0 and collusion_threshold(2, 1) == 0
    assert collusion_threshold(3, 1) == 0 and collusion_threshold(3, 2) == 1
    # a degree of exactly n (or more) is the complete graph too
    assert collusion_threshold(6, 6) == 4 and collusion_threshold(2, 2) == 0
    for n in range(2, 9):
        for k in range(0, n + 3):
            assert collusion_threshold(n, k) == (n - 2 if k == 0 or k >= n - 1 else k - 1)


@pytest.mark.parametrize("n", [1, 0, -3])
def test_a_graph_needs_two_responders(n):
    for degree in (0, 1, 3):
        with pytest.raises(ParameterError, match=exactly(
                f"a mask graph needs at least 2 responders, got {n}")):
            mask_edges(n, degree)
        with pytest.raises(ParameterError, match=exactly(
                f"a mask graph needs at least 2 responders, got {n}")):
            collusion_threshold(n, degree)


class _Index:
    def __init__(self, value):
        self.value = value

    def __index__(self):
        return self.value

    def __int__(self):
        return self.value

    def __repr__(self):
        return f"_Index({self.value})"


def test_check_mask_degree_accepts_integers_and_returns_an_int():
    for good, value in [(0, 0), (1, 1), ((1 << 20) - 1, (1 << 20) - 1), (np.int64(3), 3),
                        (np.uint8(2), 2), (_Index(4), 4)]:
        got = check_mask_degree(good)
        assert got == value and type(got) is int
    assert mask_edges(4, np.int64(1)) == {(0, 1), (1, 2), (2, 3)}


@pytest.mark.parametrize("bad", [True, False, np.True_, 1.0, 2.5, "2", None, [1]])
def test_check_mask_degree_refuses_what_is_not_an_integer(bad):
    with pytest.raises(ParameterError, match=exactly(
            f"mask_degree must be an integer (0 = every pair), got {bad!r}")):
        check_mask_degree(bad)


@pytest.mark.parametrize("bad", [-1, -7, 1 << 20, (1 << 20) + 1, np.int64(-2)])
def test_check_mask_degree_refuses_negative_or_huge_degrees(bad):
    with pytest.raises(ParameterError, match=exactly(
            f"mask_degree must be 0 (every pair masks) or k >= 1, got {int(bad)}")):
        check_mask_degree(bad)
    with pytest.raises(ParameterError):
        mask_edges(6, bad)
