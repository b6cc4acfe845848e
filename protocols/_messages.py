"""Packing of field elements, the chunk/tile schedules, and the secure sum's plan.

The public session parameters are declared in :mod:`protocols._parameters` (re-exported
here).

Everything here is deterministic and public: both ends compute the same schedule from the
roster, so a message whose row range, size or index does not match is malformed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from finite_field import PeerError, Quantizer

from ._generated import omnifc_pb2 as pb
# the session parameters are declared in _parameters; re-exported here for the modules
# (and tests) that import them from the message schedule
from ._parameters import (DEFAULT_CHUNK_BYTES, DEFAULT_MAX_ROWS_PER_PARTY,
                          DEFAULT_MAX_ROWS_TOTAL, INTEGRITY, KINDS, MODES, SessionParameters)

__all__ = ["SessionParameters", "SumPlan", "pack", "unpack", "wire_size", "row_tiles", "vector_tiles",
           "chunk_rows", "envelope", "body_of", "phase_of", "parse_envelope",
           "DEFAULT_CHUNK_BYTES", "DEFAULT_MAX_ROWS_PER_PARTY", "DEFAULT_MAX_ROWS_TOTAL",
           "MODES", "KINDS", "INTEGRITY", "check_row_caps", "DROPPED", "is_dropped"]

#: The ``ErrorReport.kind`` that tells a party the session goes on without it (it missed
#: a deadline of the evaluation); the coordinator ends that party's stream after it.
DROPPED = "dropped"


def is_dropped(report) -> bool:
    """Whether an ``ErrorReport`` tells its party that the session goes on without it."""
    return report.kind == DROPPED

#: The phase a message belongs to (for stats and error messages).
_PHASE_OF = {"hello": "join", "roster": "join", "confirmation": "shares",
             "confirmations": "shares", "share": "shares", "ready": "shares",
             "round_start": "evaluation", "tile": "evaluation", "group_seed": "evaluation",
             "result": "result",
             "error": "error"}


@dataclass(frozen=True)
class SumPlan:
    """Arithmetic of a secure sum: quantizer, primes and the signed offset."""

    quantizer: Quantizer
    primes: tuple[int, ...]
    parties: int
    length: int

    @property
    def offset(self) -> int:
        """m * M: added to the decoded sum so that it is non-negative before CRT."""
        return self.parties * self.quantizer.max_magnitude

    @property
    def min_responders(self) -> int:
        return self.parties

    def describe(self) -> dict:
        return {"kind": "sum", "length": self.length, "parties": self.parties,
                "scale_bits": self.quantizer.scale_bits, "bound": self.quantizer.bound,
                "nonnegative": self.quantizer.nonnegative, "primes": list(self.primes)}


def check_row_caps(parameters: SessionParameters, rows: dict, *, blame, phase: str = "join"):
    """PeerError unless every party's row count and the total respect the public caps.

    ``rows`` maps party -> n_rows; ``blame(party)`` names who is at fault (the sender of a
    hello at the coordinator, the coordinator at a party).
    """
    for name, n in rows.items():
        if int(n) > parameters.max_rows_per_party:
            raise PeerError(f"{name!r} announces {int(n)} rows, more than the session's "
                            f"max_rows_per_party = {parameters.max_rows_per_party}",
                            party=blame(name), phase=phase)
    total = sum(int(n) for n in rows.values())
    if total > parameters.max_rows_total:
        raise PeerError(f"the parties announce {total} rows in total, more than the "
                        f"session's max_rows_total = {parameters.max_rows_total}",
                        party=blame(None), phase=phase)


def pack(values: np.ndarray) -> bytes:
    """Field elements (< 2^31) as uint32 little-endian bytes."""
    return np.ascontiguousarray(values, dtype="<u4").tobytes()


def _varint_bytes(value: int) -> int:
    return max(1, (value.bit_length() + 6) // 7)


def wire_size(env: pb.Envelope, payload: bytes | None = None) -> int:
    """``env.ByteSize()``, without encoding an evaluation tile's payload to count it.

    upb computes ByteSize by encoding the whole message, which for a MB-sized tile costs
    about as much as sending it; here the payload only counts its length (tag, length
    varint, bytes) next to the encoded size of the tile's other fields. Each read of a
    bytes field copies it: a caller that has read the tile's ``values`` already passes
    them as ``payload``, and they are not read again.

    >>> env = envelope(tile=pb.EvaluationTile(session_id="s", row_stop=300, values=bytes(999)))
    >>> wire_size(env) == env.ByteSize()
    True
    """
    if env.WhichOneof("body") != "tile":
        return env.ByteSize()
    head, size, tile = pb.EvaluationTile(), 0, env.tile
    for field in tile.DESCRIPTOR.fields:
        if field.name == "values":
            value = tile.values if payload is None else payload
            if value:
                size = _varint_bytes(field.number << 3) + _varint_bytes(len(value)) + len(value)
        elif (field.is_repeated if hasattr(field, "is_repeated")  # protobuf >= 5.x
              else field.label == field.LABEL_REPEATED) or field.type == field.TYPE_MESSAGE:
            return env.ByteSize()  # a field this shortcut does not know: count it exactly
        else:
            setattr(head, field.name, getattr(tile, field.name))  # a default adds nothing
    length = head.ByteSize() + size
    number = pb.Envelope.DESCRIPTOR.fields_by_name["tile"].number
    return _varint_bytes(number << 3) + _varint_bytes(length) + length


def packed_view(data: bytes, count: int, *, party, phase: str) -> np.ndarray:
    """uint32 LE bytes as a read-only uint32 view; PeerError on a wrong size."""
    if len(data) != 4 * count:
        raise PeerError(f"payload holds {len(data)} bytes, expected {4 * count} "
                        f"({count} field elements)", party=party, phase=phase)
    return np.frombuffer(data, dtype="<u4")


def unpack(data: bytes, count: int, prime: int, *, party, phase: str) -> np.ndarray:
    """uint32 LE bytes -> int64 elements; PeerError on a wrong size or a value >= p."""
    values = packed_view(data, count, party=party, phase=phase)
    if values.size and int(values.max()) >= prime:
        raise PeerError(f"payload holds a value >= p = {prime}", party=party, phase=phase)
    return values.astype(np.int64)


def row_tiles(n: int, chunk_bytes: int) -> list[tuple[int, int]]:
    """Upper-triangle row tiles [a, b) of an n x n matrix, carrying columns a..n-1.

    A tile is the (b - a) x (n - a) block right of the diagonal's start; it holds at most
    ``chunk_bytes // 4`` elements (but always at least one row).
    """
    budget = max(1, chunk_bytes // 4)
    tiles, a = [], 0
    while a < n:
        rows = max(1, budget // (n - a))
        tiles.append((a, min(n, a + rows)))
        a = tiles[-1][1]
    return tiles


def vector_tiles(length: int, chunk_bytes: int) -> list[tuple[int, int]]:
    """Element ranges [a, b) of a flattened vector, ``chunk_bytes // 4`` elements each."""
    step = max(1, chunk_bytes // 4)
    return [(a, min(a + step, length)) for a in range(0, max(length, 1), step)]


def chunk_rows(n_rows: int, width: int, chunk_bytes: int) -> list[tuple[int, int]]:
    """Row ranges of a (n_rows, width) share array, each at most ``chunk_bytes``."""
    step = max(1, chunk_bytes // (4 * max(width, 1)))
    return [(a, min(a + step, n_rows)) for a in range(0, n_rows, step)]


def envelope(**body) -> pb.Envelope:
    """``envelope(hello=msg)`` -> an Envelope holding that body."""
    return pb.Envelope(**body)


def body_of(env: pb.Envelope):
    """(kind, message) of an envelope; kind is None when it is empty."""
    kind = env.WhichOneof("body")
    return kind, (getattr(env, kind) if kind else None)


def phase_of(kind: str | None) -> str:
    return _PHASE_OF.get(kind, "unknown")


def parse_envelope(data: bytes) -> pb.Envelope:
    """Parse serialized ``omnifc.v1.Envelope`` bytes (e.g. a recorded message)."""
    return pb.Envelope.FromString(data)
