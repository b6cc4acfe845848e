"""The TOML session config every party and the coordinator share.

One file describes a session: its id, the coordinator's address, the public parameters
(d, l, t, q, R, primes), the aggregation mode, the clustering request, a deadline for every
wait, the TLS files, and every party with its *pinned* Ed25519 identity key and TLS
certificate fingerprint. ``omnifc certs`` writes a ready-to-use one.

Reading uses :mod:`tomllib`; writing uses a small emitter for this fixed schema (no extra
dependency). Every value is validated with an error that names the key and the bad value.
Relative paths are resolved against the config file's folder.

Examples
--------
>>> import os, tempfile
>>> from protocols import (PartyEntry, SessionConfig, TLSSettings, dump_session_config,
...                        load_session_config)
>>> parties = tuple(PartyEntry(name, bytes([i]) * 32) for i, name in enumerate("abc"))
>>> config = SessionConfig(session_id="00" * 16, coordinator="127.0.0.1:50051",
...                        parties=parties, tls=TLSSettings(enabled=False))
>>> path = os.path.join(tempfile.mkdtemp(), "session.toml")
>>> _ = dump_session_config(config, path)
>>> load_session_config(path) == config      # logs a warning: TLS is disabled
True
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import re
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple, Optional

try:  # Python 3.11+
    import tomllib
except ModuleNotFoundError:  # pragma: no cover - Python 3.10 (setup.cfg installs tomli)
    import tomli as tomllib

from finite_field import ParameterError, min_parties

from ._crypto import PROTOCOL_VERSION  # the wire-protocol version: one source of truth
from ._fingerprint import card_fingerprint, readable_fingerprint, refuse_old_format
from ._mask_graph import check_distance_mask_degree

__all__ = ["SessionConfig", "ConfigParameters", "ClusteringRequest", "Deadlines",
           "TLSSettings", "PartyEntry", "TLSFiles", "load_session_config",
           "dump_session_config", "format_session_config", "new_session_id",
           "validate_party_name", "split_address", "PROTOCOL_VERSION", "MODES", "INTEGRITY",
           "session_fingerprint", "canonical_session", "MAX_DIM", "MAX_ROWS",
           "MAX_DEADLINE_SECONDS"]

logger = logging.getLogger("omnifc.config")

#: Aggregation modes (the same as protocols._messages.MODES): "masked" (default; the
#: coordinator learns only D) and "transparent" (opt-in; the coordinator sees every
#: per-party evaluation, i.e. per-segment distances).
MODES = ("masked", "transparent")

#: Integrity policies (the same as protocols._messages.INTEGRITY): Reed-Solomon checks on
#: the uploads when there are redundant responders; "detect" (default) excludes the
#: parties at fault and reruns or aborts, "correct" corrects and names them, "off" skips
#: the checks.
INTEGRITY = ("detect", "correct", "off")

#: Largest d a session config accepts (2^20 features; an image of 224 x 224 x 3 has 150528).
MAX_DIM = 2**20
#: Largest row cap a session config accepts (D alone would have 10^14 entries).
MAX_ROWS = 10_000_000
#: Longest deadline a session config accepts, in seconds (7 days).
MAX_DEADLINE_SECONDS = 7 * 24 * 3600

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_METHOD = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")
_SESSION_ID = re.compile(r"[0-9a-f]{32,64}")


def _show(value) -> str:
    """repr of a value for an error message, shortened."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def validate_party_name(name, *, what: str = "party name") -> str:
    """Check a party (or coordinator) name: 1-64 characters of [A-Za-z0-9_.-], starting
    with a letter or digit. Names become certificate common names and file names.

    >>> from protocols import validate_party_name
    >>> validate_party_name("hospital-1")
    'hospital-1'
    """
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ParameterError(
            f"{what} must be 1-64 characters from [A-Za-z0-9_.-] starting with a letter or "
            f"digit, got {_show(name)}")
    return name


def split_address(address) -> tuple[str, int]:
    """Split ``"host:port"`` (or ``"[v6]:port"``) into host and port; port 0 means
    'any free port' and is only useful to the side that binds.

    >>> from protocols._config import split_address
    >>> split_address("[::1]:50051")
    ('::1', 50051)
    """
    if not isinstance(address, str):
        raise ParameterError(f"[session] coordinator must be a 'host:port' string, "
                             f"got {_show(address)}")
    match = re.fullmatch(r"\[([0-9A-Fa-f:.]+)\]:(\d{1,5})|([^\s:\[\]]+):(\d{1,5})", address)
    if not match:
        raise ParameterError(f"[session] coordinator must look like 'host:port' or "
                             f"'[ipv6]:port', got {_show(address)}")
    host = match.group(1) or match.group(3)
    port = int(match.group(2) or match.group(4))
    if port > 65535:
        raise ParameterError(f"[session] coordinator port must be in [0, 65535], got {port}")
    return host, port


def new_session_id() -> str:
    """A fresh random 128-bit session id (32 hex characters) from the OS CSPRNG."""
    return secrets.token_hex(16)


# --- typed field checks --------------------------------------------------------------

def _int(value, key: str, minimum: int | None = None, maximum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ParameterError(f"{key} must be an integer, got {_show(value)}")
    if minimum is not None and value < minimum:
        raise ParameterError(f"{key} must be >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ParameterError(f"{key} must be <= {maximum}, got {value}")
    return int(value)


def _positive_number(value, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not math.isfinite(value) or value <= 0:
        raise ParameterError(f"{key} must be a finite number > 0, got {_show(value)}")
    return float(value)


def _bool(value, key: str) -> bool:
    if not isinstance(value, bool):
        raise ParameterError(f"{key} must be true or false, got {_show(value)}")
    return value


def _hex_bytes(value, key: str, length: int) -> bytes:
    if isinstance(value, (bytes, bytearray)):
        raw = bytes(value)
    elif isinstance(value, str) and re.fullmatch(r"[0-9A-Fa-f]*", value) and len(value) % 2 == 0:
        raw = bytes.fromhex(value)
    else:
        raise ParameterError(f"{key} must be {2 * length} hex characters, got {_show(value)}")
    if len(raw) != length:
        raise ParameterError(f"{key} must be {2 * length} hex characters ({length} bytes), "
                             f"got {2 * len(raw)}")
    return raw


def _path(value, key: str) -> Optional[Path]:
    if value is None:
        return None
    if isinstance(value, (str, os.PathLike)) and str(value):
        return Path(os.path.normpath(value))
    raise ParameterError(f"{key} must be a non-empty path string, got {_show(value)}")


# --- the schema ----------------------------------------------------------------------

@dataclass(frozen=True)
class ConfigParameters:
    """Public arithmetic parameters (the ``[parameters]`` table).

    Attributes
    ----------
    dim : int
        d. 0 means 'taken from the data at join'; every party must then send the same d.
    segments, noise_segments : int
        l and t (m >= 2l + 2t - 1 parties are needed).
    scale_bits : int
        q: values are quantized to multiples of 2^-q.
    bound : float
        R, the public clip bound.
    nonnegative : bool
        All features in [0, R] (a fourfold smaller no-wrap bound).
    primes : tuple of int
        Explicit moduli; empty to choose them automatically.
    max_rows_per_party, max_rows_total : int
        Public row caps: the coordinator and every party refuse a hello announcing more
        rows than ``max_rows_per_party``, or a roster with more than ``max_rows_total``
        rows in all, before allocating anything for them.
    mask_degree : int
        Pairwise-mask partners of each responder: 0 (default) every other responder; k
        (noise_segments + 1 <= k <= m - 1) its neighbours in a k-connected Harary graph
        over the responding set, so the masks withstand the coordinator colluding with up
        to k - 1 parties (docs/protocol.md, "Mask graph"). 1 <= k <= noise_segments is
        refused at load: the coordinator can leave r = 0, and then the masks alone must
        withstand the t colluders the shares withstand.

    The quantizer and the no-wrap bound are checked here, at load: ``bound * 2^scale_bits``
    must be below 2^53 (exact quantization) and the largest squared distance of d
    quantized features (4·d·M², M = round(2^q·R); d·M² when nonnegative) must fit in 63
    bits (with ``dim = 0``, at least d = 1 must fit). d is capped at :data:`MAX_DIM`.
    """

    dim: int = 0
    segments: int = 1
    noise_segments: int = 1
    scale_bits: int = 16
    bound: float = 8.0
    nonnegative: bool = False
    primes: tuple = ()
    max_rows_per_party: int = 1_000_000
    max_rows_total: int = 2_000_000
    mask_degree: int = 0

    def __post_init__(self):
        from finite_field import Quantizer, choose_primes, validate_prime

        _int(self.dim, "[parameters] dim", 0, MAX_DIM)
        _int(self.max_rows_per_party, "[parameters] max_rows_per_party", 1, MAX_ROWS)
        _int(self.max_rows_total, "[parameters] max_rows_total", 1, MAX_ROWS)
        if self.max_rows_per_party > self.max_rows_total:
            raise ParameterError(
                f"[parameters] max_rows_per_party ({self.max_rows_per_party}) must be <= "
                f"max_rows_total ({self.max_rows_total})")
        _int(self.segments, "[parameters] segments", 1)
        _int(self.mask_degree, "[parameters] mask_degree (0 = every pair masks)", 0,
             (1 << 20) - 1)  # as SessionParameters
        _int(self.noise_segments, "[parameters] noise_segments", 1)
        check_distance_mask_degree(self.mask_degree, self.noise_segments,
                                   name="[parameters] mask_degree")
        _int(self.scale_bits, "[parameters] scale_bits", 0, 30)
        object.__setattr__(self, "bound", _positive_number(self.bound, "[parameters] bound"))
        _bool(self.nonnegative, "[parameters] nonnegative")
        if self.dim and self.segments > self.dim:
            raise ParameterError(f"[parameters] segments must be <= dim = {self.dim}, "
                                 f"got {self.segments}")
        if isinstance(self.primes, (str, bytes)) or not hasattr(self.primes, "__iter__"):
            raise ParameterError(f"[parameters] primes must be a list of integers, "
                                 f"got {_show(self.primes)}")
        primes = tuple(self.primes)
        for p in primes:
            _int(p, "[parameters] primes entries")
            validate_prime(p, what="[parameters] primes entry")
        if len(set(primes)) != len(primes):
            raise ParameterError(f"[parameters] primes must be distinct, got {list(primes)}")
        object.__setattr__(self, "primes", primes)
        try:
            quantizer = Quantizer(scale_bits=self.scale_bits, bound=self.bound,
                                  nonnegative=self.nonnegative)
            # Raises when even the largest distance of d (or 1) features cannot be exact.
            choose_primes(quantizer.distance_bound(self.dim or 1) + 1, primes or None)
        except ParameterError as error:
            raise ParameterError(f"[parameters] bound = {self.bound!r}, scale_bits = "
                                 f"{self.scale_bits}, dim = {self.dim}: {error}") from None

    def make_plan(self, parties: int, dim: int | None = None):
        """The :class:`finite_field.CodingPlan` of these parameters for ``parties`` parties.

        ``dim`` is the d observed in the data; it must equal ``self.dim`` when that is set.
        """
        from finite_field import make_plan

        if dim is None:
            dim = self.dim
        elif self.dim and dim != self.dim:
            raise ParameterError(f"the session config fixes d = {self.dim}, the data has "
                                 f"d = {dim}")
        if not dim:
            raise ParameterError("d is not known yet: [parameters] dim is 0 and no data "
                                 "dimension was given")
        return make_plan(dim, bound=self.bound, scale_bits=self.scale_bits,
                         segments=self.segments, noise_segments=self.noise_segments,
                         parties=parties, nonnegative=self.nonnegative,
                         primes=list(self.primes) or None)


@dataclass(frozen=True)
class ClusteringRequest:
    """What the coordinator runs on D (the ``[clustering]`` table).

    ``n_clusters`` may be None (absent in TOML) for methods that choose it themselves.
    The method name is checked by the clustering layer, not here.
    """

    method: str = "kmeans"
    n_clusters: Optional[int] = 3

    def __post_init__(self):
        if not isinstance(self.method, str) or not _METHOD.fullmatch(self.method):
            raise ParameterError(f"[clustering] method must be a name like 'kmeans', "
                                 f"got {_show(self.method)}")
        if self.n_clusters is not None:
            _int(self.n_clusters, "[clustering] n_clusters", 1)


@dataclass(frozen=True)
class Deadlines:
    """Seconds allowed for each wait (the ``[deadlines]`` table); every wait has one."""

    join: float = 60.0
    shares: float = 120.0
    evaluation: float = 300.0
    result: float = 60.0

    def __post_init__(self):
        for f in dataclasses.fields(self):
            value = _positive_number(getattr(self, f.name), f"[deadlines] {f.name} (seconds)")
            if value > MAX_DEADLINE_SECONDS:
                raise ParameterError(f"[deadlines] {f.name} must be <= "
                                     f"{MAX_DEADLINE_SECONDS} seconds (7 days), got {value!r}")
            object.__setattr__(self, f.name, value)


class TLSFiles(NamedTuple):
    """Certificate, private key and CA certificate paths of one endpoint.

    Unpacks into :func:`protocols.server_credentials` / :func:`protocols.channel_credentials`.
    """

    cert: Path
    key: Path
    ca: Path


def _certificate(value, where: str, expected_name: Optional[str] = None):
    """Parse an embedded PEM certificate; returns (normalized PEM text, DER, common name)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization
    from cryptography.x509.oid import NameOID

    if not isinstance(value, str) or "-----BEGIN CERTIFICATE-----" not in value:
        raise ParameterError(f"{where} must be a PEM certificate (text starting with "
                             f"-----BEGIN CERTIFICATE-----), got {_show(value)}")
    if value.count("-----BEGIN") != 1:
        raise ParameterError(f"{where} must hold exactly one PEM certificate")
    try:
        cert = x509.load_pem_x509_certificate(value.encode("ascii"))
    except (ValueError, UnicodeEncodeError):
        raise ParameterError(f"{where} is not a valid PEM X.509 certificate") from None
    names = [a.value for a in cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)]
    if len(names) != 1:
        raise ParameterError(f"{where}: the certificate must have one common name, "
                             f"has {names}")
    if expected_name is not None and names[0] != expected_name:
        raise ParameterError(f"{where}: the certificate names {names[0]!r}, expected "
                             f"{expected_name!r}")
    pem = cert.public_bytes(serialization.Encoding.PEM).decode("ascii")
    return pem, cert.public_bytes(serialization.Encoding.DER), names[0]


def _check_fingerprint(value, computed: str, where: str) -> Optional[str]:
    if value is None:
        return computed
    refuse_old_format(value, where.rstrip(":"),
                      "re-run 'omnifc session new' on the cards (old cards: their owners "
                      "re-run 'omnifc keygen') or 'omnifc certs'")
    if value != computed:
        raise ParameterError(f"{where} fingerprint is {_show(value)} but the certificate and "
                             f"keys written with it give {computed!r}: the entry was edited "
                             "or mixed up")
    return computed


@dataclass(frozen=True)
class TLSSettings:
    """The ``[tls]`` table. ``enabled=False`` is allowed but logged as a warning on load.

    Attributes
    ----------
    enabled : bool
    coordinator_certificate : str or None
        The coordinator's self-signed certificate (PEM), from its card: the one
        certificate parties trust. Written by ``omnifc session new`` / ``omnifc certs``.
    coordinator_fingerprint : str or None
        The coordinator's card fingerprint (checked against the certificate at load).
    ca, coordinator_cert, coordinator_key : Path or None
        Files: a CA certificate (older configs, instead of embedded certificates), the
        coordinator's certificate file (older configs) and private key (only the
        coordinator needs it; ``serve --keys DIR`` supplies it otherwise).
    """

    enabled: bool = True
    ca: Optional[Path] = None
    coordinator_cert: Optional[Path] = None
    coordinator_key: Optional[Path] = None
    coordinator_certificate: Optional[str] = None
    coordinator_fingerprint: Optional[str] = None

    def __post_init__(self):
        _bool(self.enabled, "[tls] enabled")
        for name in ("ca", "coordinator_cert", "coordinator_key"):
            object.__setattr__(self, name, _path(getattr(self, name), f"[tls] {name}"))
        if self.coordinator_certificate is not None:
            pem, der, cn = _certificate(self.coordinator_certificate,
                                        "[tls] coordinator_certificate")
            object.__setattr__(self, "coordinator_certificate", pem)
            object.__setattr__(self, "coordinator_fingerprint", _check_fingerprint(
                self.coordinator_fingerprint, card_fingerprint("coordinator", cn, None, der),
                "[tls] coordinator"))
        elif self.coordinator_fingerprint is not None:
            raise ParameterError("[tls] coordinator_fingerprint needs coordinator_certificate")
        if self.enabled and self.coordinator_certificate is None:
            for name in ("ca", "coordinator_cert"):
                if getattr(self, name) is None:
                    raise ParameterError(
                        f"[tls] {name} is required when TLS is enabled and no "
                        "coordinator_certificate is given (build the config with 'omnifc "
                        "session new', or set enabled = false to run without TLS, insecurely)")

    @property
    def coordinator_name(self) -> Optional[str]:
        """The common name of the embedded coordinator certificate (None without one)."""
        if self.coordinator_certificate is None:
            return None
        return _certificate(self.coordinator_certificate, "[tls] coordinator_certificate")[2]


@dataclass(frozen=True)
class PartyEntry:
    """One ``[[parties]]`` entry.

    Attributes
    ----------
    name : str
        The party id; also the common name of its TLS certificate.
    identity_public_key : bytes
        The pinned raw Ed25519 public key (32 bytes; hex in TOML, hex accepted here).
    certificate_sha256 : bytes or None
        SHA-256 of the DER of the party's TLS certificate (pinned; None: CA trust only).
    cert, key, identity_key : Path or None
        The party's own files; only the party itself needs them (``join --keys DIR``
        supplies the keys otherwise).
    certificate : str or None
        The party's self-signed TLS certificate (PEM) from its card; the coordinator
        trusts exactly these. Its SHA-256 must equal ``certificate_sha256``.
    fingerprint : str or None
        The party's card fingerprint (checked against the key and certificate at load).
    """

    name: str
    identity_public_key: bytes
    certificate_sha256: Optional[bytes] = None
    cert: Optional[Path] = None
    key: Optional[Path] = None
    identity_key: Optional[Path] = None
    certificate: Optional[str] = None
    fingerprint: Optional[str] = None

    def __post_init__(self):
        import hashlib

        validate_party_name(self.name, what="[[parties]] name")
        where = f"[[parties]] {self.name!r}:"
        object.__setattr__(self, "identity_public_key", _hex_bytes(
            self.identity_public_key, f"{where} identity_public_key", 32))
        if self.certificate_sha256 is not None:
            object.__setattr__(self, "certificate_sha256", _hex_bytes(
                self.certificate_sha256, f"{where} certificate_sha256", 32))
        for name in ("cert", "key", "identity_key"):
            object.__setattr__(self, name, _path(getattr(self, name), f"{where} {name}"))
        if self.certificate is not None:
            pem, der, _ = _certificate(self.certificate, f"{where} certificate", self.name)
            object.__setattr__(self, "certificate", pem)
            digest = hashlib.sha256(der).digest()
            if self.certificate_sha256 is None:
                object.__setattr__(self, "certificate_sha256", digest)
            elif self.certificate_sha256 != digest:
                raise ParameterError(f"{where} certificate_sha256 does not match the SHA-256 "
                                     "of the embedded certificate")
            object.__setattr__(self, "fingerprint", _check_fingerprint(
                self.fingerprint, card_fingerprint("party", self.name,
                                                   self.identity_public_key, der), where))
        elif self.fingerprint is not None:
            raise ParameterError(f"{where} fingerprint needs the embedded certificate")


@dataclass(frozen=True)
class SessionConfig:
    """A whole session config (see the module docstring and docs/deployment.md).

    Build one with :func:`load_session_config`, ``omnifc certs`` /
    :func:`protocols.generate_certificates`, or directly; every field is validated on
    construction, also by :meth:`with_`.
    """

    session_id: str
    coordinator: str
    parties: tuple
    mode: str = "masked"
    protocol_version: int = PROTOCOL_VERSION
    integrity: str = "detect"
    #: A, the most parties that may deviate together; None: the strongest default (see
    #: :func:`finite_field.check_adversaries`), checked on construction; the resolved
    #: value (:attr:`adversary_bound`) is what the fingerprint covers and files state.
    adversaries: Optional[int] = None
    parameters: ConfigParameters = field(default_factory=ConfigParameters)
    clustering: ClusteringRequest = field(default_factory=ClusteringRequest)
    deadlines: Deadlines = field(default_factory=Deadlines)
    tls: TLSSettings = field(default_factory=TLSSettings)
    #: The file this config was loaded from (not part of equality).
    path: Optional[Path] = field(default=None, compare=False)

    def __post_init__(self):
        if not isinstance(self.session_id, str) or not _SESSION_ID.fullmatch(self.session_id):
            raise ParameterError(f"[session] id must be 32 to 64 lowercase hex characters "
                                 f"(a random 128-bit id), got {_show(self.session_id)}")
        split_address(self.coordinator)
        if self.mode not in MODES:
            raise ParameterError(f"[session] mode must be one of {list(MODES)}, "
                                 f"got {_show(self.mode)}")
        if self.integrity not in INTEGRITY:
            raise ParameterError(f"[session] integrity must be one of {list(INTEGRITY)}, "
                                 f"got {_show(self.integrity)}")
        _int(self.protocol_version, "[session] protocol_version")
        if self.protocol_version != PROTOCOL_VERSION:
            raise ParameterError(f"[session] protocol_version {self.protocol_version} is not "
                                 f"supported; this omnifc speaks version {PROTOCOL_VERSION}")
        for name, kind in (("parameters", ConfigParameters), ("clustering", ClusteringRequest),
                           ("deadlines", Deadlines), ("tls", TLSSettings)):
            if not isinstance(getattr(self, name), kind):
                raise ParameterError(f"{name} must be a {kind.__name__}, "
                                     f"got {type(getattr(self, name)).__name__}")
        if isinstance(self.parties, (str, bytes)) or not hasattr(self.parties, "__iter__"):
            raise ParameterError(f"parties must be a sequence of PartyEntry, "
                                 f"got {_show(self.parties)}")
        parties = tuple(self.parties)
        object.__setattr__(self, "parties", parties)
        if not all(isinstance(p, PartyEntry) for p in parties):
            raise ParameterError("parties must be PartyEntry objects")
        self._check_roster(parties)
        if self.tls.enabled and self.tls.ca is None:
            missing = [p.name for p in parties if p.certificate is None]
            if missing:
                raise ParameterError(
                    f"[[parties]] {', '.join(repr(n) for n in missing)}: no certificate "
                    "(from the party's card) and no [tls] ca to trust instead")
        if self.tls.enabled and self.tls.ca is not None and \
                self.tls.coordinator_certificate is not None and \
                all(p.certificate is not None for p in parties):
            raise ParameterError(
                f"[tls] ca = {str(self.tls.ca)!r} is ignored: the coordinator certificate "
                "and every party's certificate are embedded, and TLS trusts exactly those; "
                "remove [tls] ca (it would be a trust setting nobody reads)")
        if self.tls.coordinator_name is not None and \
                self.tls.coordinator_name in self.party_names:
            raise ParameterError(f"the coordinator's certificate names "
                                 f"{self.tls.coordinator_name!r}, which is also a party")
        try:  # every parameter that can be checked before the data is seen, at load
            self.parameters.make_plan(len(parties), self.parameters.dim or 1)
        except ParameterError as error:
            raise ParameterError(f"[parameters]: {error}") from None
        from finite_field import check_adversaries
        try:  # A against the redundancy of m parties (every party responding)
            check_adversaries(len(parties), self.parameters.segments,
                              self.parameters.noise_segments, self.adversaries, self.integrity)
        except ParameterError as error:
            raise ParameterError(f"[session] adversaries: {error}") from None
        if self.parameters.mask_degree > len(parties) - 1:
            raise ParameterError(f"[parameters] mask_degree must be at most m - 1 = "
                                 f"{len(parties) - 1} (the other parties), got "
                                 f"{self.parameters.mask_degree}")
        if self.path is not None:
            object.__setattr__(self, "path", Path(self.path))

    @property
    def adversary_bound(self) -> int:
        """A as the session will use it: the declared value, or the default for m parties."""
        from finite_field import check_adversaries
        return check_adversaries(len(self.parties), self.parameters.segments,
                                 self.parameters.noise_segments, self.adversaries,
                                 self.integrity)

    def _check_roster(self, parties):
        seen: dict = {}
        for attribute, label in (("name", "name"), ("identity_public_key", "identity key"),
                                 ("certificate_sha256", "certificate")):
            seen.clear()
            for p in parties:
                value = getattr(p, attribute)
                if value is None:
                    continue
                if value in seen:
                    what = (f"duplicate party {p.name!r}" if attribute == "name" else
                            f"parties {seen[value]!r} and {p.name!r} pin the same {label}")
                    raise ParameterError(f"[[parties]]: {what}")
                seen[value] = p.name
        needed = min_parties(self.parameters.segments, self.parameters.noise_segments)
        if len(parties) < needed:
            raise ParameterError(
                f"[[parties]] lists {len(parties)} part{'y' if len(parties) == 1 else 'ies'}; "
                f"segments={self.parameters.segments} and noise_segments="
                f"{self.parameters.noise_segments} need at least 2l+2t-1 = {needed}")

    # --- convenience -------------------------------------------------------------------

    @property
    def insecure(self) -> bool:
        """True when TLS is disabled (allowed, never the default)."""
        return not self.tls.enabled

    @property
    def party_names(self) -> tuple:
        return tuple(p.name for p in self.parties)

    def party(self, name: str) -> PartyEntry:
        """The entry of party ``name``; ParameterError naming the known parties otherwise."""
        for p in self.parties:
            if p.name == name:
                return p
        raise ParameterError(f"unknown party {name!r}; the session config lists "
                             f"{', '.join(repr(n) for n in self.party_names)}")

    def coordinator_tls(self) -> TLSFiles:
        """The coordinator's (cert, key, trusted client certificates) for
        :func:`protocols.server_credentials`.

        With certificates from cards, ``cert`` is the embedded PEM (bytes) and ``ca`` the
        parties' pinned certificates concatenated (bytes): the coordinator trusts exactly
        those. Older configs give paths (and a CA file).
        """
        self._require_tls()
        cert = (self.tls.coordinator_certificate.encode("ascii")
                if self.tls.coordinator_certificate is not None else self.tls.coordinator_cert)
        if self.tls.coordinator_key is None:
            raise ParameterError(
                "the session config gives no private key file for the coordinator: pass "
                "--keys DIR (the folder 'omnifc keygen --coordinator' wrote) or set [tls] "
                "coordinator_key")
        if all(p.certificate is not None for p in self.parties):
            trusted = "".join(p.certificate for p in self.parties).encode("ascii")
        else:
            trusted = self.tls.ca
        return TLSFiles(cert, self.tls.coordinator_key, trusted)

    def party_tls(self, name: str) -> TLSFiles:
        """Party ``name``'s (cert, key, trusted coordinator certificate) for
        :func:`protocols.channel_credentials`; PEM bytes where the config embeds them."""
        self._require_tls()
        entry = self.party(name)
        cert = entry.certificate.encode("ascii") if entry.certificate is not None \
            else entry.cert
        if cert is None or entry.key is None:
            raise ParameterError(
                f"the session config gives no {'TLS certificate' if cert is None else 'private key'} "
                f"file for party {name!r}: pass --keys DIR (the folder 'omnifc keygen "
                f"--party {name}' wrote)")
        trusted = (self.tls.coordinator_certificate.encode("ascii")
                   if self.tls.coordinator_certificate is not None else self.tls.ca)
        return TLSFiles(cert, entry.key, trusted)

    def _require_tls(self):
        if not self.tls.enabled:
            raise ParameterError("TLS is disabled in this session config ([tls] enabled = "
                                 "false); there are no TLS files")

    def with_keys(self, name: str, folder) -> "SessionConfig":
        """A copy that takes ``name``'s private key files from ``folder`` (what ``serve
        --keys`` and ``join --keys`` do).

        ``folder`` is what ``omnifc keygen`` wrote: ``<name>.key`` (TLS) and, for a party,
        ``<name>.identity.pem``. ``name`` is a party, or the coordinator (the common name
        of its certificate).

        >>> import tempfile
        >>> from pathlib import Path
        >>> from protocols import PartyEntry, SessionConfig, TLSSettings
        >>> parties = tuple(PartyEntry(n, bytes([i]) * 32) for i, n in enumerate("abc"))
        >>> c = SessionConfig("ab" * 16, "127.0.0.1:0", parties, tls=TLSSettings(enabled=False))
        >>> keys = tempfile.mkdtemp()
        >>> c.with_keys("b", keys).party("b").identity_key == Path(keys) / "b.identity.pem"
        True
        """
        folder = Path(os.path.normpath(Path(folder).absolute()))
        if not folder.is_dir():
            raise ParameterError(f"the keys folder {str(folder)!r} does not exist")
        if name in self.party_names:
            parties = tuple(dataclasses.replace(p, key=folder / f"{name}.key",
                                                identity_key=folder / f"{name}.identity.pem")
                            if p.name == name else p for p in self.parties)
            return self.with_(parties=parties)
        coordinator = self.tls.coordinator_name
        if coordinator is not None and name == coordinator:
            return self.with_(tls=dataclasses.replace(self.tls,
                                                      coordinator_key=folder / f"{name}.key"))
        raise ParameterError(
            f"{name!r} is neither a party of this session ({', '.join(self.party_names)}) nor "
            f"its coordinator ({coordinator!r})")

    @property
    def fingerprint(self) -> str:
        """The session fingerprint: :func:`session_fingerprint` of this config."""
        return session_fingerprint(self)

    def with_(self, **changes) -> "SessionConfig":
        """A copy with some fields replaced (validated again).

        >>> from protocols import PartyEntry, SessionConfig, TLSSettings
        >>> parties = tuple(PartyEntry(n, bytes([i]) * 32) for i, n in enumerate("abc"))
        >>> c = SessionConfig("ab" * 16, "127.0.0.1:0", parties, tls=TLSSettings(enabled=False))
        >>> c.with_(coordinator="127.0.0.1:4242").coordinator
        '127.0.0.1:4242'
        """
        return dataclasses.replace(self, **changes)


# --- the session fingerprint ------------------------------------------------------------

def canonical_session(config: SessionConfig) -> dict:
    """The meaning of a session config as plain data: what :func:`session_fingerprint`
    hashes.

    Everything every participant must agree on is in it: session id, protocol version,
    coordinator address, mode, every parameter (row caps included), the clustering
    request, every deadline, whether TLS is on, the SHA-256 of every trust root and pinned
    certificate (the embedded coordinator certificate or the coordinator certificate file,
    the ``ca`` file whenever TLS uses it: in older configs, and in mixed ones where some
    party has no embedded certificate and the coordinator trusts the CA for it) and every
    party in roster order with its identity key and certificate pin. A file's
    certificates are hashed each (one: a hex string; several, as in a CA bundle gRPC
    trusts all of: a list in file order). Local file paths (where each organization keeps
    its own private keys) are not: they differ between copies and do not change what the
    session does.
    """
    import hashlib

    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    def der_sha256(data: bytes):
        try:  # every certificate of a PEM file: TLS trusts each one of a bundle
            certs = x509.load_pem_x509_certificates(data) if b"-----BEGIN" in data \
                else [x509.load_der_x509_certificate(data)]
        except ValueError:
            raise ParameterError("not a PEM or DER certificate") from None
        digests = [hashlib.sha256(c.public_bytes(serialization.Encoding.DER)).hexdigest()
                   for c in certs]
        return digests[0] if len(digests) == 1 else digests

    p, t = config.parameters, config.tls
    tls: dict = {"enabled": t.enabled}
    files: tuple = ()
    if t.coordinator_certificate is not None:
        tls["coordinator_certificate_sha256"] = der_sha256(
            t.coordinator_certificate.encode("ascii"))
        if t.enabled and t.ca is not None:  # mixed: the coordinator trusts the CA for the
            files = ("ca",)                 # parties without embedded certificates
    elif t.enabled:  # older configs: the trust anchors are files
        files = ("ca", "coordinator_cert")
    for key in files:
        try:
            tls[f"{key}_sha256"] = der_sha256(Path(getattr(t, key)).read_bytes())
        except (OSError, ParameterError):
            raise ParameterError(
                f"the session fingerprint covers the [tls] {key} certificate, which "
                f"cannot be read from {str(getattr(t, key))!r}") from None
    return {
        "format": "omnifc-session-config-v1",
        "session": {"id": config.session_id, "protocol_version": config.protocol_version,
                    "coordinator": config.coordinator, "mode": config.mode,
                    "integrity": config.integrity, "adversaries": config.adversary_bound},
        # mask_degree = 0 (every pair masks, as before the key existed) is left out, so the
        # fingerprints of older configs do not change.
        "parameters": {f.name: list(getattr(p, f.name)) if f.name == "primes"
                       else getattr(p, f.name) for f in dataclasses.fields(p)
                       if not (f.name == "mask_degree" and p.mask_degree == 0)},
        "clustering": {"method": config.clustering.method,
                       "n_clusters": config.clustering.n_clusters},
        "deadlines": dataclasses.asdict(config.deadlines),
        "tls": tls,
        "parties": [{"name": e.name, "identity_public_key": e.identity_public_key.hex(),
                     "certificate_sha256": None if e.certificate_sha256 is None
                     else e.certificate_sha256.hex()} for e in config.parties],
    }


def session_fingerprint(config: SessionConfig) -> str:
    """A fingerprint of the whole session config that people read aloud and compare.

    SHA-256 of the canonical JSON (sorted keys, no spaces, UTF-8) of
    :func:`canonical_session`, in the readable format of :mod:`protocols._fingerprint`
    (160 bits: eight groups of four base32 characters). Two configs have the same
    fingerprint exactly when they describe the same session, whatever their comments, key
    order, number formatting or local key paths.

    >>> from protocols import PartyEntry, SessionConfig, TLSSettings, session_fingerprint
    >>> parties = tuple(PartyEntry(n, bytes([i]) * 32) for i, n in enumerate("abc"))
    >>> c = SessionConfig("ab" * 16, "127.0.0.1:50051", parties, tls=TLSSettings(enabled=False))
    >>> session_fingerprint(c) == session_fingerprint(c.with_keys("a", "/"))
    True
    >>> session_fingerprint(c) == session_fingerprint(c.with_(coordinator="127.0.0.1:50052"))
    False
    """
    import json

    text = json.dumps(canonical_session(config), sort_keys=True, separators=(",", ":"),
                      ensure_ascii=False, allow_nan=False)
    return readable_fingerprint(text.encode("utf-8"), domain="session")


# --- reading ---------------------------------------------------------------------------

_TABLES = {"session", "parameters", "clustering", "deadlines", "tls", "parties"}


def _table(data: dict, name: str, required: bool) -> dict:
    if name not in data:
        if required:
            raise ParameterError(f"the [{name}] table is missing")
        return {}
    value = data[name]
    if not isinstance(value, dict):
        raise ParameterError(f"[{name}] must be a table, got {_show(value)}")
    return value


def _known(table: dict, where: str, allowed) -> None:
    unknown = sorted(set(table) - set(allowed))
    if unknown:
        raise ParameterError(f"{where}: unknown key{'s' if len(unknown) > 1 else ''} "
                             f"{', '.join(unknown)} (allowed: {', '.join(sorted(allowed))})")


def _resolve(value, key: str, base: Path) -> Optional[Path]:
    path = _path(value, key)
    if path is None:
        return None
    return path if path.is_absolute() else Path(os.path.normpath(base / path))


def _fields(kind) -> list:
    return [f.name for f in dataclasses.fields(kind)]


def session_config_from_dict(data: dict, base_dir, *, path=None) -> SessionConfig:
    """Build a :class:`SessionConfig` from parsed TOML, resolving paths against
    ``base_dir``."""
    base = Path(base_dir)
    _known(data, "top level", _TABLES)
    session = _table(data, "session", True)
    _known(session, "[session]", ("id", "protocol_version", "coordinator", "mode",
                                  "integrity", "adversaries"))
    for key in ("id", "coordinator"):
        if key not in session:
            raise ParameterError(f"[session] {key} is missing")

    parameters = _table(data, "parameters", True)
    _known(parameters, "[parameters]", _fields(ConfigParameters))
    if "dim" not in parameters:
        raise ParameterError("[parameters] dim is missing (0 means 'taken from the data')")
    if "primes" in parameters and not isinstance(parameters["primes"], list):
        raise ParameterError(f"[parameters] primes must be a list of integers, "
                             f"got {_show(parameters['primes'])}")

    clustering = _table(data, "clustering", False)
    _known(clustering, "[clustering]", _fields(ClusteringRequest))
    deadlines = _table(data, "deadlines", False)
    _known(deadlines, "[deadlines]", _fields(Deadlines))

    tls = dict(_table(data, "tls", False))
    _known(tls, "[tls]", _fields(TLSSettings))
    for key in ("ca", "coordinator_cert", "coordinator_key"):
        if key in tls:
            tls[key] = _resolve(tls[key], f"[tls] {key}", base)

    raw_parties = data.get("parties")
    if not isinstance(raw_parties, list) or not raw_parties:
        raise ParameterError("at least one [[parties]] entry is required")
    parties = []
    for i, entry in enumerate(raw_parties):
        if not isinstance(entry, dict):
            raise ParameterError(f"[[parties]] entry {i} must be a table")
        _known(entry, f"[[parties]] entry {i}", _fields(PartyEntry))
        for key in ("name", "identity_public_key"):
            if key not in entry:
                raise ParameterError(f"[[parties]] entry {i}: {key} is missing")
        entry = dict(entry)
        for key in ("identity_public_key", "certificate_sha256"):
            if key in entry and not isinstance(entry[key], str):
                raise ParameterError(f"[[parties]] entry {i}: {key} must be a hex string, "
                                     f"got {_show(entry[key])}")
        for key in ("cert", "key", "identity_key"):
            if key in entry:
                entry[key] = _resolve(entry[key], f"[[parties]] entry {i} {key}", base)
        parties.append(PartyEntry(**entry))

    if "primes" in parameters:
        parameters = {**parameters, "primes": tuple(parameters["primes"])}
    return SessionConfig(
        session_id=session["id"], coordinator=session["coordinator"],
        mode=session.get("mode", "masked"), integrity=session.get("integrity", "detect"),
        adversaries=session.get("adversaries"),
        protocol_version=session.get("protocol_version", PROTOCOL_VERSION),
        parameters=ConfigParameters(**parameters),
        clustering=ClusteringRequest(**{"n_clusters": None, **clustering})
        if "clustering" in data else ClusteringRequest(),
        deadlines=Deadlines(**deadlines), tls=TLSSettings(**tls),
        parties=tuple(parties), path=path)


def load_session_config(path, *, validate=None) -> SessionConfig:
    """Read and validate a session config; relative paths are taken from its folder.

    Logs a WARNING when TLS is disabled and when the mode is transparent.

    Parameters
    ----------
    path : str or os.PathLike
    validate : callable, optional
        ``validate(config)`` runs after the built-in checks and raises
        :class:`ParameterError` on what it rejects. This is the hook through which a layer
        above (the omnifc CLI) checks what protocols cannot know, e.g. the clustering
        method against omnifc's registry; its message is prefixed with the file name.

    Raises
    ------
    ParameterError
        On a missing file, invalid TOML, or any invalid value (the message names the file,
        the key and the value).

    Examples
    --------
    See the module docstring.
    """
    path = Path(path).absolute()
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ParameterError(f"session config not found: {str(path)!r}") from None
    except UnicodeDecodeError:
        raise ParameterError(f"session config {str(path)!r} is not UTF-8 text") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise ParameterError(f"session config {str(path)!r} is not valid TOML: {error}") \
            from None
    try:
        config = session_config_from_dict(data, path.parent, path=path)
        if validate is not None:
            validate(config)
    except ParameterError as error:
        raise ParameterError(f"session config {str(path)!r}: {error}") from None
    except TypeError as error:  # pragma: no cover - defensive: wrong shapes reaching a class
        raise ParameterError(f"session config {str(path)!r}: {error}") from None
    if config.insecure:
        logger.warning("session config %s disables TLS: traffic between the parties and the "
                       "coordinator is neither authenticated nor encrypted", path)
    if config.mode == "transparent":
        logger.warning("session config %s uses mode = \"transparent\": the coordinator sees "
                       "every party's evaluation, i.e. every per-segment distance matrix "
                       "(with segments = dim: every coordinate up to shift and reflection), "
                       "not only D", path)
    return config


# --- writing ---------------------------------------------------------------------------

def _toml_string(text: str) -> str:
    out = ['"']
    for ch in text:
        code = ord(ch)
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\u{code:04x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def _toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ParameterError(f"cannot write the non-finite number {value} to TOML")
        text = repr(value)
        return text if any(c in text for c in ".en") else text + ".0"
    if isinstance(value, str):
        return _toml_string(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise ParameterError(f"cannot write a {type(value).__name__} to TOML")


def _relative(path: Path, base: Path) -> str:
    """``path`` relative to ``base`` when it lies inside it, else absolute."""
    path = Path(os.path.normpath(Path.cwd() / path))
    try:
        return path.relative_to(base).as_posix()
    except ValueError:
        return str(path)


def format_session_config(config: SessionConfig, base_dir) -> str:
    """The TOML text of ``config``; paths inside ``base_dir`` are written relative to it,
    others as absolute paths."""
    base = Path(os.path.normpath(Path(base_dir).absolute()))
    p, c, d, t = config.parameters, config.clustering, config.deadlines, config.tls

    def line(key, value, comment=None):
        text = f"{key} = {_toml_value(value)}"
        return f"{text:<39} # {comment}" if comment else text

    lines = [
        "# omnifc session config: the coordinator and every party use this same file.",
        "# Paths are relative to this file's folder. Written by omnifc; safe to edit.",
        "",
        "[session]",
        line("id", config.session_id, "random 128-bit session id"),
        line("protocol_version", config.protocol_version),
        line("coordinator", config.coordinator, "host:port the parties connect to"),
        line("mode", config.mode,
             "'masked' (default) or 'transparent' (leaks per-segment distances when l > 1)"),
        line("integrity", config.integrity,
             "'detect' (default), 'correct' or 'off': Reed-Solomon checks on the uploads"),
        line("adversaries", config.adversary_bound,
             "A: most parties deviating together (detect: <= r, correct: <= r/2)"),
        "",
        "[parameters]",
        line("dim", p.dim, "d; 0 = taken from the data at join (must match)"),
        line("segments", p.segments, "l"),
        line("noise_segments", p.noise_segments, "t: any t parties learn nothing"),
        line("scale_bits", p.scale_bits, "q: quantization step 2^-q"),
        line("bound", p.bound, "R: public clip bound"),
        line("nonnegative", p.nonnegative, "all features in [0, R]"),
        line("primes", list(p.primes), "empty: chosen automatically"),
        line("max_rows_per_party", p.max_rows_per_party, "public row cap per party"),
        line("max_rows_total", p.max_rows_total, "public row cap, all parties"),
        line("mask_degree", p.mask_degree,
             "mask partners per party: 0 = all; k >= t+1 withstands k-1 colluders"),
        "",
        "[clustering]",
        line("method", c.method),
    ]
    if c.n_clusters is not None:
        lines.append(line("n_clusters", c.n_clusters))
    lines += ["", f"{'[deadlines]':<39} # seconds; every wait has one"]
    lines += [line(f.name, getattr(d, f.name)) for f in dataclasses.fields(d)]
    lines += ["", "[tls]", line("enabled", t.enabled,
                                None if t.enabled else "INSECURE: no authentication, no "
                                "encryption")]
    if t.coordinator_certificate is not None:
        lines += [line("coordinator_fingerprint", t.coordinator_fingerprint,
                       f"card of {t.coordinator_name!r}"),
                  _pem_line("coordinator_certificate", t.coordinator_certificate)]
    for key in ("ca", "coordinator_cert", "coordinator_key"):
        if getattr(t, key) is not None:
            lines.append(line(key, _relative(getattr(t, key), base)))
    for party in config.parties:
        lines += ["", "[[parties]]", line("name", party.name)]
        if party.fingerprint is not None:
            lines.append(line("fingerprint", party.fingerprint, "card fingerprint"))
        lines.append(line("identity_public_key", party.identity_public_key.hex(),
                          "pinned Ed25519 key"))
        if party.certificate_sha256 is not None:
            lines.append(line("certificate_sha256", party.certificate_sha256.hex(),
                              "pinned SHA-256 of the DER certificate"))
        if party.certificate is not None:
            lines.append(_pem_line("certificate", party.certificate))
        for key in ("cert", "key", "identity_key"):
            if getattr(party, key) is not None:
                lines.append(line(key, _relative(getattr(party, key), base)))
    return "\n".join(lines) + "\n"


def _pem_line(key: str, pem: str) -> str:
    """A PEM block as a TOML multi-line literal string (PEM never holds three quotes)."""
    quotes = "'" * 3
    if quotes in pem or not pem.endswith("\n"):  # pragma: no cover - PEM from cryptography
        raise ParameterError(f"{key}: not a PEM block")
    return f"{key} = {quotes}\n{pem}{quotes}"


def dump_session_config(config: SessionConfig, path, *, overwrite: bool = True) -> Path:
    """Write ``config`` as TOML to ``path``; returns the path.

    Paths inside the file's folder are written relative to it (the folder can be moved as
    a whole), others as absolute paths.

    The file is written through :func:`protocols._files.write_file`: atomically, never
    through a symbolic link; ``overwrite=False`` refuses an existing file.
    :func:`load_session_config` reads back an equal config.
    """
    from ._files import write_file

    path = Path(path).absolute()
    text = format_session_config(config, path.parent)
    return write_file(path, text.encode("utf-8"), overwrite=overwrite)
