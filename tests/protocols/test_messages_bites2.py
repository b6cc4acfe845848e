"""protocols/_messages.py, the version-2 parameters pinned down (issue 14, mutation testing).

Every expectation is written out here from the docstrings, the proto schema
(proto/omnifc/v1/omnifc.proto: an unset proto3 field reads as 0, "" or empty) and the
documented defaults (row caps 1,000,000 and 2,000,000, integrity "detect"), not computed
with the module's helpers.
"""

from __future__ import annotations

import re
from dataclasses import replace

import numpy as np
import pytest

from finite_field import ParameterError, PeerError
from protocols import SessionParameters
from protocols._generated import omnifc_pb2 as pb
from protocols._messages import check_row_caps, row_tiles

pytestmark = [pytest.mark.protobuf, pytest.mark.timeout(120)]


def exactly(message: str) -> str:
    return f"^{re.escape(message)}$"


# -- SessionParameters: validation ---------------------------------------------------------

@pytest.mark.parametrize("arguments, message", [
    (dict(mode="open"), "mode must be one of ('masked', 'transparent'), got 'open'"),
    (dict(mode=None), "mode must be one of ('masked', 'transparent'), got None"),
    (dict(integrity="repair"),
     "integrity must be one of ('detect', 'correct', 'off'), got 'repair'"),
    (dict(integrity=""), "integrity must be one of ('detect', 'correct', 'off'), got ''"),
    (dict(kind="sum", mode="transparent", integrity="off"),
     "a secure sum is always masked; transparent mode is for distance sessions only"),
])
def test_mode_integrity_and_kind_errors_are_exact(arguments, message):
    with pytest.raises(ParameterError, match=exactly(message)):
        SessionParameters(**{"dim": 3, "bound": 1.0, **arguments})


@pytest.mark.parametrize("mode", ["masked", "transparent"])
@pytest.mark.parametrize("integrity", ["detect", "correct", "off"])
def test_every_mode_and_integrity_is_accepted_for_distances(mode, integrity):
    params = SessionParameters(dim=3, bound=1.0, mode=mode, integrity=integrity)
    assert (params.mode, params.integrity, params.kind) == (mode, integrity, "distance")


def test_a_masked_sum_is_accepted_with_any_integrity():
    for integrity in ("detect", "correct", "off"):
        params = SessionParameters(kind="sum", dim=2, bound=1.0, integrity=integrity)
        assert (params.kind, params.mode, params.integrity) == ("sum", "masked", integrity)


@pytest.mark.parametrize("name", ["max_rows_per_party", "max_rows_total"])
def test_row_caps_are_integers_in_1_to_2_to_the_40(name):
    for good in (1, 7, (1 << 40) - 1, np.int64(5), np.uint32(9), np.int8(1)):
        params = SessionParameters(dim=3, bound=1.0, **{name: good})
        assert getattr(params, name) == int(good) and type(getattr(params, name)) is int
    for bad in (0, -1, 1 << 40, (1 << 40) + 1, np.int64(0), np.int64(1 << 40)):
        with pytest.raises(ParameterError,
                           match=exactly(f"{name} must be an integer in [1, 2^40), got "
                                         f"{bad!r}")):
            SessionParameters(dim=3, bound=1.0, **{name: bad})
    for bad in (True, False, np.True_, 5.0, "5", None, 2.5):
        with pytest.raises(ParameterError,
                           match=exactly(f"{name} must be an integer in [1, 2^40), got "
                                         f"{bad!r}")):
            SessionParameters(dim=3, bound=1.0, **{name: bad})


def test_the_per_party_cap_is_checked_before_the_total():
    # both wrong: the error names max_rows_per_party (the order of the loop)
    with pytest.raises(ParameterError, match="^max_rows_per_party must"):
        SessionParameters(dim=3, bound=1.0, max_rows_per_party=0, max_rows_total=0)
    with pytest.raises(ParameterError, match="^max_rows_total must"):
        SessionParameters(dim=3, bound=1.0, max_rows_per_party=4, max_rows_total=0)


def test_primes_and_mask_degree_are_normalised_to_python_ints():
    params = SessionParameters(dim=3, bound=1.0, mask_degree=np.int64(2))
    assert params.primes is None
    assert params.mask_degree == 2 and type(params.mask_degree) is int
    params = SessionParameters(dim=3, bound=1.0, primes=np.array([65521, 65519]))
    assert params.primes == (65521, 65519) and type(params.primes) is tuple
    assert all(type(p) is int for p in params.primes)
    for bad, message in [
            (True, "mask_degree must be an integer (0 = every pair), got True"),
            (1.0, "mask_degree must be an integer (0 = every pair), got 1.0"),
            (-1, "mask_degree must be 0 (every pair masks) or k >= 1, got -1")]:
        with pytest.raises(ParameterError, match=exactly(message)):
            SessionParameters(dim=3, bound=1.0, mask_degree=bad)


def test_a_sum_needs_a_vector_length_and_a_distance_does_not():
    with pytest.raises(ParameterError, match=exactly("a secure sum needs the vector length "
                                                     "(dim > 0)")):
        SessionParameters(kind="sum", dim=0, bound=1.0)
    assert SessionParameters(kind="distance", dim=0, bound=1.0, mode="transparent").dim == 0


# -- protobuf ------------------------------------------------------------------------------

def _distinct_params():
    """Parameters where every field differs from its default (and from the others)."""
    return SessionParameters(dim=4, bound=2.5, scale_bits=4, segments=1, noise_segments=2,
                             nonnegative=True, primes=(65521,), mode="transparent",
                             rows=3, chunk_bytes=8192, max_rows_per_party=77,
                             max_rows_total=99, integrity="correct", mask_degree=3,
                             adversaries=1, alphas=(1, 2, 3),
                             betas=(10, 11, 12, 13, 14, 15, 16))


def test_to_proto_writes_every_field():
    params = _distinct_params()
    msg = params.to_proto(params.plan(7))
    assert (msg.kind, msg.mode, msg.dim, msg.segments, msg.noise_segments, msg.scale_bits,
            msg.bound, msg.nonnegative, list(msg.primes), msg.rows, msg.chunk_bytes,
            msg.max_rows_per_party, msg.max_rows_total, msg.integrity, msg.mask_degree,
            msg.adversaries, list(msg.alphas), list(msg.betas)) == (
        "distance", "transparent", 4, 1, 2, 4, 2.5, True, [65521], 3, 8192, 77, 99,
        "correct", 3, 1, [1, 2, 3], [10, 11, 12, 13, 14, 15, 16])
    # A is always written, resolved: the default of "correct" with r = 2 is floor(r/2) = 1
    default = replace(params, adversaries=None).to_proto(params.plan(7))
    assert default.HasField("adversaries") and default.adversaries == 1


def test_to_proto_of_a_sum_has_the_plans_primes_and_no_points():
    params = SessionParameters(kind="sum", dim=2, rows=5, bound=1.0, scale_bits=1,
                               primes=(13,), max_rows_per_party=8, max_rows_total=9,
                               integrity="off", mask_degree=1)
    msg = params.to_proto(params.plan(3))
    assert (msg.kind, msg.mode, msg.dim, msg.rows, list(msg.primes), list(msg.alphas),
            list(msg.betas), msg.max_rows_per_party, msg.max_rows_total, msg.integrity,
            msg.mask_degree) == ("sum", "masked", 2, 5, [13], [], [], 8, 9, "off", 1)


def test_from_proto_reads_every_field():
    msg = pb.Parameters(kind="distance", mode="transparent", dim=4, segments=1,
                        noise_segments=2, scale_bits=4, bound=2.5, nonnegative=True,
                        primes=[65521], alphas=[1, 2, 3],
                        betas=[10, 11, 12, 13, 14, 15, 16], rows=3, chunk_bytes=8192,
                        max_rows_per_party=77, max_rows_total=99, integrity="correct",
                        mask_degree=3, adversaries=1)
    params = SessionParameters.from_proto(msg)
    assert params == _distinct_params().with_plan(_distinct_params().plan(7))
    assert (params.kind, params.mode, params.dim, params.segments, params.noise_segments,
            params.scale_bits, params.bound, params.nonnegative, params.primes, params.rows,
            params.chunk_bytes, params.max_rows_per_party, params.max_rows_total,
            params.integrity, params.mask_degree, params.adversaries, params.alphas,
            params.betas) == (
        "distance", "transparent", 4, 1, 2, 4, 2.5, True, (65521,), 3, 8192, 77, 99,
        "correct", 3, 1, (1, 2, 3), (10, 11, 12, 13, 14, 15, 16))
    assert type(params.primes) is tuple and type(params.alphas) is tuple


def test_from_proto_fills_unset_fields_with_the_documented_defaults():
    # A message from a peer that left the caps, integrity, primes and points unset.
    msg = pb.Parameters(kind="distance", mode="masked", dim=3, segments=1, noise_segments=1,
                        scale_bits=8, bound=1.0, chunk_bytes=4096, rows=1)
    params = SessionParameters.from_proto(msg)
    assert params.max_rows_per_party == 1_000_000
    assert params.max_rows_total == 2_000_000
    assert params.integrity == "detect"
    assert params.primes is None and params.alphas is None and params.betas is None
    assert params.mask_degree == 0 and params.nonnegative is False
    assert params.adversaries is None  # unset: the default, resolved when the plan is made
    assert params == SessionParameters(dim=3, bound=1.0, scale_bits=8, chunk_bytes=4096)


def test_round_trip_of_a_sum_keeps_its_kind_and_rows():
    params = SessionParameters(kind="sum", dim=2, rows=5, bound=1.0, scale_bits=1,
                               primes=(13,), max_rows_per_party=8, max_rows_total=9,
                               integrity="off", mask_degree=1)
    back = SessionParameters.from_proto(params.to_proto(params.plan(3)))
    assert back == params.with_plan(params.plan(3)) and back.adversaries == 0
    assert back.alphas is None and back.betas is None


# -- row caps --------------------------------------------------------------------------------

def test_row_caps_allow_exactly_the_caps_and_refuse_one_more():
    params = SessionParameters(dim=3, bound=1.0, max_rows_per_party=10, max_rows_total=25)
    check_row_caps(params, {"a": 10, "b": 10, "c": 5}, blame=lambda n: n)   # at both caps
    with pytest.raises(PeerError, match=exactly(
            "party 'blamed b' in phase 'roster': "
            "'b' announces 11 rows, more than the session's max_rows_per_party = 10")) as info:
        check_row_caps(params, {"a": 1, "b": np.uint64(11)}, blame=lambda n: f"blamed {n}",
                       phase="roster")
    assert (info.value.party, info.value.phase) == ("blamed b", "roster")
    with pytest.raises(PeerError, match=exactly(
            "party 'blamed None' in phase 'join': "
            "the parties announce 26 rows in total, more than the session's "
            "max_rows_total = 25")) as info:
        check_row_caps(params, {"a": 10, "b": 10, "c": 6}, blame=lambda n: f"blamed {n}")
    assert (info.value.party, info.value.phase) == ("blamed None", "join")


# -- row tiles ---------------------------------------------------------------------------------

def test_row_tiles_small_budgets():
    # chunk_bytes // 4 elements per tile, at least one row: a budget of 0 (chunk_bytes < 4)
    # is one row per tile like a budget of 1.
    assert row_tiles(3, 0) == [(0, 1), (1, 2), (2, 3)]
    assert row_tiles(3, 3) == [(0, 1), (1, 2), (2, 3)]
    assert row_tiles(0, 4096) == []
    assert row_tiles(1, 4096) == [(0, 1)]
    # budget 3 at n = 3: rows of 3, 2, 1 columns -> (0,1), (1,2), then 3 // 1 = 3 rows capped
    assert row_tiles(3, 12) == [(0, 1), (1, 2), (2, 3)]
    # budget 4 at n = 4: 4 // 4 = 1, 4 // 3 = 1, 4 // 2 = 2 -> (2, 4)
    assert row_tiles(4, 16) == [(0, 1), (1, 2), (2, 4)]


# -- the mask degree against the number of parties ----------------------------------------------

@pytest.mark.parametrize("parties", [3, 5, 6])
def test_plan_refuses_a_mask_degree_above_m_minus_1_by_name(parties):
    for degree in (parties - 1, 2, 0):   # at most m - 1 partners (and t + 1 = 2): accepted
        SessionParameters(dim=3, bound=1.0, mask_degree=degree).plan(parties)
    for degree in (parties, parties + 1, parties + 2):
        with pytest.raises(ParameterError, match=exactly(
                f"mask_degree must be at most m - 1 = {parties - 1} (each party has "
                f"{parties - 1} possible mask partners), got {degree}")):
            SessionParameters(dim=3, bound=1.0, mask_degree=degree).plan(parties)
    with pytest.raises(ParameterError, match=exactly(
            f"mask_degree must be at most m - 1 = {parties - 1} (each party has "
            f"{parties - 1} possible mask partners), got {parties}")):
        SessionParameters(kind="sum", dim=3, bound=1.0, mask_degree=parties).plan(parties)
