"""The TOML session config every party and the coordinator share.

One file describes a session: its id, the coordinator's address, the public parameters
(d, l, t, q, R, primes), the aggregation mode, the clustering request, a deadline for every
wait, the TLS files, and every party with its *pinned* Ed25519 identity key and TLS
certificate fingerprint. ``omnifc certs`` writes a ready-to-use one.

The package has one module per topic: the schema (:mod:`._schema`, whose parameter fields
come from the parameter table of :mod:`protocols._parameters`), reading and writing TOML
(:mod:`._toml`) and the session fingerprint (:mod:`._fingerprint`). Every value is
validated with an error that names the key and the bad value. Relative paths are resolved
against the config file's folder.

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

from ._schema import (INTEGRITY, MAX_DEADLINE_SECONDS, MAX_DIM, MAX_ROWS, MODES,
                      PARAMETER_FIELDS, PROTOCOL_VERSION, SESSION_FIELDS, _METHOD, _NAME,
                      _SESSION_ID, ClusteringRequest, ConfigParameters, Deadlines, PartyEntry,
                      SessionConfig, TLSFiles, TLSSettings, _bool, _certificate,
                      _check_fingerprint, _hex_bytes, _int, _path, _positive_number, _show,
                      new_session_id, parameters_from_config, split_address,
                      validate_party_name)
from ._fingerprint import canonical_session, session_fingerprint
from ._toml import (_fields, _known, _pem_line, _relative, _resolve, _table, _toml_string,
                    _toml_value, dump_session_config, format_session_config,
                    load_session_config, logger, session_config_from_dict)

__all__ = ["SessionConfig", "ConfigParameters", "ClusteringRequest", "Deadlines",
           "TLSSettings", "PartyEntry", "TLSFiles", "load_session_config",
           "dump_session_config", "format_session_config", "new_session_id",
           "validate_party_name", "split_address", "PROTOCOL_VERSION", "MODES", "INTEGRITY",
           "session_fingerprint", "canonical_session", "parameters_from_config", "MAX_DIM",
           "MAX_ROWS", "MAX_DEADLINE_SECONDS", "session_config_from_dict"]
