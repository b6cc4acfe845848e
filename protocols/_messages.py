"""Public session parameters, packing of field elements, and the chunk/tile schedules.

Everything here is deterministic and public: both ends compute the same schedule from the
roster, so a message whose row range, size or index does not match is malformed.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from finite_field import (INTEGRITY_POLICIES, CodingPlan, ParameterError, check_adversaries, PeerError, Quantizer, choose_primes,
                          make_plan, min_parties)

from ._generated import omnifc_pb2 as pb
from ._mask_graph import check_distance_mask_degree, check_mask_degree

__all__ = ["SessionParameters", "SumPlan", "pack", "unpack", "row_tiles", "vector_tiles",
           "chunk_rows", "envelope", "body_of", "phase_of", "parse_envelope",
           "DEFAULT_CHUNK_BYTES", "DEFAULT_MAX_ROWS_PER_PARTY", "DEFAULT_MAX_ROWS_TOTAL",
           "MODES", "KINDS", "INTEGRITY", "check_row_caps"]

#: Payload bytes per share chunk or evaluation tile (well under gRPC's 4 MB default).
DEFAULT_CHUNK_BYTES = 1 << 20
#: Public row caps (per party and in total) of a session unless its config says otherwise.
DEFAULT_MAX_ROWS_PER_PARTY = 1_000_000
DEFAULT_MAX_ROWS_TOTAL = 2_000_000
MODES = ("masked", "transparent")
KINDS = ("distance", "sum")
#: Integrity policies (docs/protocol.md): Reed-Solomon checks on the uploads, and what a
#: detected deviation does: "detect" excludes the parties at fault and reruns (or aborts),
#: "correct" corrects located errors and names the parties, "off" is the unchecked
#: weighted-pairwise-mask upload.
INTEGRITY = INTEGRITY_POLICIES

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


@dataclass(frozen=True)
class SessionParameters:
    """What every party of a session agrees on before it starts (all public).

    Parameters
    ----------
    dim : int
        d (distance sessions) or the vector length k (sum sessions). 0 in a distance
        session means "taken from the data": every party must then hold the same d.
    bound, scale_bits, nonnegative
        Quantization with a public clip bound.
    segments, noise_segments : int
        l and t (distance sessions).
    primes : tuple of int, optional
        Moduli; chosen automatically (fewest primes with no wrap-around) when omitted.
    mode : {"masked", "transparent"}
        Masked uploads (default) or raw per-party evaluations (leaks per-segment distances).
    kind : {"distance", "sum"}
    rows : int
        Sum sessions: rows of every contribution (shape (rows, dim)).
    chunk_bytes : int
        Payload bytes per chunk/tile.
    max_rows_per_party, max_rows_total : int
        Public row caps: the coordinator refuses a hello, and every party a roster, whose
        row counts exceed them, before allocating anything.
    integrity : {"detect", "correct", "off"}
        Reed-Solomon checks on the evaluations D is decoded from (distance sessions with
        r = |B| - (2l+2t-1) >= 1 redundant responders; see docs/protocol.md). "detect"
        (default): a detected deviation excludes the parties at fault and reruns, or
        aborts with :class:`~finite_field.DeviationError`; "correct": located errors are
        corrected and the parties named in the result; "off": unchecked uploads.
    adversaries : int, optional
        A, the most parties that may deviate together (compute or share wrongly). Checked
        against the redundancy r = m - (2l+2t-1) when the plan is made
        (:func:`finite_field.check_adversaries`): "detect" needs 1 <= A <= r, "correct"
        1 <= A <= floor(r/2); with ``integrity="off"`` or r = 0 it is 0. None (default): the
        strongest the redundancy allows (r for "detect", floor(r/2) for "correct"); a
        smaller A lets "detect" locate, exclude and rerun, and leaves checks for
        stragglers. Against any A parties the session returns the exact D or raises
        :class:`~finite_field.DeviationError`, and names no one outside them
        (docs/integrity.md, "Declared adversaries").
    mask_degree : int
        0 (default): every pair of responders shares a pairwise mask. k >= 1: each
        responder masks only with its neighbours in the Harary graph H_{k,|B|} over the
        ordered responding set (:mod:`protocols._mask_graph`), so the masks withstand a
        coordinator colluding with up to k - 1 parties. Distance sessions refuse
        1 <= k <= t: the coordinator chooses B and can leave r = 0 (no integrity
        checks), and then these masks alone protect each c_j * g(beta_j), so k >= t + 1
        is required (sums: any k >= 1). At most m - 1; a round with |B| - 1 <= k uses
        every pair.
    """

    dim: int
    bound: float
    scale_bits: int = 16
    segments: int = 1
    noise_segments: int = 1
    nonnegative: bool = False
    primes: tuple | None = None
    mode: str = "masked"
    kind: str = "distance"
    rows: int = 1
    chunk_bytes: int = DEFAULT_CHUNK_BYTES
    max_rows_per_party: int = DEFAULT_MAX_ROWS_PER_PARTY
    max_rows_total: int = DEFAULT_MAX_ROWS_TOTAL
    integrity: str = "detect"
    mask_degree: int = 0
    adversaries: int | None = None
    alphas: tuple | None = field(default=None)
    betas: tuple | None = field(default=None)

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ParameterError(f"mode must be one of {MODES}, got {self.mode!r}")
        if self.integrity not in INTEGRITY:
            raise ParameterError(f"integrity must be one of {INTEGRITY}, got "
                                 f"{self.integrity!r}")
        if self.kind not in KINDS:
            raise ParameterError(f"kind must be one of {KINDS}, got {self.kind!r}")
        if self.kind == "sum" and self.mode != "masked":
            raise ParameterError("a secure sum is always masked; transparent mode is for "
                                 "distance sessions only")
        if not 4096 <= int(self.chunk_bytes) <= 3 << 20:
            raise ParameterError(f"chunk_bytes must be in [4096, 3 MiB], got {self.chunk_bytes}")
        for name in ("max_rows_per_party", "max_rows_total"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) \
                    or not 1 <= int(value) < 1 << 40:
                raise ParameterError(f"{name} must be an integer in [1, 2^40), got {value!r}")
            object.__setattr__(self, name, int(value))
        if self.primes is not None:
            object.__setattr__(self, "primes", tuple(int(p) for p in self.primes))
        # distance sessions: 0 or k >= t + 1 (the coordinator can leave r = 0, and then
        # the pairwise masks alone must withstand t colluders); sums have no t
        object.__setattr__(self, "mask_degree", check_mask_degree(self.mask_degree)
                           if self.kind == "sum" else
                           check_distance_mask_degree(self.mask_degree, self.noise_segments))
        if self.adversaries is not None:
            a = self.adversaries
            if isinstance(a, bool) or not hasattr(a, "__index__") or int(a) < 0:
                raise ParameterError(f"adversaries (A) must be an integer >= 0, got {a!r}")
            object.__setattr__(self, "adversaries", int(a))
            if self.kind == "sum" and self.adversaries:
                raise ParameterError("a secure sum has no integrity checks: adversaries "
                                     f"must be 0, got {self.adversaries}")
        if self.dim == 0 and self.kind == "sum":
            raise ParameterError("a secure sum needs the vector length (dim > 0)")

    def plan(self, parties: int):
        """The :class:`CodingPlan` (distance) or :class:`SumPlan` (sum) for m parties."""
        if self.mask_degree > parties - 1:
            raise ParameterError(f"mask_degree must be at most m - 1 = {parties - 1} (each "
                                 f"party has {parties - 1} possible mask partners), got "
                                 f"{self.mask_degree}")
        if self.kind == "distance":
            self.adversary_bound(parties)
            return make_plan(self.dim, bound=self.bound, scale_bits=self.scale_bits,
                             segments=self.segments, noise_segments=self.noise_segments,
                             parties=parties, nonnegative=self.nonnegative, primes=self.primes,
                             alphas=self.alphas, betas=self.betas)
        if parties < 2:
            raise ParameterError(f"a secure sum needs at least 2 parties, got {parties}")
        quantizer = Quantizer(scale_bits=self.scale_bits, bound=self.bound,
                              nonnegative=self.nonnegative)
        # |sum| <= m M; signed values need 2 m M + 1 residues without wrap-around.
        primes = choose_primes(2 * parties * quantizer.max_magnitude + 1, self.primes)
        return SumPlan(quantizer=quantizer, primes=primes, parties=parties,
                       length=self.rows * self.dim)

    def adversary_bound(self, parties: int) -> int:
        """A for m parties, resolved and checked (:func:`finite_field.check_adversaries`)."""
        if self.kind != "distance":
            return 0
        return check_adversaries(parties, self.segments, self.noise_segments,
                                 self.adversaries, self.integrity)

    def min_responders(self, parties: int) -> int:
        if self.kind == "sum":
            return parties
        return min_parties(self.segments, self.noise_segments)

    def to_proto(self, plan) -> pb.Parameters:
        msg = pb.Parameters(kind=self.kind, mode=self.mode, dim=self.dim,
                            segments=self.segments, noise_segments=self.noise_segments,
                            scale_bits=self.scale_bits, bound=self.bound,
                            nonnegative=self.nonnegative, primes=plan.primes,
                            rows=self.rows, chunk_bytes=self.chunk_bytes,
                            max_rows_per_party=self.max_rows_per_party,
                            max_rows_total=self.max_rows_total, integrity=self.integrity,
                            mask_degree=self.mask_degree,
                            adversaries=self.adversary_bound(plan.parties))
        if isinstance(plan, CodingPlan):
            msg.alphas.extend(plan.codes[0].alphas)
            msg.betas.extend(plan.codes[0].betas)
        return msg

    @classmethod
    def from_proto(cls, msg: pb.Parameters) -> "SessionParameters":
        return cls(dim=msg.dim, bound=msg.bound, scale_bits=msg.scale_bits,
                   segments=msg.segments, noise_segments=msg.noise_segments,
                   nonnegative=msg.nonnegative, primes=tuple(msg.primes) or None,
                   mode=msg.mode, kind=msg.kind, rows=msg.rows, chunk_bytes=msg.chunk_bytes,
                   max_rows_per_party=msg.max_rows_per_party or DEFAULT_MAX_ROWS_PER_PARTY,
                   max_rows_total=msg.max_rows_total or DEFAULT_MAX_ROWS_TOTAL,
                   integrity=msg.integrity or "detect", mask_degree=msg.mask_degree,
                   adversaries=msg.adversaries if msg.HasField("adversaries") else None,
                   alphas=tuple(msg.alphas) or None, betas=tuple(msg.betas) or None)

    def with_plan(self, plan) -> "SessionParameters":
        """These parameters with primes (and points) and A made explicit."""
        extra = {"adversaries": self.adversary_bound(plan.parties)}
        if isinstance(plan, CodingPlan):
            extra |= {"alphas": plan.codes[0].alphas, "betas": plan.codes[0].betas}
        return replace(self, primes=tuple(plan.primes), **extra)


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
