"""Reading and writing session configs as TOML.

Reading uses :mod:`tomllib`; writing uses a small emitter for this fixed schema, which
puts an explanatory comment next to every key (tomli-w cannot write comments, and
tomlkit's layout would change every file omnifc writes). The parameters' keys, defaults
and comments come from the parameter table (:mod:`protocols._parameters`). Relative paths
are resolved against the config file's folder.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
from pathlib import Path
from typing import Optional

try:  # Python 3.11+
    import tomllib
except ModuleNotFoundError:  # pragma: no cover - Python 3.10 (setup.cfg installs tomli)
    import tomli as tomllib

from finite_field import ParameterError

from .._crypto import PROTOCOL_VERSION
from .._parameters import show as _show
from ._schema import (PARAMETER_FIELDS, SESSION_FIELDS, ClusteringRequest, ConfigParameters,
                      Deadlines, PartyEntry, SessionConfig, TLSSettings, _path)

__all__ = ["load_session_config", "dump_session_config", "format_session_config",
           "session_config_from_dict"]

logger = logging.getLogger(__name__)

#: The order of the ``[parameters]`` keys in a written file (files written before the
#: parameter table keep their layout); any other parameter follows in table order.
_FIRST = ("dim", "segments", "noise_segments", "scale_bits", "bound", "nonnegative",
          "primes", "max_rows_per_party", "max_rows_total", "mask_degree")
_WRITE_ORDER = tuple(sorted(PARAMETER_FIELDS, key=lambda f: _FIRST.index(f.name)
                            if f.name in _FIRST else len(_FIRST)))

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
    _known(session, "[session]", ("id", "protocol_version", "coordinator",
                                  *(f.name for f in SESSION_FIELDS)))
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
        **{f.name: session[f.name] for f in SESSION_FIELDS if f.name in session},
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


def line(key, value, comment=None) -> str:
    """``key = value`` with its comment aligned in column 41."""
    text = f"{key} = {_toml_value(value)}"
    return f"{text:<39} # {comment}" if comment else text


def parameter_lines(obj, fields) -> list:
    """One line per parameter of the table (TOML has no null: None is left out)."""
    return [line(f.name, getattr(obj, f.name), f.comment or f.help) for f in fields
            if getattr(obj, f.name) is not None]


def format_session_config(config: SessionConfig, base_dir) -> str:
    """The TOML text of ``config``; paths inside ``base_dir`` are written relative to it,
    others as absolute paths."""
    base = Path(os.path.normpath(Path(base_dir).absolute()))
    p, c, d, t = config.parameters, config.clustering, config.deadlines, config.tls

    lines = [
        "# omnifc session config: the coordinator and every party use this same file.",
        "# Paths are relative to this file's folder. Written by omnifc; safe to edit.",
        "",
        "[session]",
        line("id", config.session_id, "random 128-bit session id"),
        line("protocol_version", config.protocol_version),
        line("coordinator", config.coordinator, "host:port the parties connect to"),
        *parameter_lines(config, SESSION_FIELDS),
        "",
        "[parameters]",
        *parameter_lines(p, _WRITE_ORDER),
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
    from .._files import write_file

    path = Path(path).absolute()
    text = format_session_config(config, path.parent)
    return write_file(path, text.encode("utf-8"), overwrite=overwrite)
