"""What a session computes, behind one interface: the distance matrix or a secure sum.

The :class:`~protocols.Party` and the :class:`~protocols.Coordinator` run the same phases
for both kinds of session and never ask which kind it is; they ask its plan (the
:class:`DistanceSession` or :class:`SumSession` of :func:`session_plan`) what differs:

==========================  ==================================  ============================
                            :class:`DistanceSession`            :class:`SumSession`
==========================  ==================================  ============================
the arithmetic              ``CodingPlan`` (finite_field)       :class:`SumPlan`
the party's data            (n, d) rows, any n >= 1             (rows, k) exactly
shares                      exchanged, encrypted (phase         none: straight to ``ready``
                            ``shares``)
tiles of the schedule       row tiles of the upper triangle     ranges of the flat vector
                            (:func:`row_tiles`)                 (:func:`vector_tiles`)
a party's upload for a      g(beta_j) on rows [a, b) x          its own values [a, b)
tile                        columns [a, n), weighted by c_j
integrity checks            Reed-Solomon, when r >= 1           none
the coordinator's result    :class:`DistanceAccumulator`        :class:`SumAccumulator`
the decode                  tile-wise in place, D in [0, bound] signed, |sum| <= m M
==========================  ==================================  ============================

A distance session of another *layout* (D[:, L] for landmark rows L, or a list of pairs;
:mod:`protocols._layouts`) has its own plan, a :class:`DistanceSession` whose tiles,
accumulator and decode cover only those entries (:mod:`protocols._layout_plans`).

Both decodes are :mod:`finite_field`'s (:func:`~finite_field.decode_upper`,
:func:`~finite_field.decode_residues`); a value outside the no-wrap bound is an
:class:`~finite_field.IntegrityError` of phase ``decode`` that says which check failed.
Everything here is public and deterministic, so both ends compute the same schedule.
"""

from __future__ import annotations

import concurrent.futures

import numpy as np

from finite_field import (CodingPlan, InputError, IntegrityError, KeptThreads, ParameterError,
                          ProtocolError, WrapAroundError, add_upload, decode_residues)

from ._accumulator import DistanceAccumulator
from ._integrity import round_checks
from ._messages import SessionParameters, SumPlan, row_tiles, vector_tiles

__all__ = ["SessionPlan", "DistanceSession", "SumSession", "SumAccumulator", "session_plan",
           "session_type"]


#: Elements of g(beta_j) computed per kernel call (several tiles; 32 MB as int64).
_BLOCK_ELEMENTS = 1 << 22

#: Compute the next block in the background while this one's tiles are masked and sent.
PREFETCH = True

#: The one thread that computes the next blocks of this process's parties, in the order
#: asked. Parties in one process (in memory) queue behind each other: each waits only for
#: its own block, so none waits for another's wait. Not the kernels' helper threads: the
#: block's kernel runs on those, and helpers never wait for helpers.
_AHEAD = KeptThreads(1, "omnifc-next-block")


class _BlockValues:
    """A party's g(beta_j) tile by tile, for tiles asked for in schedule order.

    Several consecutive tiles are computed in one ``party._evaluate(k, a, stop)`` call
    (rows [a, stop) against columns a..n-1, :func:`_block_stop`). While the tiles of one
    block are masked, packed and sent (work under the GIL, on one core: the keystream,
    the upload kernel, protobuf), the next block is computed in a background thread
    (the kernels release the GIL), so the second core is not idle then: at n = 2,000,
    m = 3 a session takes about 13 % less time. A party then holds two blocks (at most
    2 x 32 MB), never more: a block is computed ahead only once the one before it is
    taken. Nothing is computed ahead before a second tile is asked for (a resume computes
    its re-sent tiles one at a time, and starts nothing it will not use). The values are
    the same either way (the kernels are deterministic). An error of a block computed
    ahead is raised when its first tile is asked for. ``close()`` waits for a block still
    being computed (a round abandoned mid-way), so that no ``_evaluate`` of this party
    ever runs while another starts.

    >>> import numpy as np
    >>> class Held:  # a party holding all rows, computing 10 * a + row offsets
    ...     n_total = 4
    ...     def _evaluate(self, k, a, b):
    ...         return np.add.outer(np.arange(a, b) * 10, np.arange(self.n_total - a))
    >>> values = _BlockValues(Held(), 0, [(0, 2), (2, 4)])
    >>> values(0).tolist(), values(1).tolist()
    ([[0, 1, 2, 3], [10, 11, 12, 13]], [[20, 21], [30, 31]])
    >>> values.close()
    """

    def __init__(self, party, k: int, tiles) -> None:
        self._party, self._k, self._tiles = party, k, tiles
        self._first_of = {a: i for i, (a, _) in enumerate(tiles)}
        self._block = None  # (start, stop, values)
        self._next = None   # (start, stop, future) of the block computed ahead

    def _start(self, first: int) -> tuple[int, int]:
        return self._tiles[first][0], _block_stop(self._tiles, first, self._party.n_total)

    def __call__(self, tile_index: int) -> np.ndarray:
        a, b = self._tiles[tile_index]
        first_call = self._block is None
        if first_call or not self._block[0] <= a < b <= self._block[1]:
            ahead, self._next = self._next, None
            if ahead is not None and ahead[0] == a:
                self._block = (a, ahead[1], ahead[2].result())
            else:  # the first block, or tiles out of order: computed here
                if ahead is not None:  # not needed after all: finished, its result unused
                    concurrent.futures.wait([ahead[2]])
                start, stop = self._start(tile_index)
                self._block = (start, stop, self._party._evaluate(self._k, start, stop))
        following = self._first_of.get(self._block[1])
        if PREFETCH and not first_call and self._next is None and following is not None:
            start, stop = self._start(following)
            self._next = (start, stop, _AHEAD.get().submit(self._party._evaluate, self._k,
                                                           start, stop))
        start = self._block[0]
        return self._block[2][a - start:b - start, a - start:]

    def close(self) -> None:
        ahead, self._next, self._block = self._next, None, None
        if ahead is not None:
            concurrent.futures.wait([ahead[2]])


def _block_stop(tiles, first: int, n: int) -> int:
    """End row of the block of consecutive tiles starting at ``tiles[first]``.

    A block of rows [start, stop) is computed against columns start..n-1, so its lower
    triangle (about (stop - start)^2 / 2 entries) is computed and thrown away: blocks are
    kept to at most 1/8 of the remaining columns (under 1/16 wasted), besides the
    element budget, so a small matrix is not computed in full instead of its triangle.
    """
    start = tiles[first][0]
    stop = tiles[first][1]
    for a, b in tiles[first + 1:]:
        if (b - start) * (n - start) > _BLOCK_ELEMENTS or 8 * (b - start) > n - start:
            break
        stop = b
    return stop


def decode_failure(checked: str) -> IntegrityError:
    """An IntegrityError of the decode phase that says which check failed."""
    return IntegrityError("the decoded result failed its integrity check in phase 'decode': "
                          f"{checked}", phase="decode")



def out_of_bound(plan, responders) -> str:
    """What a decode that left the no-wrap bound says (the evaluations were corrupted)."""
    return (f"every decoded squared distance must lie in [0, {plan.distance_bound}] (the "
            f"no-wrap bound of the public parameters); some do not: an uploaded evaluation "
            f"of {responders} was corrupted")

class SessionPlan:
    """The interface the state machines call; :class:`DistanceSession` and
    :class:`SumSession` implement it.

    Before the plan exists (class level): ``expected_rows(parameters)`` (the row count
    every hello must announce, None for any) and ``check_data(x, parameters, party)``
    (a party's data, checked before anything is sent). Then, for ``plan`` and
    ``parameters``: ``tiles(n_total)`` and ``tile_shape(a, b, n_total)`` (the schedule
    and the shape of one upload), ``weights(names, responders)`` (c_j per responder and
    prime), ``round_checks(...)`` (the round's integrity structure or None),
    ``tile_values(party, k, tiles)`` (what a party uploads for a tile, unmasked: a
    callable of the tile index, asked in schedule order, with an optional ``close()``
    that the party calls when it is done with it), and at
    the coordinator ``accumulator(...)``, ``result_memory(acc, previous)`` and
    ``decode(acc, responders) -> (integer, values, store)``.
    """

    kind = ""
    #: Which entries of D (protocols._layouts): "full" but for the layout plans of
    #: protocols._layout_plans.
    layout = "full"
    #: Whether the parties exchange encrypted shares before the evaluation.
    exchanges_shares = False
    #: Whether a round can carry integrity checks.
    has_checks = False
    #: Whether its coordinator can keep a journal to be restarted from (the result is one
    #: file of row tiles, each written once: protocols._journal).
    journals = False

    def __init__(self, plan, parameters: SessionParameters) -> None:
        self.plan = plan
        self.parameters = parameters

    def bind(self, session_id: str, n_total: int, roster_digest: bytes) -> None:
        """Fix what depends on the roster (a layout's entries; nothing here): every party
        before it confirms the roster, the coordinator before it sends it. Raises
        ParameterError when the roster does not fit."""

    def entries(self, a: int, b: int):
        """``flat index -> (global rows, global columns)`` of tile [a, b) for the
        integrity verdict; None: the upper-triangle row tile of the full matrix."""
        return None


class DistanceSession(SessionPlan):
    """A distance session: shares, then row tiles of g(beta_j), decoded into one matrix."""

    kind = "distance"
    exchanges_shares = True
    has_checks = True  # Reed-Solomon, when the round has r >= 1 redundant responders
    journals = True
    plan: CodingPlan

    # -- before the plan (class level) --------------------------------------------------
    @staticmethod
    def expected_rows(parameters: SessionParameters) -> int | None:
        """The row count every hello must announce (None: any n >= 1)."""
        return None

    @staticmethod
    def check_data(x: np.ndarray, parameters: SessionParameters, party) -> np.ndarray:
        """A party's rows, checked before anything is sent: 2-D, non-empty, d columns."""
        if x.ndim != 2:
            raise InputError(f"data must be a 2-D array (rows x features), got shape "
                             f"{x.shape}", party=party)
        if x.shape[0] == 0:
            raise InputError("holds no rows (empty party)", party=party)
        if x.shape[1] != parameters.dim:
            raise InputError(f"d must be equal for all parties; has d={x.shape[1]}, "
                             f"the session expects {parameters.dim}", party=party)
        return x

    # -- the schedule -------------------------------------------------------------------
    def tiles(self, n_total: int) -> list[tuple[int, int]]:
        """The evaluation tiles [a, b) of a round (per prime)."""
        return row_tiles(n_total, self.parameters.chunk_bytes)

    def tile_shape(self, a: int, b: int, n_total: int) -> tuple:
        """The shape of an upload for tile [a, b): rows [a, b) x columns [a, n)."""
        return (b - a, n_total - a)

    def weights(self, names, responders) -> dict:
        """{responder: [c_j per prime]}: the decoding weights of the round's B."""
        position = [names.index(r) for r in responders]
        columns = [code.decoding_weights(position) for code in self.plan.codes]
        return {r: [int(c[i]) for c in columns] for i, r in enumerate(responders)}

    def round_checks(self, names, responders, parameters, **kwargs):
        """The round's integrity structure, or None (r = 0, or integrity off)."""
        return round_checks(self.plan, parameters, names, responders, **kwargs)

    def tile_values(self, party, k: int, tiles):
        """``values(tile_index)``: ``party``'s g(beta_j) for a tile modulo prime k, asked
        for in schedule order (a :class:`_BlockValues`; ``close()`` it when done)."""
        return _BlockValues(party, k, tiles)

    # -- the coordinator's result -------------------------------------------------------
    def accumulator(self, n_total: int, *, parameters: dict, storage: dict):
        """The one integer result matrix every tile of a round goes into."""
        return DistanceAccumulator(
            n_total, self.plan.primes, scale_bits=self.plan.quantizer.scale_bits,
            distance_bound=self.plan.distance_bound, parameters=parameters, **storage)

    @staticmethod
    def result_memory(acc: DistanceAccumulator, previous: dict) -> dict:
        """The coordinator's n x n memory figures once ``acc`` is allocated (the peaks of
        the open tile sums carried over from the previous rounds)."""
        return {"memory_budget": acc.memory_budget, "result_ram_bytes": acc.ram_bytes,
                "open_sum_budget": 0,
                "peak_open_sum_bytes": previous.get("peak_open_sum_bytes", 0),
                "peak_open_sum_disk_bytes": previous.get("peak_open_sum_disk_bytes", 0)}

    def decode(self, acc: DistanceAccumulator, responders) -> tuple:
        """``(integer, values, store)``: the finished store (integer and values are read
        from it on access)."""
        # tiles filled the upper triangle; the accumulator decodes in row blocks in
        # place (CRT, no-wrap bound, mirror, zero diagonal): no second n x n array
        try:
            store = acc.finalize()
        except (ProtocolError, ParameterError):
            raise decode_failure(out_of_bound(self.plan, responders)) from None
        return None, None, store


class SumAccumulator:
    """The running sums of a secure sum's uploads: one int64 vector per prime.

    Each upload is < p < 2^31, so about 2^32 uploads fit before the reduction, which the
    decode does (:func:`finite_field.decode_residues`).
    """

    def __init__(self, plan: SumPlan) -> None:
        self.primes = plan.primes
        self.sums = [np.zeros((plan.length,), dtype=np.int64) for _ in plan.primes]

    def add_tile(self, prime_index: int, start: int, stop: int, values) -> None:
        """Add the uploaded elements [start, stop) for prime ``prime_index``
        (ParameterError if one is >= p)."""
        add_upload(self.sums[prime_index][start:stop], values, self.primes[prime_index])

    def abort(self) -> None:
        self.sums = None


class SumSession(SessionPlan):
    """A secure sum: no shares, masked uploads of the parties' own values, a signed decode."""

    kind = "sum"
    plan: SumPlan

    @staticmethod
    def expected_rows(parameters: SessionParameters) -> int | None:
        return parameters.rows

    @staticmethod
    def check_data(x: np.ndarray, parameters: SessionParameters, party) -> np.ndarray:
        """A party's contribution, shape (rows, k) (a vector is one row)."""
        x = x.reshape(1, -1) if x.ndim == 1 else x
        if x.shape != (parameters.rows, parameters.dim):
            raise InputError(f"contribution must have shape ({parameters.rows}, "
                             f"{parameters.dim}), got {x.shape}", party=party)
        return x

    def tiles(self, n_total: int) -> list[tuple[int, int]]:
        return vector_tiles(self.plan.length, self.parameters.chunk_bytes)

    def tile_shape(self, a: int, b: int, n_total: int) -> tuple:
        return (b - a,)

    def weights(self, names, responders) -> dict:
        """{responder: [1 per prime]}: every upload counts alike."""
        return {r: [1] * len(self.plan.primes) for r in responders}

    def round_checks(self, names, responders, parameters, **kwargs) -> None:
        """None: a secure sum has no integrity checks."""
        return None

    def tile_values(self, party, k: int, tiles):
        """``values(tile_index)``: ``party``'s own flat values of the tile, mod prime k."""
        flat, p = party.quantized.reshape(-1), self.plan.primes[k]

        def values(tile_index: int) -> np.ndarray:
            a, b = tiles[tile_index]
            return flat[a:b] % p
        return values

    def accumulator(self, n_total: int, *, parameters: dict, storage: dict) -> SumAccumulator:
        return SumAccumulator(self.plan)

    @staticmethod
    def result_memory(acc: SumAccumulator, previous: dict) -> dict:
        """Nothing n x n: a sum's memory figures stay empty."""
        return {}

    def decode(self, acc: SumAccumulator, responders) -> tuple:
        """``(integer, values, None)``: the exact signed sum (rows, k) and sum / 2^q."""
        offset = self.plan.offset
        try:
            integer = decode_residues(acc.sums, self.plan.primes, offset, signed=True)
        except WrapAroundError:
            raise decode_failure(f"every decoded sum must lie in [-{offset}, {offset}] "
                                 "(m times the largest quantized value); some do not: a "
                                 "contribution was corrupted") from None
        integer = integer.reshape(self.parameters.rows, self.parameters.dim)
        return integer, integer / self.plan.quantizer.scale, None


def session_type(parameters: SessionParameters) -> type:
    """:class:`DistanceSession` or :class:`SumSession`, by ``parameters.kind``; a layout
    other than full has its own distance plan (:mod:`protocols._layout_plans`)."""
    if parameters.kind == "sum":
        return SumSession
    if parameters.layout != "full":
        from ._layout_plans import layout_session_type

        return layout_session_type(parameters.layout)
    return DistanceSession


def session_plan(plan, parameters: SessionParameters):
    """The session plan of ``plan`` (a ``CodingPlan`` or :class:`SumPlan`)."""
    return session_type(parameters)(plan, parameters)
