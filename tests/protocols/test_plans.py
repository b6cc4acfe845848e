"""The session plans: what a distance session and a secure sum do differently, in one place.

Oracles: the decoding weights c_j = sum_o L_j(alpha_o) from exact-fraction Lagrange bases
(protocol_helpers.lagrange_weights), exact Python-integer sums, and the schedule's
definition (every element in exactly one tile). The state machines ask the plan and never
the session kind: checked on their source.
"""

from __future__ import annotations

import inspect
import re

import numpy as np
import pytest

from finite_field import InputError, IntegrityError, ParameterError
from protocols import _coordinator, _party
from protocols._accumulator import DistanceAccumulator
from protocols._messages import SessionParameters, SumPlan
from protocols._plans import (DistanceSession, SumAccumulator, SumSession, session_plan,
                              session_type)

from protocol_helpers import lagrange_weights

DISTANCE = SessionParameters(dim=3, bound=1.0, scale_bits=8, segments=2, noise_segments=1,
                             chunk_bytes=4096)
SUM = SessionParameters(dim=3, bound=1.0, scale_bits=8, kind="sum", rows=2, chunk_bytes=4096)


def test_the_kind_of_the_parameters_chooses_the_plan():
    distance = session_plan(DISTANCE.plan(5), DISTANCE)
    total = session_plan(SUM.plan(3), SUM)
    assert type(distance) is DistanceSession and type(total) is SumSession
    assert session_type(DISTANCE) is DistanceSession and session_type(SUM) is SumSession
    assert isinstance(total.plan, SumPlan)
    assert (distance.exchanges_shares, distance.has_checks) == (True, True)
    assert (total.exchanges_shares, total.has_checks) == (False, False)
    assert (DistanceSession.expected_rows(DISTANCE), SumSession.expected_rows(SUM)) == (None, 2)


@pytest.mark.parametrize("n", [1, 7, 1500])
def test_distance_tiles_cover_the_upper_triangle_once_within_the_chunk(n):
    session = session_plan(DISTANCE.plan(5), DISTANCE)
    tiles = session.tiles(n)
    assert tiles[0][0] == 0 and tiles[-1][1] == n
    assert all(b0 == a1 for (_, b0), (a1, _) in zip(tiles, tiles[1:]))
    for a, b in tiles:
        shape = session.tile_shape(a, b, n)
        assert shape == (b - a, n - a)
        assert b - a == 1 or shape[0] * shape[1] <= 4096 // 4


@pytest.mark.parametrize("rows,dim", [(1, 1), (2, 3), (700, 5)])
def test_sum_tiles_cover_the_flat_vector_once_within_the_chunk(rows, dim):
    params = SessionParameters(dim=dim, bound=1.0, scale_bits=8, kind="sum", rows=rows,
                               chunk_bytes=4096)
    session = session_plan(params.plan(3), params)
    tiles = session.tiles(123456)  # the row total plays no part in a sum
    covered = [i for a, b in tiles for i in range(a, b)]
    assert covered == list(range(rows * dim))
    assert all(session.tile_shape(a, b, 0) == (b - a,) and b - a <= 1024 for a, b in tiles)


def test_distance_weights_are_the_lagrange_decoding_weights_of_b():
    plan = DISTANCE.plan(6)
    session = session_plan(plan, DISTANCE)
    names = [f"p{i}" for i in range(6)]
    responders = ["p0", "p2", "p3", "p4", "p5"]
    weights = session.weights(names, responders)
    assert list(weights) == responders
    for k, code in enumerate(plan.codes):
        p = code.prime
        points = [code.betas[names.index(r)] for r in responders]
        c = [sum(w) % p for w in zip(*[lagrange_weights(points, a, p)
                                        for a in code.alphas[:code.segments]])]
        assert [weights[r][k] for r in responders] == c


def test_sum_weights_are_one_for_every_responder_and_prime():
    session = session_plan(SUM.plan(3), SUM)
    assert session.weights(["a", "b", "c"], ["a", "b", "c"]) == {
        name: [1] * len(session.plan.primes) for name in "abc"}


def test_the_sum_accumulator_decodes_the_exact_signed_sum():
    plan = SUM.plan(3)
    session = session_plan(plan, SUM)
    rng = np.random.default_rng(5)
    m = plan.quantizer.max_magnitude
    contributions = [rng.integers(-m, m + 1, size=6) for _ in range(3)]
    contributions[0][:2] = (m, -m)
    contributions[1][:2] = (m, -m)
    contributions[2][:2] = (m, -m)  # the sum at exactly +-3 M
    acc = session.accumulator(0, parameters={}, storage={})
    assert isinstance(acc, SumAccumulator)
    for values in contributions:
        for k, p in enumerate(plan.primes):
            for a, b in session.tiles(0):
                acc.add_tile(k, a, b, (values[a:b] % p).astype(np.uint32))
    integer, floats, store = session.decode(acc, ["a", "b", "c"])
    expected = [sum(int(c[i]) for c in contributions) for i in range(6)]
    assert store is None and integer.shape == (2, 3)
    assert integer.reshape(-1).tolist() == expected and expected[:2] == [3 * m, -3 * m]
    assert floats.tolist() == (integer / 2**8).tolist()


def test_a_sum_beyond_m_times_the_bound_is_an_integrity_error_of_the_decode():
    plan = SUM.plan(3)
    session = session_plan(plan, SUM)
    acc = session.accumulator(0, parameters={}, storage={})
    p = plan.primes[0]
    acc.add_tile(0, 0, 6, np.full(6, plan.offset + 1, dtype=np.uint32) % p)
    with pytest.raises(IntegrityError) as info:
        session.decode(acc, ["a", "b", "c"])
    assert (info.value.party, info.value.phase) == (None, "decode")
    assert f"every decoded sum must lie in [-{plan.offset}, {plan.offset}]" in str(info.value)


def test_a_sum_upload_of_p_or_more_is_refused():
    plan = SUM.plan(3)
    acc = SumAccumulator(plan)
    with pytest.raises(ParameterError, match=f"upload holds a value >= p = {plan.primes[0]}"):
        acc.add_tile(0, 0, 2, np.array([1, plan.primes[0]], dtype=np.uint32))


def test_the_distance_accumulator_decodes_and_names_b_when_corrupted():
    plan = DISTANCE.plan(5)
    session = session_plan(plan, DISTANCE)
    acc = session.accumulator(3, parameters={}, storage={"out": None, "memory_budget": None,
                                                        "tile_bytes": None})
    assert isinstance(acc, DistanceAccumulator)
    assert session.result_memory(acc, {"peak_open_sum_bytes": 7}) == {
        "memory_budget": acc.memory_budget, "result_ram_bytes": acc.ram_bytes,
        "open_sum_budget": 0, "peak_open_sum_bytes": 7, "peak_open_sum_disk_bytes": 0}
    upper = np.array([[0, 5, 9], [0, 0, 4], [0, 0, 0]])
    for k, p in enumerate(plan.primes):
        acc.add_tile(k, 0, 3, upper % p)
    integer, floats, store = session.decode(acc, ["p0", "p1"])
    assert (integer, floats) == (None, None)
    assert store.integer.tolist() == [[0, 5, 9], [5, 0, 4], [9, 4, 0]]
    bad = session.accumulator(2, parameters={}, storage={})
    for k, p in enumerate(plan.primes):
        bad.add_tile(k, 0, 2, np.array([[0, plan.distance_bound + 1], [0, 0]]) % p)
    with pytest.raises(IntegrityError) as info:
        session.decode(bad, ["p0", "p1"])
    assert (info.value.party, info.value.phase) == (None, "decode")
    assert f"[0, {plan.distance_bound}]" in str(info.value) and "['p0', 'p1']" in str(info.value)


def test_each_plan_checks_the_shape_of_a_partys_data():
    rows = np.zeros((4, 3))
    assert DistanceSession.check_data(rows, DISTANCE, "a") is rows
    for bad, phrase in [(np.zeros(3), "2-D array"), (np.zeros((0, 3)), "no rows"),
                        (np.zeros((2, 4)), "has d=4, the session expects 3")]:
        with pytest.raises(InputError, match=re.escape(phrase)) as info:
            DistanceSession.check_data(bad, DISTANCE, "a")
        assert info.value.party == "a"
    assert SumSession.check_data(np.zeros(6).reshape(2, 3), SUM, "a").shape == (2, 3)
    one_row = SessionParameters(dim=3, bound=1.0, kind="sum")
    assert SumSession.check_data(np.zeros(3), one_row, "a").shape == (1, 3)
    with pytest.raises(InputError, match=re.escape("must have shape (2, 3), got (3, 2)")):
        SumSession.check_data(np.zeros((3, 2)), SUM, "b")


@pytest.mark.parametrize("module", [_coordinator, _party], ids=["coordinator", "party"])
def test_the_state_machines_do_not_branch_on_the_session_kind(module):
    source = inspect.getsource(module)
    assert "SumPlan" not in source
    assert not re.search(r"\.kind\s*[!=]=", source)
    assert not re.search(r"isinstance\([^)]*plan", source)


# -- a party's blocks, one computed ahead (protocols._plans._BlockValues) -----------------

class _Party:
    """A party whose g(beta_j) is a known function of the row and column (10^6 row + col),
    recording which thread computed each block; ``gate`` holds block ``slow`` back."""

    def __init__(self, n, fail=None, slow=None):
        import threading
        self.n_total, self.fail, self.slow = n, fail, slow
        self.calls, self.gate, self.done = [], threading.Event(), []

    def _evaluate(self, k, a, b):
        import threading
        self.calls.append((a, b, threading.current_thread().name))
        if a == self.slow:
            self.gate.wait(30)
        if a == self.fail:
            raise ParameterError(f"block {a} cannot be computed")
        self.done.append(a)
        return np.add.outer(np.arange(a, b) * 10**6, np.arange(a, self.n_total))


def _schedule(n=300):
    from protocols._messages import row_tiles
    return row_tiles(n, 4 * 2000)  # about 2,000 elements a tile: 26 tiles of 2 to 160 rows


@pytest.mark.timeout(60)
def test_every_tile_is_exact_and_each_later_block_is_computed_ahead_in_the_background():
    from protocols._plans import _BlockValues, _block_stop
    tiles = _schedule()
    party = _Party(300)
    values = _BlockValues(party, 0, tiles)
    for index, (a, b) in enumerate(tiles):
        expected = np.add.outer(np.arange(a, b) * 10**6, np.arange(a, 300))
        assert np.array_equal(values(index), expected), index
    values.close()
    blocks, start = [], 0  # the schedule's blocks, from its definition
    while start < 300:
        first = [a for a, _ in tiles].index(start)
        blocks.append((start, _block_stop(tiles, first, 300)))
        start = blocks[-1][1]
    assert [(a, b) for a, b, _ in party.calls] == blocks  # each block once, in order
    assert len(blocks) > 3
    threads = [name for _, _, name in party.calls]
    # nothing is computed ahead before a second tile is asked for: the first block in the
    # caller, and the second too when that second tile starts it; the rest ahead
    here = 2 if tiles[1][0] == blocks[1][0] else 1
    assert threads[:here] == ["MainThread"] * here
    assert all(name.startswith("omnifc-next-block") for name in threads[here:]), threads


@pytest.mark.timeout(60)
def test_a_single_tile_computes_nothing_ahead():
    # a resume re-sends tiles one at a time: nothing it will not use is started
    from protocols._plans import _BlockValues
    tiles = _schedule()
    party = _Party(300)
    values = _BlockValues(party, 0, tiles)
    a, b = tiles[5]
    assert np.array_equal(values(5), np.add.outer(np.arange(a, b) * 10**6, np.arange(a, 300)))
    values.close()
    assert len(party.calls) == 1


@pytest.mark.timeout(60)
def test_an_error_of_a_block_computed_ahead_is_raised_at_its_first_tile():
    from protocols._plans import _BlockValues
    tiles = _schedule()
    starts = [a for a, _ in tiles]
    party = _Party(300)
    values = _BlockValues(party, 0, tiles)
    values(0), values(1)
    failing = party.calls[-1][1]  # the block computed ahead once tile 1 was taken
    party.fail = failing
    # recompute that block with the failure in place: a fresh source, same tiles
    party = _Party(300, fail=failing)
    values = _BlockValues(party, 0, tiles)
    taken = 0
    for index, (a, b) in enumerate(tiles):
        if a == failing:
            with pytest.raises(ParameterError, match=f"block {failing} cannot"):
                values(index)
            break
        values(index)
        taken += 1
    values.close()
    assert taken == starts.index(failing) > 1  # every tile before it was delivered


@pytest.mark.timeout(60)
def test_close_waits_for_a_block_still_being_computed():
    # a round abandoned mid-way: no _evaluate of this party may still run afterwards
    import threading
    from protocols._plans import _BlockValues
    tiles = _schedule()
    probe = _BlockValues(_Party(300), 0, tiles)
    probe(0), probe(1)
    ahead = probe._next[0]
    probe.close()
    party = _Party(300, slow=ahead)
    values = _BlockValues(party, 0, tiles)
    values(0), values(1)  # the block at `ahead` is now being computed, held at the gate
    closed = threading.Event()
    closer = threading.Thread(target=lambda: (values.close(), closed.set()))
    closer.start()
    assert not closed.wait(0.5) and ahead not in party.done
    party.gate.set()
    assert closed.wait(30)
    closer.join(30)
    assert ahead in party.done
