"""The landmarks and pairs layouts over real gRPC: one process per party on 127.0.0.1,
mutual TLS; every party process reads the layout from the session config it is given."""

from __future__ import annotations

import numpy as np
import pytest

from protocols import SessionParameters
from protocols._grpc_local import run_local_grpc_session
from protocol_helpers import plaintext_sq_distances, random_data

pytestmark = [pytest.mark.network, pytest.mark.timeout(300),
              pytest.mark.usefixtures("shared_party_server")]


def rows(data):
    return np.concatenate(list(data.values()))


@pytest.mark.parametrize("layout", ["landmarks", "pairs"])
def test_a_layout_over_grpc_is_exact(layout):
    data = random_data([4, 3, 5, 3], 5, seed=31)  # m = 4: one check; two primes at q = 24
    exact = plaintext_sq_distances(rows(data), 1.0, 24)
    if layout == "landmarks":
        chosen = (14, 2, 7)
        expected = exact[:, list(chosen)]
    else:
        chosen = ((0, 14), (3, 9), (12, 5), (1, 2))
        i, j = np.array(chosen).T
        expected = exact[i, j]
    params = SessionParameters(dim=5, bound=1.0, scale_bits=24, layout=layout,
                               layout_rows=chosen)
    outcome = run_local_grpc_session(data, params, deadline=30)
    assert len(outcome.parameters["primes"]) == 2
    assert outcome.integrity.startswith("checked")
    assert outcome.layout == layout
    assert np.array_equal(outcome.integer, expected)
