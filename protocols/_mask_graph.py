"""Which responders mask with which: a public Harary graph over the ordered responding set.

With pairwise masks on every pair of the responding set B (the complete graph, the default)
a party expands |B| - 1 keystreams the size of its whole upload. SecAgg+ (Bell et al., CCS
2020) masks only along the edges of a sparser graph G. The coordinator, colluding with a
set C of parties, can add the uploads over any connected component S of G - C and remove
the masks on the edges between S and C (the colluders hold those keys): it learns the sum
over S of the parties' (weighted) evaluations, and nothing more from the masks. If G is
k-vertex-connected, any |C| <= k - 1 leaves G - C connected, so the only sum it learns is
the one over all honest responders, which it learns from D anyway. A set C of k parties
that separates G gives partial sums: the collusion threshold is exactly k - 1.

The graph is the Harary graph H_{k,n} (n = |B|) on the positions of B in roster order:
position i is joined to i +- 1, ..., i +- floor(k/2) (mod n); for odd k also to the
"opposite" position (i + n/2 for even n; for odd n the edges {i, i + (n+1)/2} for
i = 0..(n-1)/2, so one vertex has degree k + 1); H_{1,n} is the path 0-1-...-(n-1). H_{k,n} is k-vertex-connected with the
fewest edges possible (Harary, 1962). ``degree`` 0, or any degree >= n - 1, gives the
complete graph. It is a function of public, agreed values only (B as shown and the
session's ``mask_degree``, which every party checks in the roster), so every honest
party of one view uses the same graph and the masks cancel.

How strong the graph must be (distance sessions). The coordinator chooses B: with
|B| = 2l + 2t - 1 it leaves r = 0 redundant responders, so no integrity check runs and each
party uploads c_j * g(beta_j) masked by these pairwise masks alone. The shares withstand t
colluding parties, so the masks must too: k - 1 >= t, i.e. ``mask_degree`` 0 or at least
t + 1 (:func:`check_distance_mask_degree`, applied by ``SessionParameters`` and the session
config at load). With k <= t, k colluders (no more than the t the shares allow) that
separate H_{k,|B|} read a partial sum; on the path (k = 1) one colluder next to an end reads
that party's whole weighted evaluation (tests/protocols/test_mask_degree.py). A secure sum has no t and keeps ``k >= 1``.

Examples
--------
>>> mask_neighbours(6, 0, 2)
[1, 5]
>>> mask_neighbours(6, 0, 3)
[1, 3, 5]
>>> mask_neighbours(4, 2, 0)      # 0: the complete graph
[0, 1, 3]
>>> collusion_threshold(6, 3), collusion_threshold(6, 0)
(2, 4)
"""

from __future__ import annotations

import operator

from finite_field import ParameterError

__all__ = ["mask_neighbours", "mask_edges", "collusion_threshold", "check_mask_degree",
           "check_distance_mask_degree"]


def check_mask_degree(degree) -> int:
    """``degree`` as an int: 0 (complete graph) or k >= 1; ParameterError otherwise."""
    if isinstance(degree, bool) or not isinstance(degree, int) and not (
            hasattr(degree, "__index__")):
        raise ParameterError(f"mask_degree must be an integer (0 = every pair), got "
                             f"{degree!r}")
    degree = int(degree)
    if not 0 <= degree < 1 << 20:
        raise ParameterError(f"mask_degree must be 0 (every pair masks) or k >= 1, got "
                             f"{degree}")
    return degree


def check_distance_mask_degree(degree, noise_segments, *, name: str = "mask_degree") -> int:
    """``degree`` as an int if a distance session with t = ``noise_segments`` may use it:
    0 (every pair) or k >= t + 1, so that the masks withstand t colluding parties as the
    shares do; ParameterError (naming ``name``) otherwise.

    >>> check_distance_mask_degree(2, 1), check_distance_mask_degree(0, 3)
    (2, 0)
    >>> try:
    ...     check_distance_mask_degree(1, 1)
    ... except ParameterError as error:
    ...     print(str(error)[:70])
    mask_degree must be 0 (every pair) or at least t + 1 = 2 (noise_segmen
    """
    degree = check_mask_degree(degree)
    try:
        t = operator.index(noise_segments)
    except TypeError:  # not an integer: the coding plan refuses it by name
        return degree
    if 1 <= degree <= t:
        raise ParameterError(
            f"{name} must be 0 (every pair) or at least t + 1 = {t + 1} (noise_segments "
            f"t = {t}), got {degree}: the coordinator chooses the responders and can leave "
            f"no integrity check (r = 0), and then a mask graph of degree {degree} "
            f"withstands only {degree - 1} colluding parties, fewer than the t = {t} the "
            "shares withstand (docs/protocol.md, \"Mask graph\")")
    return degree


def _effective(n: int, degree: int) -> int:
    degree = check_mask_degree(degree)
    if n < 2:
        raise ParameterError(f"a mask graph needs at least 2 responders, got {n}")
    return n - 1 if degree == 0 or degree >= n - 1 else degree


def mask_edges(n: int, degree: int) -> set:
    """Edges {(i, j), i < j} of H_{k,n} over positions 0..n-1 (complete if k >= n - 1)."""
    k = _effective(n, degree)
    if k == 1:  # H_{1,n}: the path 0-1-...-(n-1), connected with the fewest edges
        return {(i, i + 1) for i in range(n - 1)}
    edges = set()
    for i in range(n):
        for step in range(1, k // 2 + 1):
            j = (i + step) % n
            edges.add((min(i, j), max(i, j)))
    if k % 2:
        if n % 2 == 0:
            pairs = [(i, i + n // 2) for i in range(n // 2)]
        else:
            pairs = [(i, (i + (n + 1) // 2) % n) for i in range((n + 1) // 2)]
        edges.update((min(i, j), max(i, j)) for i, j in pairs if i != j)
    return edges


def mask_neighbours(n: int, position: int, degree: int) -> list:
    """Sorted positions joined to ``position`` in the mask graph of ``n`` responders."""
    if not 0 <= position < n:
        raise ParameterError(f"position must be in [0, {n}), got {position}")
    edges = mask_edges(n, degree)
    return sorted({j for i, j in edges if i == position} | {i for i, j in edges if j == position})


def collusion_threshold(n: int, degree: int) -> int:
    """How many colluding parties (besides the coordinator) the masks of ``n`` responders
    withstand: k - 1 for the k-connected graph (n - 2 for the complete graph: n - 1
    colluders learn the last party's evaluation from D anyway)."""
    return _effective(n, degree) - 1
