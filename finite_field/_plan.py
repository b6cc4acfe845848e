"""One object with every public parameter of a session's arithmetic, validated up front.

:func:`make_plan` turns what a user asks for (dimension, clip bound, scale bits, segments,
noise segments, party count) into a :class:`CodingPlan`: the quantizer, the primes that
make every squared distance exact (one prime when it fits, several otherwise) and one
:class:`LagrangeCode` per prime. Impossible requests fail here, before any share is made.

Redundancy. Decoding needs K = 2l+2t-1 evaluations; with m parties there are r = m - K
redundant ones. S stragglers use up S of them; the remaining r - S are Reed-Solomon parity
checks (see ``_reed_solomon``), which detect up to r - S wrong parties per entry, or
correct up to tau <= floor((r-S)/2) of them while still detecting up to r - S - tau. So
tolerating S stragglers and correcting A adversaries needs m >= 2l+2t-1+S+2A
(:func:`parties_needed`); :func:`tolerance` says what a given m tolerates.

Examples
--------
>>> from finite_field import make_plan
>>> plan = make_plan(dim=4, bound=8.0, scale_bits=16, segments=1, noise_segments=1, parties=3)
>>> plan.primes, plan.segment_length, plan.min_responders
((2147483647, 2147483629), 4, 3)
>>> parties_needed(segments=1, noise_segments=1, stragglers=1, adversaries=1)
6
>>> print(tolerance(parties=7, segments=1, noise_segments=1).describe())
m = 7 parties, K = 3 needed to decode, r = 4 redundant: detects up to 4 wrong parties per entry, or corrects up to 2
"""

from __future__ import annotations

import math
from dataclasses import dataclass


from ._errors import ParameterError
from ._lagrange import LagrangeCode, _positive_int, min_parties
from ._primes import choose_primes
from ._quantize import Quantizer

__all__ = ["CodingPlan", "make_plan", "parties_needed", "tolerance", "Tolerance",
           "INTEGRITY_POLICIES", "decoding_radius", "check_adversaries"]

#: The integrity policies of a distance session (docs/integrity.md, section 5).
INTEGRITY_POLICIES = ("detect", "correct", "off")


def _count(value, name: str) -> int:
    return _positive_int(value, name, 0)


def parties_needed(segments: int = 1, noise_segments: int = 1, stragglers: int = 0,
                   adversaries: int = 0) -> int:
    """m = 2l+2t-1+S+2A: parties that decode despite S stragglers and correct A adversaries.

    With only detection wanted (abort or exclude-and-rerun on any deviation), A wrong
    parties need A redundant evaluations: ``parties_needed(l, t, S + A)``.
    """
    l = _positive_int(segments, "segments (l)", 1)
    t = _positive_int(noise_segments, "noise_segments (t)", 1)
    return min_parties(l, t) + _count(stragglers, "stragglers (S)") + \
        2 * _count(adversaries, "adversaries (A)")


@dataclass(frozen=True)
class Tolerance:
    """What m parties tolerate when ``stragglers`` of them do not respond.

    Attributes
    ----------
    parties, min_responders : int
        m and K = 2l+2t-1.
    stragglers : int
        S, the parties assumed missing.
    redundancy : int
        r = m - K - S, the parity checks left (negative: decoding impossible).
    detect : int
        Wrong parties per entry that are always detected (radius 0): r.
    correct : int
        Wrong parties per entry that can be located and corrected: floor(r / 2).
    """

    parties: int
    min_responders: int
    stragglers: int

    @property
    def redundancy(self) -> int:
        return self.parties - self.min_responders - self.stragglers

    @property
    def decodable(self) -> bool:
        return self.redundancy >= 0

    @property
    def detect(self) -> int:
        return max(self.redundancy, 0)

    @property
    def correct(self) -> int:
        return max(self.redundancy, 0) // 2

    def detect_while_correcting(self, radius: int) -> int:
        """Wrong parties always detected when up to ``radius`` are corrected: r - radius."""
        if not 0 <= radius <= self.correct:
            raise ParameterError(f"radius must be in [0, {self.correct}], got {radius}")
        return self.redundancy - radius

    def describe(self) -> str:
        head = (f"m = {self.parties} parties, K = {self.min_responders} needed to decode"
                + (f", {self.stragglers} stragglers" if self.stragglers else ""))
        r = self.redundancy
        if r < 0:
            return head + f": cannot decode ({-r} too few)"
        if r == 0:
            return head + ", r = 0 redundant: nothing can be checked (a wrong party goes unseen)"
        return head + (f", r = {r} redundant: detects up to {r} wrong "
                       f"part{'y' if r == 1 else 'ies'} per entry, or corrects up to "
                       f"{r // 2}")


def tolerance(parties: int, segments: int = 1, noise_segments: int = 1,
              stragglers: int = 0) -> Tolerance:
    """What m parties tolerate: detection (r) or correction (floor(r/2)), r = m - K - S."""
    m = _positive_int(parties, "parties (m)", 1)
    l = _positive_int(segments, "segments (l)", 1)
    t = _positive_int(noise_segments, "noise_segments (t)", 1)
    return Tolerance(parties=m, min_responders=min_parties(l, t),
                     stragglers=_count(stragglers, "stragglers (S)"))


def decoding_radius(checks: int, adversaries: int) -> int:
    """tau = min(floor(s/2), s - A): errors per entry located with s checks against A.

    With s checks the code of every entry has minimum distance s + 1. When at most A
    parties deviate, an entry of two honest parties' rows is wrong at no more than A
    evaluators; a decoder of radius tau then never *mislocates* it exactly when
    tau + A <= s (two patterns with the same syndromes differ by a codeword, weight
    >= s + 1), so patterns of up to tau errors are located exactly and patterns of
    tau+1..A are flagged unlocatable. This is the largest such radius.

    >>> decoding_radius(2, 1), decoding_radius(2, 2), decoding_radius(4, 1), decoding_radius(3, 2)
    (1, 0, 2, 1)
    """
    checks = _count(checks, "checks (s)")
    adversaries = _count(adversaries, "adversaries (A)")
    if adversaries > checks:
        raise ParameterError(f"{checks} parity check(s) cannot detect {adversaries} "
                             f"deviating parties (A <= s is needed)")
    return min(checks // 2, checks - adversaries)


def check_adversaries(parties: int, segments: int, noise_segments: int, adversaries,
                      integrity: str) -> int:
    """The declared adversary bound A, validated against the redundancy r = m - K.

    ``adversaries`` None chooses the strongest bound the redundancy allows: r for
    "detect" (every deviation of up to r parties aborts the session; nothing is located,
    so nobody is excluded), floor(r/2) for "correct", 0 when nothing is checked. A smaller
    A buys location (radius min(floor(r/2), r - A)): named parties are excluded and the
    round rerun, and stragglers can drop out while r - A checks remain. The conditions
    (all parties responding; docs/integrity.md, "Declared adversaries"):

    * ``integrity="off"``: nothing is checked, A must be 0;
    * r = 0: nothing can be checked, A must be 0 (the session warns that it is unchecked);
    * ``"detect"``: 1 <= A <= r (every deviation of up to A parties is detected);
    * ``"correct"``: 1 <= A <= floor(r/2) (every one is corrected: radius A, A + A <= r);
    * A = 0 (either policy, explicitly): best effort, nothing promised: any deviation the
      checks see ends the session with nobody named, and a straggler may leave a round
      unchecked (the session warns).

    >>> check_adversaries(5, 1, 1, None, "detect"), check_adversaries(5, 1, 1, 1, "detect")
    (2, 1)
    >>> check_adversaries(5, 1, 1, None, "correct"), check_adversaries(3, 1, 1, None, "detect")
    (1, 0)
    >>> check_adversaries(5, 1, 1, 2, "correct")
    Traceback (most recent call last):
    ...
    finite_field._errors.ParameterError: integrity = "correct" with A = 2 deviating parties needs r >= 2A = 4 redundant parties (m >= 2l+2t-1+2A = 7), got m = 5 (r = 2); declare adversaries <= 1 or use integrity = "detect"
    """
    if integrity not in INTEGRITY_POLICIES:
        raise ParameterError(f"integrity must be one of {INTEGRITY_POLICIES}, got "
                             f"{integrity!r}")
    k = min_parties(segments, noise_segments)
    r = _positive_int(parties, "parties (m)", 1) - k
    if adversaries is None:
        if integrity == "off" or r <= 0:
            return 0
        adversaries = max(r if integrity == "detect" else r // 2, 1)  # 1 > r//2: refused
    if isinstance(adversaries, bool) or not hasattr(adversaries, "__index__"):
        raise ParameterError(f"adversaries (A) must be an integer, got {adversaries!r}")
    a = int(adversaries)
    if a < 0:
        raise ParameterError(f"adversaries (A) must be >= 0, got {a}")
    if integrity == "off" or r <= 0:
        if a:
            why = ('integrity = "off" checks nothing' if integrity == "off" else
                   f"m = {parties} parties leave r = 0 redundant evaluations (K = {k}), so "
                   "nothing can be checked")
            raise ParameterError(f"adversaries = {a} cannot be guaranteed: {why}; use "
                                 f"adversaries = 0 or more parties")
        return 0
    if a == 0:  # best effort: checked where possible, nobody named, nothing promised
        return 0
    need = a if integrity == "detect" else 2 * a
    if r < need:
        limit = r if integrity == "detect" else r // 2
        advice = (f"declare adversaries <= {limit}" if limit else "add parties") + (
            ' or use integrity = "detect"' if integrity == "correct" and r >= a else "")
        raise ParameterError(
            f"integrity = \"{integrity}\" with A = {a} deviating parties needs r >= "
            f"{'A' if integrity == 'detect' else '2A'} = {need} redundant parties "
            f"(m >= 2l+2t-1+{'A' if integrity == 'detect' else '2A'} = {k + need}), got "
            f"m = {parties} (r = {r}); {advice}")
    return a


@dataclass(frozen=True)
class CodingPlan:
    """The validated arithmetic of one session (see :func:`make_plan`)."""

    dim: int
    quantizer: Quantizer
    codes: tuple[LagrangeCode, ...]
    stragglers: int = 0
    adversaries: int = 0

    @property
    def primes(self) -> tuple[int, ...]:
        return tuple(code.prime for code in self.codes)

    @property
    def segments(self) -> int:
        return self.codes[0].segments

    @property
    def noise_segments(self) -> int:
        return self.codes[0].noise_segments

    @property
    def parties(self) -> int:
        return self.codes[0].parties

    @property
    def segment_length(self) -> int:
        """s = ceil(d / l): features per segment (the last one zero-padded)."""
        return -(-self.dim // self.segments)

    @property
    def min_responders(self) -> int:
        return self.codes[0].min_responders

    @property
    def redundancy(self) -> int:
        """r = m - K: the redundant evaluations when every party responds."""
        return self.parties - self.min_responders

    def tolerance(self, stragglers: int | None = None) -> Tolerance:
        """What this plan tolerates with ``stragglers`` missing (default: the planned S)."""
        return tolerance(self.parties, self.segments, self.noise_segments,
                         self.stragglers if stragglers is None else stragglers)

    @property
    def distance_bound(self) -> int:
        """The largest integer squared distance quantized rows can have."""
        return self.quantizer.distance_bound(self.dim)

    @property
    def headroom_bits(self) -> float:
        """log2(prod(primes) / (distance_bound + 1)): bits to spare before wrap-around."""
        return math.log2(math.prod(self.primes)) - math.log2(self.distance_bound + 1)

    def describe(self) -> dict:
        """The public parameters as plain data (for logs, reports and session configs)."""
        code = self.codes[0]
        return {
            "dim": self.dim,
            "segments": self.segments,
            "noise_segments": self.noise_segments,
            "parties": self.parties,
            "scale_bits": self.quantizer.scale_bits,
            "bound": self.quantizer.bound,
            "nonnegative": self.quantizer.nonnegative,
            "primes": list(self.primes),
            "alphas": list(code.alphas),
            "betas": list(code.betas),
            "distance_bound": self.distance_bound,
            "headroom_bits": round(self.headroom_bits, 3),
            "stragglers": self.stragglers,
            "adversaries": self.adversaries,
            "redundancy": self.redundancy,
        }


def make_plan(dim: int, *, bound: float, scale_bits: int, segments: int = 1,
              noise_segments: int = 1, parties: int, nonnegative: bool = False,
              clip: str = "clip", primes=None, alphas=None, betas=None,
              stragglers: int = 0, adversaries: int = 0) -> CodingPlan:
    """Validate a session's public parameters and choose its primes.

    Parameters
    ----------
    dim : int
        d, the number of features every party has.
    bound, scale_bits, nonnegative, clip
        Quantization (see :class:`Quantizer`).
    segments, noise_segments, parties
        l, t and m (see :class:`LagrangeCode`); 1 <= l <= d and m >= 2l + 2t - 1.
    primes : sequence of int, optional
        Explicit moduli; by default the fewest large primes below 2^31 whose product
        exceeds the largest possible squared distance.
    alphas, betas : sequence of int, optional
        Evaluation points, shared by every prime.
    stragglers, adversaries : int, optional
        S and A to tolerate: S parties may not respond and up to A wrong parties per
        entry are located and corrected; needs m >= 2l+2t-1+S+2A (see
        :func:`parties_needed`). Both 0 by default (any m >= 2l+2t-1).

    Raises
    ------
    ParameterError
        On any parameter that cannot give an exact, private result.
    """
    dim = _positive_int(dim, "dim (d)", 1)
    segments = _positive_int(segments, "segments (l)", 1)
    if segments > dim:
        raise ParameterError(f"segments (l) must be <= d = {dim}, got {segments}")
    stragglers = _count(stragglers, "stragglers (S)")
    adversaries = _count(adversaries, "adversaries (A)")
    needed = parties_needed(segments, noise_segments, stragglers, adversaries)
    if (stragglers or adversaries) and _positive_int(parties, "parties (m)", 1) < needed:
        raise ParameterError(
            f"tolerating {stragglers} stragglers and {adversaries} adversaries needs "
            f"m >= 2l+2t-1+S+2A = {needed} parties; got {parties}")
    quantizer = Quantizer(scale_bits=scale_bits, bound=bound, nonnegative=nonnegative, clip=clip)
    chosen = choose_primes(quantizer.distance_bound(dim) + 1, primes)
    codes = tuple(
        LagrangeCode(segments=segments, noise_segments=noise_segments, parties=parties,
                     prime=p, alphas=None if alphas is None else tuple(alphas),
                     betas=None if betas is None else tuple(betas))
        for p in chosen)
    # Points must be distinct for every prime, and identical integers across primes.
    return CodingPlan(dim=dim, quantizer=quantizer, codes=codes, stragglers=stragglers,
                      adversaries=adversaries)


