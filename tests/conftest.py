"""Shared fixtures: the named list of primes every field test runs over, seeded sources,
the exact oracle (tests/oracles.py) and the network tests' default timeout."""

from __future__ import annotations

import numpy as np
import pytest

from benchmark_scripts import load_benchmark
from oracles import Oracle

#: A small prime, mid-size primes, and the int64 boundary prime 2^31 - 1.
PRIMES = [13, 251, 65521, 2147483629, 2147483647]


@pytest.fixture(params=PRIMES, ids=lambda p: f"p{p}")
def prime(request) -> int:
    return request.param


@pytest.fixture
def seeded_source():
    """A reproducible byte source for low-level calls (never the default in public paths)."""
    return np.random.Generator(np.random.PCG64(20261130))


@pytest.fixture(scope="session")
def k_selection_bench():
    """``benchmarks/bench_k_selection.py`` loaded as a module (its grid's generators and
    descriptors, which the K-rule tests check against the adapters)."""
    return load_benchmark("bench_k_selection")


@pytest.fixture(scope="session")
def clove_reference():
    """``benchmarks/clove_label_reference.py`` loaded as a module (the CLoVE study's cases
    and its label-shift references)."""
    return load_benchmark("clove_label_reference")


@pytest.fixture(scope="session")
def oracle():
    """Exact reference computations (see :class:`Oracle`)."""
    return Oracle


#: Default ceiling (seconds) of a test marked ``network`` that sets no timeout of its own.
#: The slowest loopback session of the suite takes well under a minute alone on 2 cores;
#: this leaves room for a loaded machine while a hung session still fails fast.
NETWORK_TIMEOUT = 150


def pytest_collection_modifyitems(config, items):
    """Give every network test a tighter timeout than the global one (setup.cfg)."""
    for item in items:
        if item.get_closest_marker("network") and not item.get_closest_marker("timeout"):
            item.add_marker(pytest.mark.timeout(NETWORK_TIMEOUT))


#: Set on the config when this session deselected a test (``-m``, ``-k``, ``--deselect``,
#: ``--lf``: each reports it through ``pytest_deselected``): its items are then not all
#: that its paths hold (tests/test_fast_subset.py reads the session's own items otherwise).
DESELECTED = pytest.StashKey[bool]()


def pytest_deselected(items):
    if items:
        items[0].config.stash[DESELECTED] = True


@pytest.fixture(scope="session")
def deselected(request) -> bool:
    """Whether this session deselected a test (see :data:`DESELECTED`)."""
    return request.config.stash.get(DESELECTED, False)


class _KeptPartyServer:
    """A party fork server that a LocalSession forks its parties from but does not close
    (:func:`shared_party_server` does, at the end of the test process)."""

    def __init__(self, server) -> None:
        self._server = server

    def __getattr__(self, name):
        return getattr(self._server, name)

    def close(self, timeout: float = 10.0) -> None:
        pass  # the session's own close() still waits for / kills each of its parties


@pytest.fixture(scope="session")
def _party_servers():
    """The party fork servers started by :func:`shared_party_server` in this process."""
    started = []
    yield started
    for server in started:
        server.close()


@pytest.fixture
def shared_party_server(_party_servers, monkeypatch):
    """Loopback gRPC sessions (``protocols.LocalSession``: run_local_grpc_session,
    run_faulted_session, ``transport="grpc"``) fork their parties from one party server
    per test process (protocols/_party_processes.py: it preloads the party's modules and
    kernels, about 1 s of CPU per start) instead of each starting and closing its own.
    A child gets the caller's environment, folder and import path at the fork either way;
    starting and closing a server is tested by test_party_processes.py and by the
    sessions of the modules that do not use this fixture."""
    import protocols._grpc_local as grpc_local
    from protocols._party_processes import new_party_server

    if not _party_servers or _party_servers[-1]._process.poll() is not None:
        server = new_party_server()
        if server is None:  # no fork here (Windows): each session as before
            return
        _party_servers.append(server)
    kept = _KeptPartyServer(_party_servers[-1])
    monkeypatch.setattr(grpc_local, "new_party_server", lambda: kept)


@pytest.fixture(autouse=True)
def _fresh_log_once():
    """Each test starts in a process that has said nothing once yet (protocols._log_once
    is per process; the whole suite shares one)."""
    from protocols._log_once import restore
    restore(())
    yield


@pytest.fixture(autouse=True)
def _package_loggers_as_found():
    """A command run in-process (``omnifc.cli.main``) puts its stderr handler and level on
    the package loggers, as it should in its own process; here the next test must find them
    as they were, or caplog misses what a quiet level drops."""
    import logging

    roots = [logging.getLogger(name) for name in ("omnifc", "protocols", "finite_field")]
    saved = [(logger, logger.level, list(logger.handlers), logger.propagate) for logger in roots]
    yield
    for logger, level, handlers, propagate in saved:
        logger.setLevel(level)
        logger.handlers[:] = handlers
        logger.propagate = propagate
