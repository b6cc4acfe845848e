"""The one-machine key ceremony for demos and tests (``omnifc certs``).

The real key ceremony is in :mod:`protocols._cards` (``omnifc keygen`` on each
organization's machine, ``omnifc session new`` from the public cards).
:func:`generate_certificates` is the one-machine shortcut: it runs that ceremony for every
participant into one folder, so **whoever runs it holds every party's private keys and can
impersonate every party** (:data:`IMPERSONATION_WARNING`). Never use it for a real
deployment.

Examples
--------
>>> import tempfile
>>> from protocols import generate_certificates, load_session_config
>>> certs = generate_certificates(tempfile.mkdtemp(), ["a", "b", "c"])
>>> load_session_config(certs.config).party_names
('a', 'b', 'c')
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

from finite_field import ParameterError

from ._cards import generate_keys, key_file_names, load_card, new_session_config
from ._config import (ClusteringRequest, Deadlines, SessionConfig, ConfigParameters,
                      dump_session_config, split_address, validate_party_name)
from ._files import prepare_private_folder

__all__ = ["CertificateSet", "PartyFiles", "generate_certificates", "IMPERSONATION_WARNING"]

logger = logging.getLogger(__name__)

#: What ``omnifc certs`` (and :func:`generate_certificates`) says about itself.
IMPERSONATION_WARNING = (
    "DEMO ONLY: this made every party's private keys on this machine, so whoever ran it (or "
    "can read this folder) can impersonate every party, read their shares and still finish "
    "the session with a correct result. For a real deployment each organization runs "
    "'omnifc keygen' on its own machine and the config is built with 'omnifc session new' "
    "(docs/deployment.md).")



@dataclass(frozen=True)
class PartyFiles:
    """What :func:`generate_certificates` wrote for one party."""

    name: str
    cert: Path
    key: Path
    identity_key: Path
    identity_public_key: bytes
    certificate_sha256: bytes
    card: Path
    fingerprint: str


@dataclass(frozen=True)
class CertificateSet:
    """Paths written by :func:`generate_certificates` (no key material in memory)."""

    directory: Path
    coordinator: str
    coordinator_cert: Path
    coordinator_key: Path
    coordinator_card: Path
    coordinator_fingerprint: str
    parties: tuple
    config: Path
    session_id: str
    fingerprint: str

    def party(self, name: str) -> PartyFiles:
        for files in self.parties:
            if files.name == name:
                return files
        raise ParameterError(f"no certificates for party {name!r}; have "
                             f"{', '.join(repr(p.name) for p in self.parties)}")

    @property
    def files(self) -> list:
        """Every file written, the coordinator's first, the session config last."""
        out = [self.coordinator_key, self.coordinator_cert, self.coordinator_card]
        for p in self.parties:
            out += [p.key, p.identity_key, p.cert, p.card]
        return out + [self.config]

    @property
    def private_files(self) -> list:
        """The files holding private keys (mode 0600)."""
        return [self.coordinator_key] + [f for p in self.parties for f in (p.key,
                                                                           p.identity_key)]


def generate_certificates(out_dir, parties: Sequence[str], coordinator: str = "coordinator",
                          days: int = 30, *, coordinator_address: str = "127.0.0.1:50051",
                          coordinator_hosts: Sequence[str] = (), mode: str = "masked",
                          integrity: str = "detect", adversaries: Optional[int] = None,
                          parameters: Optional[ConfigParameters] = None,
                          clustering: Optional[ClusteringRequest] = None,
                          deadlines: Optional[Deadlines] = None,
                          config_name: str = "session.toml",
                          overwrite: bool = False, **session_parameters) -> CertificateSet:
    """The one-machine shortcut: everyone's keys, cards and a session config in one folder.

    **Demo and test use only**: whoever runs this holds every party's private keys and can
    impersonate every party (:data:`IMPERSONATION_WARNING`). It runs the real ceremony
    (:func:`protocols._cards.generate_keys` for the coordinator and each party, then
    :func:`protocols._cards.new_session_config` from their cards) in one folder, and the
    config also records where each private key lies, so ``serve`` / ``join`` need no
    ``--keys``.

    Files written into ``out_dir`` (created with mode 0700 if missing; an existing one must
    be yours, not writable by group or others, and not a symbolic link: see
    :func:`protocols._files.prepare_private_folder`): for the coordinator and every party
    ``<name>.key`` (TLS key, 0600), ``<name>.pem`` (self-signed certificate) and
    ``<name>.card.toml``; for every party ``<name>.identity.pem``
    (Ed25519 identity key, 0600); and ``config_name``. Nothing is written when any
    argument is invalid or, without ``overwrite``, when any target exists; symbolic links
    are refused always.

    Parameters
    ----------
    out_dir : path
    parties : sequence of str
        Party names: unique, 1-64 characters from [A-Za-z0-9_.-].
    coordinator : str
        The coordinator's name (its certificate's CN); must differ from every party.
    days : int
        Validity of every certificate, 1 to 3650 days.
    coordinator_address : str
        ``host:port`` written to the config.
    coordinator_hosts : sequence of str
        Extra DNS names / IP addresses for the coordinator certificate.
    mode, integrity, adversaries, parameters, clustering, deadlines
        Written to the config (defaults: masked, :class:`ConfigParameters`, ...); so is
        any other ``[session]`` parameter of the parameter table (``session_parameters``).
    config_name : str
        File name of the session config.
    overwrite : bool
        Replace existing files (never symbolic links).

    Returns
    -------
    CertificateSet

    Examples
    --------
    >>> import tempfile
    >>> from protocols import generate_certificates
    >>> certs = generate_certificates(tempfile.mkdtemp(), ["a", "b", "c"])
    >>> [p.key.name for p in certs.parties]
    ['a.key', 'b.key', 'c.key']
    """
    from ._config import PartyEntry, TLSSettings, new_session_id

    if isinstance(parties, str) or not hasattr(parties, "__iter__"):
        raise ParameterError(f"parties must be a list of names, got {parties!r}")
    parties = [validate_party_name(p) for p in parties]
    coordinator = validate_party_name(coordinator, what="coordinator name")
    duplicates = sorted({p for p in parties if parties.count(p) > 1})
    if duplicates:
        raise ParameterError(f"party names must be unique; repeated: {', '.join(duplicates)}")
    if coordinator in parties:
        raise ParameterError(f"the coordinator name {coordinator!r} is also a party name")
    if isinstance(days, bool) or not isinstance(days, int) or not 1 <= days <= 3650:
        raise ParameterError(f"days must be an integer in [1, 3650], got {days!r}")
    if not isinstance(config_name, str) or not config_name or os.sep in config_name \
            or config_name in (".", ".."):
        raise ParameterError(f"config_name must be a plain file name, got {config_name!r}")
    host, _ = split_address(coordinator_address)
    hosts = [h for h in [host, *coordinator_hosts] if h not in ("0.0.0.0", "::", "")]

    directory = Path(out_dir).absolute()
    config_path = directory / config_name
    targets = [directory / f for f in key_file_names(coordinator, "coordinator").values()]
    for name in parties:
        targets += [directory / f for f in key_file_names(name).values()]
    if config_path in targets:
        raise ParameterError(f"config_name {config_name!r} collides with a key or card "
                             "file name")
    targets.append(config_path)

    # Validate every session setting before writing anything (placeholder keys, no TLS).
    SessionConfig(session_id=new_session_id(), coordinator=coordinator_address, mode=mode,
                  integrity=integrity, adversaries=adversaries,
                  parameters=parameters if parameters is not None else ConfigParameters(),
                  clustering=clustering if clustering is not None else ClusteringRequest(),
                  deadlines=deadlines if deadlines is not None else Deadlines(),
                  tls=TLSSettings(enabled=False),
                  parties=tuple(PartyEntry(p, i.to_bytes(32, "big"))
                                for i, p in enumerate(parties)), **session_parameters)
    from ._cards import general_name
    for h in hosts:
        general_name(h)
    links = [str(t) for t in targets if t.is_symlink()]
    if links:
        raise ParameterError(f"refusing to write through symbolic links: {', '.join(links)}")
    if not overwrite:
        existing = [str(t) for t in targets if t.exists()]
        if existing:
            raise ParameterError(f"refusing to overwrite existing files: {', '.join(existing)} "
                                 "(pass overwrite=True / --force to replace them)")
    prepare_private_folder(directory)

    hub = generate_keys(directory, coordinator, role="coordinator", hosts=hosts, days=days,
                        overwrite=overwrite)
    written = [generate_keys(directory, name, days=days, overwrite=overwrite)
               for name in parties]
    cards = [load_card(files.card) for files in written]
    config = new_session_config(cards, load_card(hub.card), coordinator_address, mode=mode,
                                integrity=integrity, adversaries=adversaries,
                                parameters=parameters, clustering=clustering,
                                deadlines=deadlines, **session_parameters)
    config = config.with_keys(coordinator, directory)
    for name in parties:
        config = config.with_keys(name, directory)
    dump_session_config(config, config_path, overwrite=overwrite)
    logger.info("%s", IMPERSONATION_WARNING)
    party_files = tuple(
        PartyFiles(name=f.name, cert=f.certificate, key=f.tls_key,
                   identity_key=f.identity_key, identity_public_key=c.identity_public_key,
                   certificate_sha256=c.certificate_sha256, card=f.card,
                   fingerprint=f.fingerprint)
        for f, c in zip(written, cards))
    return CertificateSet(directory=directory, coordinator=coordinator,
                          coordinator_cert=hub.certificate, coordinator_key=hub.tls_key,
                          coordinator_card=hub.card, coordinator_fingerprint=hub.fingerprint,
                          parties=party_files, config=config_path,
                          session_id=config.session_id, fingerprint=config.fingerprint)
