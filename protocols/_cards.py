"""The key ceremony: every organization makes its own keys; the session is built from cards.

1. Each organization runs :func:`generate_keys` (``omnifc keygen``) on its own machine. It
   writes, into a folder of its own, its private TLS key (ECDSA P-256) and, for a party,
   its Ed25519 identity key (both mode 0600), a **self-signed** TLS certificate and a
   public **card**: a small TOML file with its name, role, identity public key, the
   certificate and the card's fingerprint. Only the card leaves the machine.
2. One person collects the cards and runs :func:`new_session_config` (``omnifc session
   new``): the session config embeds every card's certificate and identity key and pins
   each certificate's SHA-256. It is built from public cards only; no private key of any
   party exists anywhere but in its owner's folder.
3. Everyone compares the session fingerprint (:func:`protocols.session_fingerprint`) out
   of band, then runs ``serve`` / ``join`` with the shared config and ``--keys`` pointing
   at their own folder.

Why self-signed certificates pinned by the config, not certificate signing requests: a
CSR needs someone holding a CA key to sign it, and whoever holds that key can issue a
second certificate under any party's name, i.e. the one-machine trust problem again. With
self-signed certificates there is no CA key anywhere: the coordinator's TLS server trusts
exactly the parties' pinned certificates (gRPC ``root_certificates`` = those certificates,
client authentication required; it also checks each caller's common name and certificate
SHA-256 against the claimed party), and every party trusts exactly the coordinator's pinned
certificate. Nothing has to travel back to an organization after it sends its card.

The coordinator's card has no identity key: nothing in the protocol verifies a signature
by the coordinator (parties authenticate it through its pinned TLS certificate), and a
private key that nothing uses is only a liability.

Examples
--------
>>> import os, tempfile
>>> from protocols._cards import generate_keys, load_card, new_session_config
>>> root = tempfile.mkdtemp()
>>> cards = [generate_keys(os.path.join(root, n), n).card for n in ("a", "b", "c")]
>>> hub = generate_keys(os.path.join(root, "hub"), "hub", role="coordinator").card
>>> config = new_session_config([load_card(c) for c in cards], load_card(hub),
...                             "127.0.0.1:50051")
>>> config.party_names, config.tls.coordinator_name
(('a', 'b', 'c'), 'hub')
>>> sorted(os.listdir(os.path.join(root, "a")))
['a.card.toml', 'a.identity.pem', 'a.key', 'a.pem']
"""

from __future__ import annotations

import datetime
import hashlib
import ipaddress
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence

try:  # Python 3.11+
    import tomllib
except ModuleNotFoundError:  # pragma: no cover - Python 3.10
    import tomli as tomllib

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from finite_field import ParameterError

from ._config import (ClusteringRequest, ConfigParameters, Deadlines, PartyEntry,
                      SessionConfig, TLSSettings, new_session_id, split_address,
                      validate_party_name)
from ._files import prepare_private_folder, write_file, write_private_file
from ._fingerprint import card_fingerprint, refuse_old_format
from ._identity import generate_identity, public_key_bytes, save_identity

__all__ = ["Card", "KeyFiles", "generate_keys", "load_card", "format_card",
           "new_session_config", "self_signed_certificate", "LOOPBACK_HOSTS", "ROLES"]

logger = logging.getLogger(__name__)

#: Subject alternative names every certificate carries, so loopback needs no name override.
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1")
#: Who a card belongs to.
ROLES = ("party", "coordinator")

_CLOCK_SKEW = datetime.timedelta(minutes=5)
_CARD_FORMAT = 1


# --- certificates ----------------------------------------------------------------------

def general_name(host: str) -> x509.GeneralName:
    """A SAN entry for a DNS name or an IP address (ParameterError otherwise)."""
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        pass
    if not isinstance(host, str) or not host or any(c.isspace() for c in host) \
            or "/" in host:
        raise ParameterError(f"host names for certificates must be DNS names or IP "
                             f"addresses, got {host!r}")
    try:
        host.encode("ascii")
    except UnicodeEncodeError:
        raise ParameterError(f"host names for certificates must be ASCII (use the "
                             f"punycode form), got {host!r}") from None
    return x509.DNSName(host)


def self_signed_certificate(name: str, key, *, role: str, hosts: Sequence[str] = (),
                            days: int = 30, now=None) -> x509.Certificate:
    """A self-signed TLS certificate for ``name`` (its CN) with key ``key``.

    Not a CA (basicConstraints CA:FALSE, no keyCertSign): it can vouch for nothing but
    itself. A party's certificate is for client authentication only, the coordinator's
    for server authentication only, so neither can pass as the other. SANs: loopback
    names plus ``hosts``.
    """
    if role not in ROLES:
        raise ParameterError(f"role must be one of {list(ROLES)}, got {role!r}")
    now = now or datetime.datetime.now(datetime.timezone.utc)
    subject = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "omnifc"),
                         x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, role),
                         x509.NameAttribute(NameOID.COMMON_NAME, name)])
    names: list = []
    for host in [*LOOPBACK_HOSTS, *hosts]:
        entry = general_name(host)
        if entry not in names:
            names.append(entry)
    usage = ExtendedKeyUsageOID.SERVER_AUTH if role == "coordinator" \
        else ExtendedKeyUsageOID.CLIENT_AUTH
    return (x509.CertificateBuilder()
            .subject_name(subject).issuer_name(subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - _CLOCK_SKEW)
            .not_valid_after(now + datetime.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False,
                                         key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, key_cert_sign=False,
                                         crl_sign=False, encipher_only=False,
                                         decipher_only=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .add_extension(x509.SubjectAlternativeName(names), critical=False)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()),
                           critical=False)
            .sign(key, hashes.SHA256()))


def _key_pem(key) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


# --- cards -----------------------------------------------------------------------------

@dataclass(frozen=True)
class Card:
    """A public card: what an organization sends to whoever assembles the session.

    Attributes
    ----------
    role : {"party", "coordinator"}
    name : str
    certificate : str
        The self-signed TLS certificate (PEM).
    identity_public_key : bytes or None
        The raw Ed25519 identity public key (parties only).
    path : Path or None
        The file it was read from (not part of equality).
    """

    role: str
    name: str
    certificate: str
    identity_public_key: Optional[bytes] = None
    path: Optional[Path] = field(default=None, compare=False)

    def __post_init__(self):
        where = f"card {self.name!r}" + (f" ({self.path})" if self.path else "")
        if self.role not in ROLES:
            raise ParameterError(f"{where}: role must be one of {list(ROLES)}, "
                                 f"got {self.role!r}")
        validate_party_name(self.name, what=f"{where}: name")
        if self.role == "party":
            if self.identity_public_key is None or len(self.identity_public_key) != 32:
                raise ParameterError(f"{where}: a party card needs a 32-byte "
                                     "identity_public_key")
        elif self.identity_public_key is not None:
            raise ParameterError(f"{where}: a coordinator card has no identity key")
        try:
            cert = x509.load_pem_x509_certificate(self.certificate.encode("ascii"))
        except (ValueError, UnicodeEncodeError, AttributeError):
            raise ParameterError(f"{where}: the certificate is not a PEM X.509 "
                                 "certificate") from None
        names = [a.value for a in cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)]
        if names != [self.name]:
            raise ParameterError(f"{where}: the certificate names {names}, expected "
                                 f"[{self.name!r}]")
        try:
            cert.verify_directly_issued_by(cert)
        except (ValueError, TypeError, InvalidSignature):
            raise ParameterError(f"{where}: the certificate is not validly self-signed") \
                from None
        try:
            usages = list(cert.extensions.get_extension_for_class(
                x509.ExtendedKeyUsage).value)
        except x509.ExtensionNotFound:
            usages = []
        needed = ExtendedKeyUsageOID.SERVER_AUTH if self.role == "coordinator" \
            else ExtendedKeyUsageOID.CLIENT_AUTH
        if needed not in usages:
            raise ParameterError(f"{where}: the certificate of a {self.role} must allow "
                                 f"{'server' if self.role == 'coordinator' else 'client'} "
                                 "authentication")
        now = datetime.datetime.now(datetime.timezone.utc)
        if cert.not_valid_after_utc <= now:
            raise ParameterError(f"{where}: the certificate expired on "
                                 f"{cert.not_valid_after_utc:%Y-%m-%d}; run keygen again")
        object.__setattr__(self, "certificate",
                           cert.public_bytes(serialization.Encoding.PEM).decode("ascii"))

    @property
    def x509(self) -> x509.Certificate:
        return x509.load_pem_x509_certificate(self.certificate.encode("ascii"))

    @property
    def certificate_der(self) -> bytes:
        return self.x509.public_bytes(serialization.Encoding.DER)

    @property
    def certificate_sha256(self) -> bytes:
        return hashlib.sha256(self.certificate_der).digest()

    @property
    def fingerprint(self) -> str:
        """The card fingerprint (:func:`protocols._fingerprint.card_fingerprint`)."""
        return card_fingerprint(self.role, self.name, self.identity_public_key,
                                self.certificate_der)

    @property
    def hosts(self) -> list:
        """The DNS names and IP addresses the certificate is valid for."""
        try:
            san = self.x509.extensions.get_extension_for_class(
                x509.SubjectAlternativeName).value
        except x509.ExtensionNotFound:
            return []
        return [str(v) for v in san.get_values_for_type(x509.DNSName)] + \
            [str(v) for v in san.get_values_for_type(x509.IPAddress)]


def format_card(card: Card) -> str:
    """The TOML text of a card (see :func:`load_card`)."""
    from ._config._toml import _pem_line, _toml_value

    lines = [f"# omnifc public card of {card.role} {card.name!r}. It holds no secret: send it",
             "# to whoever assembles the session config, and read the fingerprint out to",
             "# the other organizations so they can check the copy that reached them.",
             "[card]",
             f"format = {_CARD_FORMAT}",
             f"role = {_toml_value(card.role)}",
             f"name = {_toml_value(card.name)}",
             f"fingerprint = {_toml_value(card.fingerprint)}"]
    if card.identity_public_key is not None:
        lines.append(f"identity_public_key = {_toml_value(card.identity_public_key.hex())}")
    lines += [f"certificate_sha256 = {_toml_value(card.certificate_sha256.hex())}",
              f"hosts = {_toml_value(card.hosts)}",
              _pem_line("certificate", card.certificate)]
    return "\n".join(lines) + "\n"


def load_card(path) -> Card:
    """Read and check a card written by :func:`generate_keys` / ``omnifc keygen``.

    The certificate must be validly self-signed, name the card's owner, allow the role's
    TLS use and be unexpired; the fingerprint and certificate SHA-256 written in the card
    must match what they cover (so an edited or mixed-up card is refused).
    """
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ParameterError(f"card not found: {str(path)!r}") from None
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as error:
        raise ParameterError(f"{str(path)!r} is not a card (TOML): {error}") from None
    table = data.get("card")
    if not isinstance(table, dict) or set(data) != {"card"}:
        raise ParameterError(f"{str(path)!r} is not a card: expected one [card] table")
    allowed = {"format", "role", "name", "fingerprint", "identity_public_key",
               "certificate_sha256", "hosts", "certificate"}
    unknown = sorted(set(table) - allowed)
    if unknown:
        raise ParameterError(f"card {str(path)!r}: unknown keys {unknown}")
    if table.get("format") != _CARD_FORMAT:
        raise ParameterError(f"card {str(path)!r}: format must be {_CARD_FORMAT}, "
                             f"got {table.get('format')!r}")
    for key in ("role", "name", "certificate", "fingerprint"):
        if not isinstance(table.get(key), str):
            raise ParameterError(f"card {str(path)!r}: {key} is missing")
    identity = table.get("identity_public_key")
    if identity is not None:
        try:
            identity = bytes.fromhex(identity)
        except (TypeError, ValueError):
            raise ParameterError(f"card {str(path)!r}: identity_public_key must be hex") \
                from None
    refuse_old_format(table["fingerprint"], f"card {str(path)!r}",
                      "its owner re-runs 'omnifc keygen' (with --force) and sends the new card")
    card = Card(table["role"], table["name"], table["certificate"], identity, path=path)
    if table["fingerprint"] != card.fingerprint:
        raise ParameterError(f"card {str(path)!r}: its fingerprint {table['fingerprint']!r} "
                             f"does not match its contents ({card.fingerprint!r}); the card "
                             "was edited or damaged")
    if table.get("certificate_sha256", card.certificate_sha256.hex()) != \
            card.certificate_sha256.hex():
        raise ParameterError(f"card {str(path)!r}: certificate_sha256 does not match its "
                             "certificate")
    return card


# --- keygen ------------------------------------------------------------------------------

@dataclass(frozen=True)
class KeyFiles:
    """What :func:`generate_keys` wrote."""

    name: str
    role: str
    directory: Path
    tls_key: Path
    certificate: Path
    card: Path
    identity_key: Optional[Path]
    fingerprint: str

    @property
    def private_files(self) -> list:
        return [self.tls_key] + ([self.identity_key] if self.identity_key else [])

    @property
    def files(self) -> list:
        return self.private_files + [self.certificate, self.card]


def key_file_names(name: str, role: str = "party") -> dict:
    """The file names :func:`generate_keys` uses in its folder."""
    names = {"tls_key": f"{name}.key", "certificate": f"{name}.pem",
             "card": f"{name}.card.toml"}
    if role == "party":
        names["identity_key"] = f"{name}.identity.pem"
    return names


def generate_keys(out_dir, name: str, *, role: str = "party", hosts: Sequence[str] = (),
                  days: int = 30, overwrite: bool = False) -> KeyFiles:
    """Make one organization's keys and public card (``omnifc keygen``).

    Writes into ``out_dir`` (created with mode 0700; an existing one must be a folder of
    yours that group and others cannot write to, and not a symbolic link:
    :func:`protocols._files.prepare_private_folder`): ``<name>.key`` (TLS private key,
    0600), ``<name>.identity.pem`` (Ed25519 identity key, 0600; parties only),
    ``<name>.pem`` (self-signed certificate) and ``<name>.card.toml`` (the public card).
    Existing files are refused unless ``overwrite``; symbolic links are always refused.

    Parameters
    ----------
    out_dir : path
    name : str
        The party's (or coordinator's) name: its certificate's CN.
    role : {"party", "coordinator"}
    hosts : sequence of str
        DNS names / IP addresses the coordinator is reached at (added to its certificate;
        loopback names are always there). Parties need none.
    days : int
        Certificate validity, 1 to 3650 days.
    overwrite : bool
    """
    name = validate_party_name(name, what=f"{role} name")
    if role not in ROLES:
        raise ParameterError(f"role must be one of {list(ROLES)}, got {role!r}")
    if isinstance(days, bool) or not isinstance(days, int) or not 1 <= days <= 3650:
        raise ParameterError(f"days must be an integer in [1, 3650], got {days!r}")
    if role == "party" and hosts:
        raise ParameterError("only the coordinator's certificate carries host names")
    for host in hosts:
        general_name(host)
    directory = prepare_private_folder(out_dir)
    files = {k: directory / v for k, v in key_file_names(name, role).items()}
    links = [str(p) for p in files.values() if p.is_symlink()]
    if links:  # checked for all files first: nothing is written when one is a link
        raise ParameterError(f"refusing to write through symbolic links: {', '.join(links)} "
                             "(--force included); remove them if you put them there")
    if not overwrite:
        existing = [str(p) for p in files.values() if p.exists() or p.is_symlink()]
        if existing:
            raise ParameterError(f"refusing to overwrite existing files: {', '.join(existing)} "
                                 "(pass --force / overwrite=True to replace them)")
    key = ec.generate_private_key(ec.SECP256R1())
    cert = self_signed_certificate(name, key, role=role, hosts=hosts, days=days)
    pem = cert.public_bytes(serialization.Encoding.PEM)
    identity = None
    write_private_file(files["tls_key"], _key_pem(key), overwrite=overwrite)
    if role == "party":
        identity = generate_identity()
        save_identity(identity, files["identity_key"], overwrite=overwrite)
    card = Card(role, name, pem.decode("ascii"),
                None if identity is None else public_key_bytes(identity))
    write_file(files["certificate"], pem, overwrite=overwrite)
    write_file(files["card"], format_card(card).encode("utf-8"), overwrite=overwrite)
    logger.info("wrote the keys and card of %s %r to %s", role, name, directory)
    return KeyFiles(name=name, role=role, directory=directory, tls_key=files["tls_key"],
                    certificate=files["certificate"], card=files["card"],
                    identity_key=files.get("identity_key"), fingerprint=card.fingerprint)


# --- assembling the session ---------------------------------------------------------------

def new_session_config(cards: Sequence[Card], coordinator_card: Card, address: str, *,
                       mode: str = "masked", parameters: Optional[ConfigParameters] = None,
                       integrity: str = "detect", adversaries: Optional[int] = None,
                       clustering: Optional[ClusteringRequest] = None,
                       deadlines: Optional[Deadlines] = None,
                       session_id: Optional[str] = None, **session_parameters) -> SessionConfig:
    """The session config of ``omnifc session new``, from public cards only.

    ``mode``, ``integrity``, ``adversaries`` and any other ``[session]`` parameter of the
    parameter table (``session_parameters``) are written to the ``[session]`` table.

    The parties appear in the order of ``cards`` (the roster order). ``address`` is where
    parties dial the coordinator; its host must be one of the coordinator certificate's
    names (``keygen --coordinator --host HOST``), or TLS would refuse every connection.
    """
    if isinstance(cards, (str, bytes)) or not hasattr(cards, "__iter__"):
        raise ParameterError("cards must be a list of party cards")
    cards = list(cards)
    for card in cards:
        if not isinstance(card, Card) or card.role != "party":
            raise ParameterError(f"{getattr(card, 'name', card)!r} is not a party card")
    if not isinstance(coordinator_card, Card) or coordinator_card.role != "coordinator":
        raise ParameterError(f"{getattr(coordinator_card, 'name', coordinator_card)!r} is "
                             "not a coordinator card (make one with 'omnifc keygen "
                             "--coordinator')")
    host, _ = split_address(address)
    if host in ("0.0.0.0", "::", ""):
        raise ParameterError(f"the coordinator address {address!r} is where parties dial; "
                             "give a host name or IP they can reach (serve --address can "
                             "still bind 0.0.0.0)")
    allowed = coordinator_card.hosts
    if general_name(host) not in [general_name(h) for h in allowed]:
        raise ParameterError(
            f"the coordinator's certificate is valid for {allowed}, not for {host!r}: the "
            f"coordinator runs 'omnifc keygen --coordinator --host {host}' again and sends "
            "the new card")
    entries = tuple(PartyEntry(c.name, c.identity_public_key, c.certificate_sha256,
                               certificate=c.certificate, fingerprint=c.fingerprint)
                    for c in cards)
    tls = TLSSettings(enabled=True, coordinator_certificate=coordinator_card.certificate,
                      coordinator_fingerprint=coordinator_card.fingerprint)
    return SessionConfig(
        session_id=session_id or new_session_id(), coordinator=address, mode=mode,
        integrity=integrity, adversaries=adversaries,
        parameters=parameters if parameters is not None else ConfigParameters(),
        clustering=clustering if clustering is not None else ClusteringRequest(),
        deadlines=deadlines if deadlines is not None else Deadlines(), tls=tls,
        parties=entries, **session_parameters)
