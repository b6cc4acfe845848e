"""What the scale work passes along: a party's evaluation figures (``Party.timings``), the
loopback session carrying every public parameter of the config (mask degree, row caps) to
its party processes, and ``mask_degree`` / ``memory_budget`` through the public API."""

from __future__ import annotations

import numpy as np
import pytest

from protocols import SessionParameters, run_memory_session
from protocols._messages import row_tiles
from protocol_helpers import plaintext_sq_distances, random_data


def _strip_bytes(n, chunk_bytes, primes):
    """uint32 bytes of the schedule's row strips [a, b) x [a, n), once per prime."""
    return 4 * primes * sum((b - a) * (n - a) for a, b in row_tiles(n, chunk_bytes))


def test_timings_count_every_uploaded_byte_and_the_kernel_inside_the_evaluation(monkeypatch):
    # With the next-block thread (protocols._plans.PREFETCH) a block's kernel may run while
    # the transport holds the tile generator, which evaluation_seconds leaves out by design,
    # so "kernel <= evaluation" holds for the sequential path only (it failed once under
    # the whole suite by 0.05 ms with the thread on).
    from protocols import _plans
    monkeypatch.setattr(_plans, "PREFETCH", False)
    data = random_data([60, 50, 70], 3, seed=2)
    params = SessionParameters(dim=3, bound=1.0, scale_bits=24, chunk_bytes=4096)
    outcome, transcript = run_memory_session(data, params, record=True)
    primes = len(outcome.parameters["primes"])
    assert primes == 2  # 24 bits: two primes, so both loops are counted
    for name, party in transcript.parties.items():
        sent = sum(len(m.envelope().tile.values) for m in transcript.of_kind("tile")
                   if m.sender == name)
        assert party.timings["bytes_uploaded"] == sent == _strip_bytes(180, 4096, primes)
        assert 0 < party.timings["kernel_seconds"] <= party.timings["evaluation_seconds"]
        assert 0 < party.timings["kernel_cpu_seconds"] <= \
            party.timings["evaluation_cpu_seconds"]


@pytest.mark.network
@pytest.mark.timeout(150)
def test_local_grpc_session_carries_mask_degree_and_row_caps_to_the_parties():
    from protocols._grpc_local import LocalSession

    data = random_data([40, 30, 35, 25], 4, seed=5)
    params = SessionParameters(dim=4, bound=1.0, scale_bits=12, mask_degree=2,
                               max_rows_per_party=40, max_rows_total=130, integrity="off")
    with LocalSession(data, params, deadline=60.0) as local:
        assert local.config.parameters.mask_degree == 2
        assert (local.config.parameters.max_rows_per_party,
                local.config.parameters.max_rows_total) == (40, 130)
        server = local.server().start()
        try:
            for name in local.names:
                local.start_party(name, server.port)
            outcome = server.run(poll=lambda: local.watch(server))
        finally:
            server.stop()
        for process in local.processes.values():
            assert process.wait(timeout=60) == 0
        stats = {name: local.party_stats(name) for name in local.names}
    rows = np.vstack([data[name] for name in data])
    assert np.array_equal(outcome.integer, plaintext_sq_distances(rows, 1.0, 12))
    primes = len(outcome.parameters["primes"])
    for name in data:
        assert stats[name]["bytes_uploaded"] == _strip_bytes(130, params.chunk_bytes, primes)
        assert 0 < stats[name]["kernel_seconds"] <= stats[name]["evaluation_seconds"]


def test_secure_distance_matrix_takes_the_mask_degree_and_reports_it():
    import omnifc

    data = random_data([12, 9, 11, 10, 8], 3, seed=9)
    rows = np.vstack(list(data.values()))
    for degree in (0, 2, 3):  # t = 1: 0 or at least 2
        result = omnifc.secure_distance_matrix(data, bound=1.0, scale_bits=10,
                                               mask_degree=degree)
        assert result.parameters["mask_degree"] == degree
        assert np.array_equal(result.integer_distances, plaintext_sq_distances(rows, 1.0, 10))
    with pytest.raises(omnifc.ParameterError, match="at most m - 1 = 4"):
        omnifc.secure_distance_matrix(data, bound=1.0, mask_degree=5)


@pytest.mark.slow
def test_federated_clustering_passes_mask_degree_and_memory_budget():
    import omnifc

    rng = np.random.default_rng(4)
    centers = np.array([[0.1, 0.1, 0.1], [0.9, 0.9, 0.1], [0.1, 0.9, 0.9]])
    parts = [centers[rng.integers(0, 3, 40)] + 0.03 * rng.standard_normal((40, 3))
             for _ in range(4)]
    dense = omnifc.FederatedClustering("kmeans", 3, bound=1.0, random_state=0).fit(parts)
    disk = omnifc.FederatedClustering("kmeans", 3, bound=1.0, random_state=0,
                                      mask_degree=2, memory_budget=0).fit(parts)
    assert disk.distance_result_.parameters["mask_degree"] == 2
    assert dense.distance_result_.parameters["mask_degree"] == 0
    assert disk.distance_result_.store.on_disk and dense.distance_result_.store is None
    assert np.array_equal(np.asarray(disk.distance_result_.integer_distances),
                          np.asarray(dense.distance_result_.integer_distances))
    truth = np.concatenate([np.argmin(((p[:, None] - centers) ** 2).sum(-1), 1) for p in parts])
    from sklearn.metrics import adjusted_rand_score
    assert adjusted_rand_score(truth, dense.labels_) == 1.0
    assert adjusted_rand_score(truth, disk.labels_) == 1.0
