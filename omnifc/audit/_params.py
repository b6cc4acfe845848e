"""The public parameters an audit runs on, and the encoding the audit builds from them.

The audit must describe *broken* parameters too (a repeated point, a party point equal to
an interpolation point, too few parties), which :class:`finite_field.LagrangeCode` rightly
refuses to construct. So the audit builds the encoding matrix itself from the points as
given, with exact Python integers, and hands it to the real encoder
(:func:`finite_field.encode_rows`) through a :class:`CodingPlan` whose codes are
``LagrangeCode.unchecked`` (same object, no validation).
"""

from __future__ import annotations

import math
from dataclasses import field, replace

import numpy as np

from finite_field import (CodingPlan, LagrangeCode, ParameterError, Quantizer, choose_primes,
                          lagrange_basis_at, min_parties)
from protocols import PARAMETERS, check_parameters, parameter_fields

__all__ = ["AuditParameters", "encoding_matrix", "audit_plan", "DEMO_DEFAULTS", "AUDIT_FIELDS"]

#: The demo's session (``omnifc demo``: iris over 4 parties): d=4, R=8 (cm, public), q=16,
#: l=1, t=1, m=4, masked.
DEMO_DEFAULTS = dict(dim=4, bound=8.0, scale_bits=16, segments=1, noise_segments=1, parties=4,
                     nonnegative=True, mode="masked", rows=150)

#: The session parameters an audit takes (the rows of the parameter table marked
#: ``audit=True``); :class:`AuditParameters` adds the parties m and the rows n.
AUDIT_FIELDS = tuple(p for p in PARAMETERS if p.audit)


@parameter_fields(AUDIT_FIELDS, defaults=DEMO_DEFAULTS)
class AuditParameters:
    """The session parameters under audit (defaults: the demo's session).

    Its session fields, their defaults (the demo's where it has one) and their checks come
    from the parameter table (:data:`protocols._parameters.PARAMETERS`, the rows with
    ``audit=True``): ``dim``, ``bound``, ``scale_bits``, ``segments``, ``noise_segments``,
    ``nonnegative``, ``primes``, ``mode``, ``integrity``, ``adversaries`` (A; None: the
    default of :func:`finite_field.check_adversaries`; check 9 attacks at exactly A),
    ``alphas`` and ``betas`` (defaults ``a`` and ``l+t+j``). The session's primes are
    chosen from the no-wrap bound like a session would by default.

    Parameters
    ----------
    parties : int
        m.
    rows : int
        n, the total number of rows (for the parameter advice and the simulations).
    transport : dict, optional
        Transport settings read from a session config (see :mod:`._transport`); ``None``
        means no config was given and the defaults are reported as assumed.
    source : str
        Where the parameters came from (for the report).
    rows_assumed : bool
        True when ``rows`` is a default rather than the session's own count (a config does
        not hold the parties' row counts): the report then says so instead of quoting it.
    """

    parties: int = DEMO_DEFAULTS["parties"]
    rows: int = DEMO_DEFAULTS["rows"]
    transport: dict = field(default=None, compare=False, repr=False)
    source: str = "defaults (the demo's session)"
    rows_assumed: bool = field(default=False, compare=False)

    def __post_init__(self) -> None:
        for name in ("dim", "scale_bits", "segments", "noise_segments", "parties", "rows"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
                raise ParameterError(f"{name} must be a non-negative integer, got {value!r}")
        for name in ("dim", "segments", "noise_segments", "parties", "rows"):
            if getattr(self, name) < 1:
                raise ParameterError(f"{name} must be >= 1, got {getattr(self, name)}")
        check_parameters(self, AUDIT_FIELDS)  # the choices; primes and points as tuples

    # -- derived values -------------------------------------------------------------
    @property
    def quantizer(self) -> Quantizer:
        return Quantizer(scale_bits=self.scale_bits, bound=self.bound,
                         nonnegative=self.nonnegative)

    @property
    def degree(self) -> int:
        """D = 2(l+t-1), the degree of g."""
        return 2 * (self.segments + self.noise_segments - 1)

    @property
    def min_parties(self) -> int:
        return min_parties(self.segments, self.noise_segments)

    @property
    def segment_length(self) -> int:
        return -(-self.dim // self.segments)

    def session_primes(self) -> tuple[int, ...]:
        """The primes the session uses (validated; the no-wrap bound is checked)."""
        return choose_primes(self.quantizer.distance_bound(self.dim) + 1, self.primes)

    def raw_points(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(alphas, betas) as integers, before reduction modulo any prime."""
        l, t, m = self.segments, self.noise_segments, self.parties
        alphas = tuple(range(1, l + t + 1)) if self.alphas is None else self.alphas
        betas = tuple(range(l + t + 1, l + t + m + 1)) if self.betas is None else self.betas
        return alphas, betas

    def with_changes(self, **changes) -> "AuditParameters":
        return replace(self, **changes)

    def cli_arguments(self) -> str:
        """The ``omnifc audit`` flags that reproduce these parameters."""
        if self.source.startswith("config "):
            return f"--config {self.source[len('config '):]}"
        parts = [f"--dim {self.dim}", f"--bound {self.bound:g}", f"--scale-bits {self.scale_bits}",
                 f"--segments {self.segments}", f"--noise-segments {self.noise_segments}",
                 f"--parties {self.parties}", f"--mode {self.mode}", f"--rows {self.rows}"]
        if self.integrity != "detect":
            parts.append(f"--integrity {self.integrity}")
        if self.adversaries is not None:
            parts.append(f"--adversaries {self.adversaries}")
        if not self.nonnegative:
            parts.append("--signed")
        if self.primes is not None:
            parts.append("--primes " + ",".join(map(str, self.primes)))
        if self.alphas is not None:
            parts.append("--alphas " + ",".join(map(str, self.alphas)))
        if self.betas is not None:
            parts.append("--betas " + ",".join(map(str, self.betas)))
        return " ".join(parts)

    def python_arguments(self) -> str:
        """The ``AuditParameters(...)`` call that reproduces these parameters."""
        fields = [f.name for f in AUDIT_FIELDS] + ["parties", "rows"]
        parts = [f"{name}={getattr(self, name)!r}" for name in fields
                 if getattr(self, name) != getattr(AuditParameters, name, None)]
        return f"AuditParameters({', '.join(parts)})"

    def describe(self) -> dict:
        alphas, betas = self.raw_points()
        try:
            primes = list(self.session_primes())
        except ParameterError:
            primes = None if self.primes is None else list(self.primes)
        return {"dim": self.dim, "bound": self.bound, "scale_bits": self.scale_bits,
                "nonnegative": self.nonnegative, "segments": self.segments,
                "noise_segments": self.noise_segments, "parties": self.parties,
                "mode": self.mode, "rows": self.rows, "primes": primes,
                "alphas": list(alphas), "betas": list(betas), "source": self.source}

    @classmethod
    def from_config(cls, path, **overrides) -> "AuditParameters":
        """Read the parameters and transport settings of a session config (TOML)."""
        from ._transport import read_session_config

        values, transport = read_session_config(path)
        values.update({k: v for k, v in overrides.items() if v is not None})
        values["rows_assumed"] = overrides.get("rows") is None
        if not values.get("dim"):
            raise ParameterError(f"the session config {path} leaves [parameters] dim = 0 "
                                 "(taken from the data at join); pass the data's d with --dim")
        return cls(**values, transport=transport, source=f"config {path}")


def encoding_matrix(alphas, betas, p: int) -> np.ndarray:
    """U[a, j] = L_a(beta_j) over GF(p), exactly (Python integers).

    Unlike :meth:`finite_field.LagrangeCode.encoding_matrix` it accepts repeated party
    points and party points equal to an interpolation point (the audit must show what
    they do); repeated interpolation points leave the basis undefined and raise.
    """
    alphas = [int(a) % p for a in alphas]
    betas = [int(b) % p for b in betas]
    if len(set(alphas)) != len(alphas):
        raise ParameterError(
            f"interpolation points must be distinct modulo {p}; got {alphas}: the Lagrange "
            "basis is undefined")
    columns = [lagrange_basis_at(alphas, x, p) for x in betas]
    return np.array(columns, dtype=np.int64).T.copy()


def audit_plan(params: AuditParameters, primes=None) -> CodingPlan:
    """A :class:`CodingPlan` for the real encoder built from the points as given.

    ``primes`` overrides the session primes (the statistical tests use a small prime so
    that every field element can be its own histogram cell).
    """
    primes = params.session_primes() if primes is None else tuple(primes)
    alphas, betas = params.raw_points()
    codes = tuple(LagrangeCode.unchecked(params.segments, params.noise_segments, params.parties,
                                         int(p), alphas, betas) for p in primes)
    return CodingPlan(dim=params.dim, quantizer=params.quantizer, codes=codes)


def smallest_prime_above(value: int) -> int:
    """The smallest prime strictly greater than ``value``."""
    candidate = max(int(value) + 1, 2)
    while any(candidate % k == 0 for k in range(2, math.isqrt(candidate) + 1)):
        candidate += 1
    return candidate
