"""Check 5: transport security, read from the session config (or the defaults, assumed).

Each item is marked *checked* (read from the config, from files on disk, or exercised by a
self-test here) or *assumed* (a default of the code, when no config was given).
"""

from __future__ import annotations

import datetime
from pathlib import Path

from finite_field import AuthenticationError, ParameterError

from ._model import INFO, PASS, WARN, Check
from ._params import AUDIT_FIELDS

__all__ = ["check_transport", "read_session_config", "aead_self_test"]

try:  # Python 3.11+
    import tomllib
except ModuleNotFoundError:  # pragma: no cover - Python 3.10
    import tomli as tomllib


def read_session_config(path) -> tuple[dict, dict]:
    """(parameter values for :class:`AuditParameters`, transport settings) of a config.

    A config the session would refuse (for example too few parties for l and t) is still
    read, leniently, so that the audit can say what is wrong; the refusal is recorded in
    ``transport["load_errors"]`` and fails check 5.
    """
    path = Path(path)
    errors = []
    try:
        from protocols import load_session_config

        config = load_session_config(path)
        raw = _raw_toml(path)
    except ParameterError as error:
        errors.append(str(error))
        config = None
        raw = _raw_toml(path)
    parameters = raw.get("parameters", {}) if isinstance(raw.get("parameters"), dict) else {}
    session = raw.get("session", {}) if isinstance(raw.get("session"), dict) else {}
    parties = raw.get("parties", []) if isinstance(raw.get("parties"), list) else []
    parties = [p for p in parties if isinstance(p, dict)]
    # every audited parameter the config holds, with the config's default when absent
    tables = {"parameters": parameters, "session": session}
    values = {f.name: tables[f.table].get(f.name, f.default_in_config)
              for f in AUDIT_FIELDS if f.in_config}
    values.update({f.name: tuple(values[f.name]) or None for f in AUDIT_FIELDS
                   if f.in_config and f.repeated})
    values["parties"] = max(len(parties), 1)
    tls = raw.get("tls", {}) if isinstance(raw.get("tls"), dict) else {}
    base = path.absolute().parent

    def resolve(value):
        if not value:
            return None
        p = Path(value)
        return str(p if p.is_absolute() else base / p)

    transport = {
        "config": str(path), "load_errors": errors, "loaded": config is not None,
        "tls_enabled": bool(tls.get("enabled", True)),
        "ca": resolve(tls.get("ca")), "coordinator_cert": resolve(tls.get("coordinator_cert")),
        "coordinator_key": resolve(tls.get("coordinator_key")),
        "coordinator_certificate": tls.get("coordinator_certificate"),
        "protocol_version": session.get("protocol_version"),
        "mask_degree": parameters.get("mask_degree", 0),
        "parties": [{"name": str(p.get("name")),
                     "identity_public_key": p.get("identity_public_key"),
                     "certificate_sha256": p.get("certificate_sha256"),
                     "cert": resolve(p.get("cert")) or p.get("certificate"),
                     "key": resolve(p.get("key")),
                     "identity_key": resolve(p.get("identity_key"))} for p in parties],
    }
    return values, transport


def _raw_toml(path: Path) -> dict:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ParameterError(f"session config not found: {str(path)!r}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
        raise ParameterError(f"session config {str(path)!r} is not valid TOML: {error}") \
            from None


def aead_self_test() -> dict:
    """Exercise the protocol's share encryption: round trip, tampering, wrong context.

    Returns what was observed; ``ok`` is True when the AEAD behaves as specified
    (AES-256-GCM, 16-byte tag, any change to ciphertext or bound context refused).
    """
    from protocols import EphemeralKey, PairKeys

    a, b = EphemeralKey.generate(), EphemeralKey.generate()
    roster = bytes(32)
    ka = PairKeys.derive(a, b.public_bytes, session_id="audit", me="a", peer="b",
                         roster_digest=roster)
    kb = PairKeys.derive(b, a.public_bytes, session_id="audit", me="b", peer="a",
                         roster_digest=roster)
    plaintext = bytes(range(64))
    box = ka.encrypt(plaintext, round_=1, prime_index=0, chunk_index=0)
    out = {"cipher": "AES-256-GCM", "key_bytes": len(ka.encryption_key),
           "overhead_bytes": len(box) - len(plaintext),
           "round_trip": kb.decrypt(box, sender="a", round_=1, prime_index=0,
                                    chunk_index=0) == plaintext}
    tampered = bytearray(box)
    tampered[0] ^= 1
    for label, call in (
            ("tampered ciphertext refused", lambda: kb.decrypt(bytes(tampered), sender="a",
                                                                round_=1, prime_index=0,
                                                                chunk_index=0)),
            ("replay as another chunk refused", lambda: kb.decrypt(box, sender="a", round_=1,
                                                                    prime_index=0,
                                                                    chunk_index=1)),
            ("replay in another round refused", lambda: kb.decrypt(box, sender="a", round_=2,
                                                                    prime_index=0,
                                                                    chunk_index=0))):
        try:
            call()
            out[label] = False
        except AuthenticationError:
            out[label] = True
    out["ok"] = (out["key_bytes"] == 32 and out["overhead_bytes"] == 16 and all(
        v for k, v in out.items() if k.endswith("refused") or k == "round_trip"))
    return out


def _certificate_status(path) -> tuple[str | None, bytes | None]:
    """(problem or None, sha256 of the DER) of a PEM certificate file (or PEM text
    embedded in the config)."""
    from cryptography import x509

    from protocols import certificate_sha256

    try:
        embedded = isinstance(path, str) and "-----BEGIN" in path
        cert = x509.load_pem_x509_certificate(path.encode() if embedded
                                              else Path(path).read_bytes())
        path = "embedded in the config" if embedded else path
    except FileNotFoundError:
        return f"certificate file {path} does not exist", None
    except ValueError:
        return f"{path} is not a PEM certificate", None
    now = datetime.datetime.now(datetime.timezone.utc)
    if cert.not_valid_after_utc < now:
        return f"certificate {path} expired on {cert.not_valid_after_utc:%Y-%m-%d}", None
    if cert.not_valid_before_utc > now:
        return f"certificate {path} is not valid before {cert.not_valid_before_utc:%Y-%m-%d}", None
    return None, certificate_sha256(cert)


def _key_problem(key_path, certificate) -> str | None:
    """None when the PEM private key file belongs to the certificate (PEM text or a path),
    else what is wrong with it."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    try:
        key = serialization.load_pem_private_key(Path(key_path).read_bytes(), password=None)
    except (ValueError, TypeError):
        return f"TLS key file {key_path} is not an unencrypted PEM private key (damaged?)"
    pem = certificate.encode() if "-----BEGIN" in str(certificate) \
        else Path(certificate).read_bytes()
    raw = serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    if key.public_key().public_bytes(*raw) != \
            x509.load_pem_x509_certificate(pem).public_key().public_bytes(*raw):
        return f"TLS key file {key_path} does not belong to the pinned certificate"
    return None


def check_transport(params) -> Check:
    """Check 5: TLS, client authentication, identity pinning, AEAD and mode.

    Examples
    --------
    >>> from omnifc.audit import AuditParameters, check_transport
    >>> check_transport(AuditParameters()).verdict     # no config: defaults, assumed
    'info'
    """
    check = Check("transport", 5, "Transport security", verdict=PASS)
    check.reproduce = (f"omnifc audit {params.cli_arguments()} --checks 5\n\n"
                       "from omnifc.audit import AuditParameters, check_transport\n"
                       "check_transport(AuditParameters.from_config('session.toml'))")
    rows = []  # item, setting, status (checked/assumed), verdict

    absent = []  # another organization's files, not on this machine

    def not_here(name, path, owner):
        absent.append(path)
        rows.append([name, f"{path} not on this machine ({owner}'s file)", "not checked",
                     "skip"])

    def item(name, setting, how, ok, reason=None, warn=False):
        rows.append([name, setting, how, "ok" if ok else ("warn" if warn else "FAIL")])
        if not ok and reason:
            if warn:
                check.reasons.append(reason)
            else:
                check.fail(reason)

    try:
        aead = aead_self_test()
    except ImportError as error:  # pragma: no cover - protocols always ships _crypto
        aead = {"ok": False, "error": str(error)}
    check.evidence["aead_self_test"] = aead
    aead_text = (f"AES-256-GCM share encryption: round trip, {aead.get('overhead_bytes')}-byte "
                 "tag; tampering and replay to another chunk or round refused")
    transport = params.transport
    l, d = params.segments, params.dim
    mode_ok = params.mode == "masked" or l == 1
    mode_reason = (None if params.mode == "masked" else
                   f"mode = transparent: the coordinator sees every party's raw evaluation "
                   + ("(with l = 1 that reveals D and no more; masked is still the default)"
                      if l == 1 else f"and recovers all {l} per-segment distance matrices "
                      "(check 3)"))
    if transport is None:
        check.verdict = INFO
        item("TLS", "on (default; `--insecure` turns it off)", "assumed (no --config)", True)
        item("client authentication", "mutual TLS: the coordinator requires a client "
             "certificate from the session CA", "assumed (no --config)", True)
        item("identity pinning", "every party's Ed25519 identity key pinned in the config; "
             "ephemeral X25519 keys signed with it", "assumed (no --config)", True)
        item("AEAD", aead_text, "checked (self-test of the protocol code)", aead["ok"],
             "the AEAD self-test failed")
        item("mode", params.mode, "checked (--mode)", mode_ok, mode_reason,
             warn=params.mode == "transparent" and l == 1)
        check.details.append(
            "No session config was given (`--config`), so the transport settings are the "
            "defaults of `omnifc certs` / `serve` / `join`, reported as assumed. Run the "
            "audit with `--config session.toml` to check a deployment's actual settings.")
        if check.failed:
            check.finding = check.reasons[0]
        elif params.mode == "transparent":
            check.verdict = WARN
            check.finding = check.reasons[0]
        else:
            check.finding = ("no config given: defaults assumed (TLS on, mutual TLS, pinned "
                             "identities, masked mode); AES-256-GCM checked by a self-test")
        check.tables.append(("Transport settings", ["item", "setting", "how", "status"], rows))
        check.evidence["items"] = rows
        return check

    how = f"checked ({Path(transport['config']).name})"
    for error in transport.get("load_errors", []):
        check.fail(f"the session config does not load: {error}")
    tls_on = transport["tls_enabled"]
    item("TLS", "on" if tls_on else "OFF ([tls] enabled = false)", how, tls_on,
         "TLS is disabled: traffic between the parties and the coordinator is neither "
         "authenticated nor encrypted, and a network attacker can impersonate the coordinator")
    if tls_on and transport.get("coordinator_certificate"):  # built from cards: pinned
        problem, _ = _certificate_status(transport["coordinator_certificate"])
        item("coordinator certificate", problem or "pinned in the config, valid now", how,
             problem is None, problem)
        key = transport.get("coordinator_key")
        if key and Path(key).exists():
            problem = _key_problem(key, transport["coordinator_certificate"])
            item("coordinator TLS key", problem or "matches the pinned certificate",
                 how + ", file on disk", problem is None, f"the coordinator's {problem}")
        elif key:
            not_here("coordinator TLS key", key, "the coordinator")
    elif tls_on:
        for key in ("ca", "coordinator_cert", "coordinator_key"):
            value = transport.get(key)
            exists = bool(value) and Path(value).exists()
            if value and not exists and key != "ca":  # every participant holds the CA cert
                not_here(f"[tls] {key}", value, "the coordinator")
                continue
            item(f"[tls] {key}", value or "missing", how + ", file on disk", exists,
                 f"[tls] {key} {'is missing' if not value else 'does not exist: ' + value}")
        if transport.get("coordinator_cert") and Path(transport["coordinator_cert"]).exists():
            problem, _ = _certificate_status(transport["coordinator_cert"])
            item("coordinator certificate validity", problem or "valid now", how, problem is None,
                 problem)
    parties = transport.get("parties", [])
    pinned_certs = [p for p in parties if p.get("certificate_sha256")]
    item("client authentication",
         "mutual TLS (the coordinator requires a client certificate it trusts: pinned, or "
         "from the session CA of an older config)"
         + (f"; {len(pinned_certs)} of {len(parties)} certificates pinned by SHA-256"
            if tls_on else ""),
         how + " (requirement from the protocol code)",
         tls_on and len(pinned_certs) == len(parties),
         "client authentication is off because TLS is off" if not tls_on else
         f"parties without a pinned certificate_sha256: "
         f"{[p['name'] for p in parties if not p.get('certificate_sha256')]} (CA trust only)",
         warn=tls_on)
    for p in pinned_certs:
        embedded = "-----BEGIN" in str(p.get("cert") or "")  # a config built from cards
        if p.get("cert") and not embedded and not Path(p["cert"]).exists():
            not_here(f"party {p['name']!r} certificate", p["cert"], f"party {p['name']!r}")
        elif p.get("cert"):
            problem, digest = _certificate_status(p["cert"])
            pinned = str(p["certificate_sha256"]).lower()
            ok = problem is None and digest is not None and digest.hex() == pinned
            item(f"party {p['name']!r} certificate", "matches pin" if ok else (problem or
                 "does NOT match certificate_sha256"), how, ok,
                 f"party {p['name']!r}: " + (problem or "the certificate on disk does not match "
                                               "the pinned certificate_sha256"))
    keys = [p.get("identity_public_key") for p in parties]
    valid = [k for k in keys if isinstance(k, str) and len(k) == 64]
    distinct = len(set(valid)) == len(valid)
    item("identity pinning", f"{len(valid)} of {len(parties)} parties pin a 32-byte Ed25519 key"
         + ("" if distinct else "; some keys repeat"), how,
         len(valid) == len(parties) and distinct and len(parties) > 0,
         "identity pinning incomplete: every party must pin its own Ed25519 identity key "
         "(otherwise the coordinator can substitute ephemeral keys and read every share)")
    for p in parties:
        if p.get("identity_key") and not Path(p["identity_key"]).exists():
            not_here(f"party {p['name']!r} identity key", p["identity_key"],
                     f"party {p['name']!r}")
        elif p.get("identity_key") and Path(p["identity_key"]).exists():
            try:
                from protocols import load_identity, public_key_bytes

                on_disk = public_key_bytes(load_identity(p["identity_key"])).hex()
                ok = on_disk == str(p.get("identity_public_key", "")).lower()
            except Exception:  # noqa: BLE001 - any unreadable key is a finding
                ok = False
            item(f"party {p['name']!r} identity key", "matches pin" if ok else "does NOT match",
                 how + ", file on disk", ok,
                 f"party {p['name']!r}: the identity key on disk does not match the pinned key")
    item("AEAD", aead_text, "checked (self-test of the protocol code)", aead["ok"],
         "the AEAD self-test failed")
    item("mode", params.mode, how, mode_ok, mode_reason,
         warn=params.mode == "transparent" and l == 1)
    degree = transport.get("mask_degree", 0)
    if params.mode == "masked" and isinstance(degree, int) and not isinstance(degree, bool) \
            and 0 <= degree <= params.parties - 1 and params.parties >= 2:
        from protocols import collusion_threshold

        t = params.noise_segments
        threshold = collusion_threshold(params.parties, degree)
        item("mask graph", ("every pair masks" if degree == 0 else
                            f"mask_degree = {degree} (Harary graph)")
             + f": the pairwise masks withstand the coordinator colluding with up to "
             f"{threshold} parties (the shares: t = {t})", how, threshold >= t,
             f"mask_degree = {degree} withstands only {threshold} colluding parties, fewer "
             f"than t = {t}: {threshold + 1} colluders that separate the mask graph give the "
             "coordinator partial sums of the other parties' evaluations (docs/protocol.md, "
             "\"Mask graph\"); use mask_degree >= t + 1")
        check.evidence["mask_collusion_threshold"] = threshold
    check.tables.append(("Transport settings", ["item", "setting", "how", "status"], rows))
    check.evidence["items"] = rows
    check.evidence["config"] = transport["config"]
    check.details.append(
        f"Read from {transport['config']}. Mutual TLS: whenever TLS is on, the coordinator's "
        "gRPC server requires a client certificate signed by the session CA (protocol code), "
        "and pinned certificate fingerprints and Ed25519 identity keys stop the coordinator "
        "from substituting parties or keys. Shares travel end-to-end encrypted under "
        "pairwise X25519 + HKDF-SHA256 keys with AES-256-GCM; the self-test above exercises "
        "that code.")
    if absent:
        check.details.append(
            f"{len(absent)} file(s) named by the config are not on this machine and were not "
            "checked: they are other organizations' files (each participant holds the public "
            "config, the CA certificate and its own files). Run the audit on each machine to "
            "check each organization's files.")
    if check.failed:
        check.finding = check.reasons[0]
    elif check.reasons:
        check.verdict = WARN
        check.finding = check.reasons[0]
    else:
        check.finding = ("TLS on with mutual authentication, every certificate and identity key "
                         "pinned" + (" and matching the files" if not absent else
                                     f", those on this machine matching ({len(absent)} other "
                                     "organizations' files not here)")
                         + ", AES-256-GCM verified, masked mode")
    return check
