"""k-means++ seeding on D checked against independent implementations (issue 14).

The parity tests elsewhere feed the library's own seeds to scikit-learn, so the seeding
rule itself was never checked: a candidate picked one position off (``searchsorted``'s
side) went unnoticed. Here the same random numbers drive (a) the library, (b) the textbook
D^2 sampling written below with Python integers, and (c) scikit-learn's own
``_kmeans_plusplus`` on the plaintext points. With integer coordinates every quantity is
exact, and draws are chosen to land exactly on cumulative-sum boundaries, where the
side of the search decides which row is picked.
"""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.cluster._kmeans import _kmeans_plusplus

from omnifc._clustering import kmeans_plusplus_indices


class Script:
    """A fixed stream: the first seed, then one array of uniforms per later seed.

    It plays a numpy ``Generator`` for the library (``integers``, ``random``) and a
    ``RandomState`` for scikit-learn (``choice``, ``uniform``), handing out the same numbers.
    """

    def __init__(self, first: int, uniforms):
        self.first = int(first)
        self.uniforms = [np.asarray(u, dtype=np.float64) for u in uniforms]
        self.calls = 0

    def _next(self, size):
        u = self.uniforms[self.calls]
        self.calls += 1
        assert u.shape == (size,), (u.shape, size)
        return u.copy()

    # numpy Generator, as the library uses it
    def integers(self, n):
        assert 0 <= self.first < n
        return self.first

    def random(self, size):
        return self._next(size)

    # numpy RandomState, as scikit-learn's _kmeans_plusplus uses it
    def choice(self, n, p=None):
        assert 0 <= self.first < n
        return self.first

    def uniform(self, size=None):
        return self._next(size)


def trials(n_clusters: int) -> int:
    return 2 + int(np.log(n_clusters))  # the rule both implementations document


def textbook_seeds(points, n_clusters: int, stream: Script) -> list[int]:
    """Greedy k-means++ (Arthur & Vassilvitskii; Celebi et al.) with exact integers.

    Row i owns the interval (C_{i-1}, C_i] of the cumulative weights C, i.e. a draw picks
    the first row whose cumulative weight reaches it (scikit-learn's convention).
    """
    rows = [[int(v) for v in row] for row in points]
    n = len(rows)

    def sq(a, b):
        return sum((x - y) ** 2 for x, y in zip(rows[a], rows[b]))

    centers = [stream.integers(n)]
    closest = [sq(centers[0], j) for j in range(n)]
    for _ in range(1, n_clusters):
        potential = sum(closest)
        draws = stream.random(trials(n_clusters)) * potential
        cumulative, running = [], 0
        for w in closest:
            running += w
            cumulative.append(running)
        candidates = []
        for draw in draws:
            pick = next((i for i, c in enumerate(cumulative) if c >= draw), n - 1)
            candidates.append(pick)
        best, best_potential, best_closest = None, None, None
        for c in candidates:  # first minimum wins ties
            trial = [min(closest[j], sq(c, j)) for j in range(n)]
            if best_potential is None or sum(trial) < best_potential:
                best, best_potential, best_closest = c, sum(trial), trial
        centers.append(best)
        closest = best_closest
    return centers


def sq_distances(points):
    x = np.asarray(points, dtype=np.int64)
    diff = x[:, None, :] - x[None, :, :]
    return (diff * diff).sum(axis=2).astype(np.float64)


def sklearn_seeds(points, n_clusters: int, stream: Script) -> list[int]:
    x = np.asarray(points, dtype=np.float64)
    _, indices = _kmeans_plusplus(x, n_clusters, (x * x).sum(axis=1), np.ones(len(x)),
                                  stream, n_local_trials=trials(n_clusters))
    return [int(i) for i in indices]


def all_three(points, n_clusters, first, uniforms):
    return (kmeans_plusplus_indices(sq_distances(points), n_clusters,
                                    Script(first, uniforms)).tolist(),
            textbook_seeds(points, n_clusters, Script(first, uniforms)),
            sklearn_seeds(points, n_clusters, Script(first, uniforms)))


def test_draws_on_a_cumulative_boundary_pick_the_row_that_reaches_it():
    # 1-D points; seed 0 at x = 0: weights [0, 0, 1, 1, 1, 1, 4], potential 8, cumulative
    # [0, 0, 1, 2, 3, 4, 8]. Draws 0.25 * 8 = 2 and 0.5 * 8 = 4 sit exactly on boundaries:
    # they pick rows 3 and 5 (both at x = 1; the one of the other side would pick rows 4
    # and 6, and row 6 at x = 2 changes the tie-break to row 4).
    points = [[0], [0], [1], [1], [1], [1], [2]]
    library, textbook, sklearn = all_three(points, 2, 0, [[0.25, 0.5]])
    assert textbook == [0, 3]
    assert library == textbook == sklearn


def test_boundary_draws_over_many_small_integer_data_sets():
    # Every draw of the second seed lands exactly on a cumulative boundary.
    rng = np.random.default_rng(7)
    checked = 0
    for case in range(60):
        n, dim, k = int(rng.integers(5, 12)), int(rng.integers(1, 4)), int(rng.integers(2, 5))
        points = rng.integers(-3, 4, size=(n, dim))
        first = int(rng.integers(n))
        closest = sq_distances(points)[first]
        potential = float(closest.sum())
        # u = C_i / potential such that u * potential == C_i exactly in float64
        exact = [c / potential for c in np.cumsum(closest)[:-1]
                 if 0 < c and (c / potential) * potential == c]
        if not exact:
            continue
        uniforms = [rng.choice(exact, trials(k))]
        uniforms += [rng.random(trials(k)) for _ in range(k - 2)]
        library, textbook, sklearn = all_three(points, k, first, uniforms)
        assert library == textbook == sklearn, (case, points.tolist(), first, uniforms)
        checked += 1
    assert checked >= 40  # the filter above keeps enough cases to mean something


@pytest.mark.parametrize("seed", range(20))
def test_random_draws_match_the_textbook_and_scikit_learn(seed):
    rng = np.random.default_rng(seed)
    n, dim, k = int(rng.integers(6, 40)), int(rng.integers(1, 5)), int(rng.integers(2, 7))
    points = rng.integers(-20, 21, size=(n, dim))
    uniforms = [rng.random(trials(k)) for _ in range(k - 1)]
    first = int(rng.integers(n))
    library, textbook, sklearn = all_three(points, k, first, uniforms)
    assert library == textbook == sklearn


def test_a_real_generator_drives_the_library_like_the_textbook():
    # The library's own Generator calls (integers, then random per seed) in this order.
    points = np.random.default_rng(3).integers(-9, 10, size=(30, 3))
    for seed in range(5):
        library = kmeans_plusplus_indices(sq_distances(points), 4,
                                          np.random.default_rng(seed)).tolist()
        reference_rng = np.random.default_rng(seed)
        first = int(reference_rng.integers(30))
        uniforms = [reference_rng.random(trials(4)) for _ in range(3)]
        assert library == textbook_seeds(points, 4, Script(first, uniforms))
        assert len(set(library)) == 4
