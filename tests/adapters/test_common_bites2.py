"""omnifc.adapters._common: the survivors of the 2026-11-30 re-run (mutation testing, issue 14).

``ward_from_distances`` accepts what ``check_distance_matrix`` accepts (asymmetry and a
diagonal up to 1e-9 of the scale, e.g. a protocol's D after float arithmetic) and clusters
like scikit-learn's ward on the vectors; ``plaintext_distances`` is exact on integer rows
up to 2^40 (checked against Python integers where float64 sums would round).
"""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.cluster import AgglomerativeClustering

from omnifc.adapters import plaintext_distances, ward_from_distances

pytestmark = pytest.mark.timeout(120)


def _partition(labels):
    groups = {}
    for i, c in enumerate(np.asarray(labels).tolist()):
        groups.setdefault(c, set()).add(i)
    return {frozenset(g) for g in groups.values()}


def test_ward_accepts_the_tolerances_of_check_distance_matrix():
    x = np.array([[0.0, 0.0], [0.3, 0.1], [4.0, 4.2], [4.4, 3.9], [9.0, 0.5], [8.7, 0.1]])
    d = ((x[:, None] - x[None]) ** 2).sum(-1)
    noisy = d.copy()
    noisy[0, 1] += 1e-12                                  # |D - D^T| <= 1e-9 * scale
    noisy[2, 2] = 1e-12                                   # diagonal <= 1e-9 * scale
    for k in (2, 3, 4):
        want = AgglomerativeClustering(n_clusters=k, linkage="ward").fit_predict(x)
        got = ward_from_distances(noisy, k)
        assert _partition(got) == _partition(want)
        assert got.shape == (6,) and got.dtype == np.int64
        assert _partition(ward_from_distances(d, k)) == _partition(want)


def test_plaintext_distances_exact_on_integer_rows_below_2_to_40():
    # float64 sums of these squares round (checked: einsum gives another float); the
    # integer path gives the correctly rounded exact value
    a = [883257358527, 950800789499, 848616813520]
    x = np.array([a, [0, 0, 0], [1, -2, 3]], dtype=np.float64)
    exact = [[sum((p - q) ** 2 for p, q in zip(u, v)) for v in x.astype(np.int64).tolist()]
             for u in x.astype(np.int64).tolist()]
    got = plaintext_distances(x)
    assert got.tolist() == [[float(v) for v in row] for row in exact]
    diff = x[:, None, :] - x[None, :, :]
    assert np.einsum("ijk,ijk->ij", diff, diff)[0, 1] != float(exact[0][1])   # the witness
