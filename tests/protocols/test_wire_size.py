"""``wire_size``: the coordinator's byte counts equal ``ByteSize()`` without encoding tiles."""

from __future__ import annotations

import numpy as np
import pytest

from protocols._generated import omnifc_pb2 as pb
from protocols._messages import envelope, wire_size

# Lengths at the varint boundaries of the payload's and the tile's length prefixes.
LENGTHS = [0, 1, 127, 128, 16_383, 16_384, 2_097_151, 2_097_152]


@pytest.mark.parametrize("length", LENGTHS)
def test_tile_sizes_equal_bytesize_at_every_varint_boundary(length):
    rng = np.random.default_rng(length)
    for _ in range(5):
        tile = pb.EvaluationTile(values=rng.bytes(length))
        for name, value in (("session_id", "sé" * int(rng.integers(0, 70))),
                            ("round", int(rng.integers(0, 2**32))),
                            ("sender", "party-" + "x" * int(rng.integers(0, 200))),
                            ("prime_index", int(rng.integers(0, 3))),
                            ("tile_index", int(rng.integers(0, 2**20))),
                            ("row_start", int(rng.integers(0, 2**63))),
                            ("row_stop", int(rng.integers(0, 2**40)))):
            if rng.random() < 0.7:  # some fields left at their default (not encoded)
                setattr(tile, name, value)
        env = envelope(tile=tile)
        assert wire_size(env) == env.ByteSize() == len(env.SerializeToString())
        # the payload as read already by the caller (the coordinator reads it once)
        assert wire_size(env, env.tile.values) == env.ByteSize()


def test_other_messages_are_counted_by_bytesize():
    for env in (envelope(hello=pb.Hello(session_id="s", party_id="a", n_rows=3)),
                envelope(result=pb.Result(session_id="s", party_id="a", labels=[1, 2, 3])),
                pb.Envelope()):
        assert wire_size(env) == env.ByteSize()


def test_a_wrong_count_is_seen():
    # The comparison above can fail: a tile one byte longer has a different size.
    env = envelope(tile=pb.EvaluationTile(values=bytes(200)))
    longer = envelope(tile=pb.EvaluationTile(values=bytes(201)))
    assert wire_size(longer) == wire_size(env) + 1
