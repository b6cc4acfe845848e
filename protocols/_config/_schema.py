"""The schema of the session config: one frozen dataclass per TOML table, each validated
on construction with errors that name the key and the bad value.

The ``[parameters]`` fields and the ``[session]`` keys mode, integrity and adversaries are
not declared here but taken from the parameter table (:mod:`protocols._parameters`), with
their defaults and checks.
"""

from __future__ import annotations

import dataclasses
import os
import re
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple, Optional

from finite_field import ParameterError, check_adversaries, min_parties

from .._crypto import PROTOCOL_VERSION  # the wire-protocol version: one source of truth
from .._parameters import (INTEGRITY, MAX_DIM, MAX_ROWS, MODES, PARAMETER, SessionParameters,
                           check_config_fields, parameter_fields, table_fields)
from .._parameters import _boolean as _bool
from .._parameters import _integer as _int
from .._parameters import _positive_number
from .._parameters import show as _show
from .._fingerprint import card_fingerprint

__all__ = ["SessionConfig", "ConfigParameters", "ClusteringRequest", "Deadlines",
           "TLSSettings", "PartyEntry", "TLSFiles", "new_session_id", "validate_party_name",
           "split_address", "parameters_from_config", "PROTOCOL_VERSION", "MODES",
           "INTEGRITY", "MAX_DIM", "MAX_ROWS", "MAX_DEADLINE_SECONDS"]

#: The ``[parameters]`` table's fields and the ``[session]`` table's parameters.
PARAMETER_FIELDS = table_fields("parameters")
SESSION_FIELDS = table_fields("session")

#: Longest deadline a session config accepts, in seconds (7 days).
MAX_DEADLINE_SECONDS = 7 * 24 * 3600

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_METHOD = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")
_SESSION_ID = re.compile(r"[0-9a-f]{32,64}")


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




# --- typed field checks (the parameters' are in protocols._parameters) ------------

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



def _certificate(value, where: str, expected_name: Optional[str] = None):
    """:func:`protocols._certificates.parse_certificate`."""
    from .._certificates import parse_certificate

    return parse_certificate(value, where, expected_name)


def _check_fingerprint(value, computed: str, where: str) -> Optional[str]:
    """:func:`protocols._certificates.check_card_fingerprint`."""
    from .._certificates import check_card_fingerprint

    return check_card_fingerprint(value, computed, where)


# --- the schema ----------------------------------------------------------------------

@parameter_fields(PARAMETER_FIELDS, config=True)
class ConfigParameters:
    """Public arithmetic parameters (the ``[parameters]`` table).

    Its fields, defaults and per-key checks are those of the parameter table
    (:data:`protocols._parameters.PARAMETERS`, the rows with ``table="parameters"``).

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

    def __post_init__(self):
        # the per-key checks of the table (types, bounds, mask_degree against t), then
        # the checks across keys
        check_config_fields(self, PARAMETER_FIELDS)
        if self.max_rows_per_party > self.max_rows_total:
            raise ParameterError(
                f"[parameters] max_rows_per_party ({self.max_rows_per_party}) must be <= "
                f"max_rows_total ({self.max_rows_total})")
        if self.dim and self.segments > self.dim:
            raise ParameterError(f"[parameters] segments must be <= dim = {self.dim}, "
                                 f"got {self.segments}")
        from finite_field import Quantizer, choose_primes
        try:
            quantizer = Quantizer(scale_bits=self.scale_bits, bound=self.bound,
                                  nonnegative=self.nonnegative)
            # Raises when even the largest distance of d (or 1) features cannot be exact.
            choose_primes(quantizer.distance_bound(self.dim or 1) + 1, self.primes or None)
        except ParameterError as error:
            raise ParameterError(f"[parameters] bound = {self.bound!r}, scale_bits = "
                                 f"{self.scale_bits}, dim = {self.dim}: {error}") from None

    @classmethod
    def of(cls, parameters: SessionParameters) -> "ConfigParameters":
        """The ``[parameters]`` table of a :class:`SessionParameters` (what
        ``LocalSession`` writes into the config its party processes read)."""
        values = {f.name: getattr(parameters, f.name) for f in PARAMETER_FIELDS}
        return cls(**{name: () if value is None and PARAMETER[name].repeated else value
                      for name, value in values.items()})

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


@parameter_fields(SESSION_FIELDS, after="parties")
class SessionConfig:
    """A whole session config (see the module docstring and docs/deployment.md).

    Build one with :func:`load_session_config`, ``omnifc certs`` /
    :func:`protocols.generate_certificates`, or directly; every field is validated on
    construction, also by :meth:`with_`.

    After ``parties`` come the parameters of the ``[session]`` table, from the parameter
    table: ``mode``, ``integrity`` and ``adversaries`` (A, the most parties that may
    deviate together; None: the strongest default of
    :func:`finite_field.check_adversaries`, resolved and checked on construction).
    """

    session_id: str
    coordinator: str
    parties: tuple
    protocol_version: int = PROTOCOL_VERSION
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
        check_config_fields(self, SESSION_FIELDS)  # mode, integrity (A: below, with m)
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
        try:  # A against the redundancy of m parties (every party responding)
            object.__setattr__(self, "adversaries", check_adversaries(
                len(parties), self.parameters.segments, self.parameters.noise_segments,
                self.adversaries, self.integrity))
        except ParameterError as error:
            raise ParameterError(f"[session] adversaries: {error}") from None
        if self.parameters.mask_degree > len(parties) - 1:
            raise ParameterError(f"[parameters] mask_degree must be at most m - 1 = "
                                 f"{len(parties) - 1} (the other parties), got "
                                 f"{self.parameters.mask_degree}")
        if self.path is not None:
            object.__setattr__(self, "path", Path(self.path))

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
        from ._fingerprint import session_fingerprint

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




def parameters_from_config(config: SessionConfig, *, kind: str = "distance",
                           **overrides) -> SessionParameters:
    """The :class:`SessionParameters` of a :class:`SessionConfig`: every parameter of its
    ``[session]`` and ``[parameters]`` tables, ``kind`` and ``overrides`` on top."""
    values = {f.name: getattr(config, f.name) for f in SESSION_FIELDS}
    for f in PARAMETER_FIELDS:
        value = getattr(config.parameters, f.name)
        values[f.name] = (tuple(value) or None) if f.repeated else value
    values.update(kind=kind, **overrides)
    return SessionParameters(**values)
