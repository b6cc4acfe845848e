"""The coordinator's memory stays within ``memory_budget`` whatever the parties' timing.

With integrity checks (s = |B| - K >= 1) the coordinator keeps the running sums w.U of
every tile that some responder has not uploaded yet ("open" tile sums, (s+1) x the tile
each). One party decides how many tiles stay open by delaying its stream. The attack:
every tile of one responder is held back until all others have uploaded everything, so
every tile of the round is open at once. The real Party and Coordinator state machines
are driven by hand; the coordinator's allocations are measured with ``tracemalloc``
(numpy reports its buffers to it; memory-mapped pages are not allocations) while it
receives the tiles, and compared with the budget.
"""

from __future__ import annotations

import tempfile
import tracemalloc
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from protocols import Coordinator, Party, SessionParameters, public_key_bytes
from protocol_helpers import plaintext_sq_distances, random_data

pytestmark = pytest.mark.timeout(300)

BOUND, SCALE = 1.0, 8
BUDGET = 64 * 1024          # bytes: well below the result (n = 400: 640 KB int32)
CHUNK = 4096                # 1,024 elements per tile: about 80 tiles per prime
_NUMPY_DOMAIN = 389047      # numpy reports its data buffers to tracemalloc in this domain


def _params(**changes):
    return replace(SessionParameters(dim=3, bound=BOUND, scale_bits=SCALE), chunk_bytes=CHUNK,
                   **changes)


def _working_constant(checks: int, chunk: int = CHUNK) -> int:
    """The stated constant (docs/scale.md, "Coordinator memory"): the working memory of
    the one tile being added or checked, 4 (s+2) chunk_bytes + 256 KiB."""
    return 4 * (checks + 2) * chunk + 256 * 1024


class _Driver:
    """Coordinator and parties wired by hand; every tile is stashed, then delivered in
    the order a test chooses (a party that delays its stream)."""

    def __init__(self, data, parameters, **storage):
        self.names = list(data)
        keys = {n: Ed25519PrivateKey.generate() for n in self.names}
        pinned = {n: public_key_bytes(k) for n, k in keys.items()}
        self.parties = {n: Party(n, data[n], session_id="memory", parameters=parameters,
                                 identity_key=keys[n], pinned=pinned) for n in self.names}
        self.coordinator = Coordinator("memory", parameters, self.names, pinned, **storage)
        self.stash = {n: [] for n in self.names}  # tiles not yet delivered, in send order

    def run_to_tiles(self):
        """Run every message but the tiles (stashed); return when nothing else is left."""
        queue = [("coordinator", n, p.start()[0]) for n, p in self.parties.items()]
        while queue:
            dest, sender, env = queue.pop(0)
            if dest == "coordinator":
                if env.HasField("tile"):
                    self.stash[sender].append(env)
                    continue
                queue += [(d, "coordinator", e) for d, e in self.coordinator.receive(sender, env)]
            else:
                queue += [("coordinator", dest, e) for e in self.parties[dest].receive(env)]

    def deliver(self, order):
        """Deliver the stashed tiles of ``order`` (party names, one after the other).

        Returns (held, working): the most numpy memory the coordinator allocated since
        the first tile and still held after a receive (the open tile sums in RAM:
        ``tracemalloc``'s numpy domain), and the most any one receive allocated on top
        of what it found (the working memory of one tile, numpy or not).
        """
        held = working = 0
        tracemalloc.start()
        try:
            out = []
            for name in order:
                for env in self.stash[name]:
                    before = tracemalloc.get_traced_memory()[0]
                    tracemalloc.reset_peak()
                    out += self.coordinator.receive(name, env)
                    used = tracemalloc.get_traced_memory()[1] - before
                    working = max(working, used)
                    held = max(held, _numpy_bytes())
        finally:
            tracemalloc.stop()
        for dest, env in out:
            list(self.parties[dest].receive(env))
        return held, working


def _numpy_bytes() -> int:
    """Bytes of the numpy buffers allocated since tracing started and still alive."""
    snapshot = tracemalloc.take_snapshot()
    return sum(trace.size for trace in snapshot.traces if trace.domain == _NUMPY_DOMAIN)


def _data():
    return random_data([80] * 5, 3, seed=7)   # m = 5, K = 3: s = 2 parity checks


def _expected(data):
    return plaintext_sq_distances(np.concatenate(list(data.values())), BOUND, SCALE)


def _delayed_run(data, parameters=None, held="party-2", **storage):
    driver = _Driver(data, parameters or _params(), memory_budget=BUDGET, **storage)
    driver.run_to_tiles()
    others = [n for n in driver.names if n != held]
    measured = driver.deliver(others + [held])   # held's tiles come after everybody's
    return driver, measured


def test_a_party_that_delays_its_stream_cannot_push_the_coordinator_past_its_budget():
    data = _data()
    driver, (held, working) = _delayed_run(data)
    coordinator = driver.coordinator
    checks = coordinator.checks.checks
    assert checks == 2
    n = coordinator.n_total
    entries = sum((b - a) * (n - a) for a, b in coordinator.tiles)
    # the schedule really opened every tile: all open sums together are far over budget
    assert (checks + 1) * entries * 4 > 10 * BUDGET
    assert held <= BUDGET, f"the coordinator held {held} bytes of open sums, budget {BUDGET}"
    assert working <= _working_constant(checks)
    assert np.array_equal(coordinator.outcome.integer, _expected(data))
