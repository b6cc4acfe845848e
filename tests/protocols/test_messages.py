"""protocols/_messages.py: the checks that mutation testing showed nothing else observed.

Expected values are written out from the docstrings (tile and chunk rules, the secure
sum's 2 m M + 1 residues), not computed with the module's helpers. docs/testing.md
lists the mutants these kill and the ones left as equivalent.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from finite_field import ParameterError, PeerError
from protocols import SessionParameters, parse_envelope
from protocols._generated import omnifc_pb2 as pb
from protocols._messages import (body_of, chunk_rows, envelope, pack, packed_view, phase_of,
                                 row_tiles, unpack, vector_tiles)


def exactly(message: str) -> str:
    return f"^{re.escape(message)}$"


# -- SessionParameters: validation -------------------------------------------------------

def test_parameter_errors_say_what_is_wrong():
    cases = [
        (dict(kind="product", dim=3), "kind must be one of ('distance', 'sum'), got 'product'"),
        (dict(kind="sum", dim=3, mode="transparent"),
         "a secure sum is always masked; transparent mode is for distance sessions only"),
        (dict(kind="sum", dim=0), "a secure sum needs the vector length (dim > 0)"),
        (dict(dim=3, chunk_bytes=4095), "chunk_bytes must be in [4096, 3 MiB], got 4095"),
        (dict(dim=3, chunk_bytes=(3 << 20) + 1),
         f"chunk_bytes must be in [4096, 3 MiB], got {(3 << 20) + 1}"),
    ]
    for arguments, message in cases:
        with pytest.raises(ParameterError, match=exactly(message)):
            SessionParameters(**{"bound": 1.0, **arguments})


def test_edges_that_are_allowed():
    for chunk in (4096, 3 << 20):
        assert SessionParameters(dim=3, bound=1.0, chunk_bytes=chunk).chunk_bytes == chunk
    assert SessionParameters(dim=0, bound=1.0).dim == 0         # distance: d from the data
    assert SessionParameters(kind="sum", dim=1, bound=1.0).dim == 1
    params = SessionParameters(dim=2, bound=1.0, primes=[np.int64(65521), 65519])
    assert params.primes == (65521, 65519) and all(type(p) is int for p in params.primes)


# -- plans: every parameter reaches the plan ---------------------------------------------

def test_distance_plan_carries_every_chosen_parameter():
    params = SessionParameters(dim=4, bound=1.0, scale_bits=4, noise_segments=2,
                               nonnegative=True, primes=(65521,), alphas=(2, 5, 7),
                               betas=(10, 11, 12, 13, 14))
    plan = params.plan(5)
    assert plan.codes[0].alphas == (2, 5, 7) and plan.codes[0].betas == (10, 11, 12, 13, 14)
    assert plan.primes == (65521,)
    assert plan.quantizer.nonnegative is True
    # noise_segments = 2 with l = 1: three interpolation points, and at least 2l+2t-1 = 5
    # parties; signed data would need more bits than 65521 offers at q = 4, d = 4.
    assert len(plan.codes[0].alphas) == 3
    with pytest.raises(ParameterError):
        params.plan(4)
    with pytest.raises(ParameterError, match="wrap"):
        SessionParameters(dim=4, bound=1.0, scale_bits=6, primes=(65521,)).plan(3)


def test_sum_plan_nonnegative_and_describe():
    signed = SessionParameters(kind="sum", dim=3, rows=2, bound=1.0, scale_bits=1).plan(3)
    positive = SessionParameters(kind="sum", dim=3, rows=2, bound=1.0, scale_bits=1,
                                 nonnegative=True).plan(3)
    assert positive.quantizer.nonnegative is True and signed.quantizer.nonnegative is False
    assert signed.describe() == {"kind": "sum", "length": 6, "parties": 3, "scale_bits": 1,
                                 "bound": 1.0, "nonnegative": False,
                                 "primes": list(signed.primes)}
    with pytest.raises(ParameterError, match=exactly("a secure sum needs at least 2 parties, "
                                                     "got 1")):
        SessionParameters(kind="sum", dim=3, bound=1.0).plan(1)


def test_sum_primes_hold_the_documented_2mM_plus_1_residues():
    # m = 3, M = round(2^1 * 1.0) = 2: sums lie in [-6, 6], 2 m M + 1 = 13 residues: the
    # prime 13 is just enough, 11 is not.
    def plan(primes):
        return SessionParameters(kind="sum", dim=2, bound=1.0, scale_bits=1,
                                 primes=primes).plan(3)

    assert plan((13,)).primes == (13,) and plan((17,)).primes == (17,)
    for too_small in ((11,), (7,)):
        with pytest.raises(ParameterError):
            plan(too_small)


def test_parameters_round_trip_through_protobuf():
    params = SessionParameters(dim=4, bound=2.5, scale_bits=4, segments=1, noise_segments=2,
                               nonnegative=True, primes=(65521,), chunk_bytes=8192,
                               alphas=(1, 2, 3), betas=(10, 11, 12, 13, 14))
    plan = params.plan(5)
    assert SessionParameters.from_proto(params.to_proto(plan)) == params.with_plan(plan)


# -- payloads ----------------------------------------------------------------------------

def test_size_errors_name_party_phase_and_expected_bytes():
    data = pack(np.arange(3))
    with pytest.raises(PeerError, match="payload holds 12 bytes, expected 20") as info:
        packed_view(data, 5, party="b", phase="evaluation")
    assert (info.value.party, info.value.phase) == ("b", "evaluation")
    with pytest.raises(PeerError, match="payload holds 12 bytes, expected 8") as info:
        unpack(data, 2, 13, party="c", phase="shares")
    assert (info.value.party, info.value.phase) == ("c", "shares")


# -- tiles and chunks, from their docstrings ---------------------------------------------

def test_vector_tiles_hold_chunk_bytes_over_4_elements():
    assert vector_tiles(2500, 4096) == [(0, 1024), (1024, 2048), (2048, 2500)]
    assert vector_tiles(3, 4) == [(0, 1), (1, 2), (2, 3)]       # one element per tile
    assert vector_tiles(1, 4096) == [(0, 1)]
    assert vector_tiles(0, 4096) == [(0, 0)]                    # one (empty) tile
    assert vector_tiles(0, 4) == [(0, 0)]


def test_chunk_rows_hold_at_most_chunk_bytes():
    assert chunk_rows(10, 300, 4096) == [(0, 3), (3, 6), (6, 9), (9, 10)]  # 3 rows = 3600 B
    assert chunk_rows(5, 1, 8) == [(0, 2), (2, 4), (4, 5)]      # 2 elements of 4 bytes
    assert chunk_rows(3, 0, 8) == [(0, 2), (2, 3)]              # width 0 counted as 1
    assert chunk_rows(3, 5000, 4096) == [(0, 1), (1, 2), (2, 3)]  # at least one row


def test_row_tiles_follow_the_upper_triangle_budget():
    # n = 6, budget 8 elements (32 bytes): row a carries 6 - a columns.
    # a=0: 8 // 6 = 1 row; a=1: 8 // 5 = 1; a=2: 8 // 4 = 2 rows (2, 3); a=4: 8 // 2 = 4
    assert row_tiles(6, 32) == [(0, 1), (1, 2), (2, 4), (4, 6)]
    assert row_tiles(3, 4) == [(0, 1), (1, 2), (2, 3)]          # budget 1: one row each
    assert row_tiles(2, 4) == [(0, 1), (1, 2)]
    assert row_tiles(4, 4096) == [(0, 4)]


# -- envelopes -----------------------------------------------------------------------------

def test_envelope_helpers():
    assert body_of(pb.Envelope()) == (None, None)
    env = envelope(ready=pb.Ready(session_id="s", party_id="a", phase="shares"))
    kind, body = body_of(env)
    assert kind == "ready" and body.party_id == "a"
    assert parse_envelope(env.SerializeToString()) == env
    assert phase_of("tile") == "evaluation" and phase_of("hello") == "join"
    assert phase_of("bogus") == "unknown" and phase_of(None) == "unknown"
