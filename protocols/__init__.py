"""The share-exchange protocol: sans-IO state machines, cryptography and transports."""

import logging

from finite_field import (AuthenticationError, DeadlineError, DeviationError, InputError,
                          IntegrityError, OmniFCError, ParameterError, PeerError,
                          ProtocolError)

from ._config import (ClusteringRequest, ConfigParameters, Deadlines, PartyEntry,
                      SessionConfig, TLSFiles, TLSSettings, dump_session_config,
                      load_session_config, new_session_id, parameters_from_config,
                      session_fingerprint, validate_party_name)
from ._cards import Card, generate_keys, load_card, new_session_config
from ._identity import (generate_identity, identity_fingerprint, load_identity,
                        public_key_bytes, public_key_hex, save_identity, sign, verify)
from ._tls import (MAX_MESSAGE_BYTES, CertificateSet, PartyFiles, authenticated_party,
                   certificate_sha256, channel_credentials, coordinator_credentials,
                   check_own_keys, generate_certificates, make_channel, make_server,
                   party_credentials,
                   peer_certificate_sha256, peer_common_name, server_credentials)
from ._coordinator import PHASES, Coordinator, Outcome
from ._crypto import PROTOCOL_VERSION
from ._memory import ReceivedMessage, Transcript, run_memory_session
from ._messages import SessionParameters, parse_envelope
from ._party import Party
from ._grpc_coordinator import CoordinatorServer
from ._grpc_local import LocalSession, run_local_grpc_session
# what omnifc (the next layer) uses besides the above; omnifc imports no private module
from ._accumulator import (DEFAULT_MEMORY_BUDGET, DEFAULT_TILE_BYTES, DistanceAccumulator,
                           DistanceStore, TiledDistances, storage_dtype)
from ._accumulator import _rows_per_tile as rows_per_tile
from ._crypto import EphemeralKey, PairKeys
from ._files import prepare_output_folder
from ._generated import omnifc_pb2
from ._grpc_coordinator import coordinator_from_config
from ._layouts import DEFAULT_MAX_PAIRS
from ._log_once import log_once, log_once_scope
from ._mask_graph import check_distance_mask_degree, collusion_threshold
from ._messages import envelope, row_tiles
from ._parameters import (PARAMETER, PARAMETERS, add_parameter_options, check_parameters,
                          parameter_fields, table_fields, values_from_options)
from ._party import as_protocol_error
from ._tls import IMPERSONATION_WARNING

#: Names of ``protocols._grpc_party``, imported on first use: that module is also run as
#: ``python -m protocols._grpc_party`` (every party process), and importing it with the
#: package would make runpy warn that it was imported before it ran.
_PARTY_PROCESS = ("join_from_config", "load_party_data")


def __getattr__(name):
    if name in _PARTY_PROCESS:
        from . import _grpc_party
        return getattr(_grpc_party, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


logging.getLogger(__name__).addHandler(logging.NullHandler())

__all__ = ["OmniFCError", "ParameterError", "InputError", "ProtocolError", "PeerError",
           "DeadlineError", "AuthenticationError", "IntegrityError", "DeviationError",
           # session config (_config)
           "SessionConfig", "ConfigParameters", "ClusteringRequest", "Deadlines",
           "TLSSettings", "TLSFiles", "PartyEntry", "load_session_config",
           "dump_session_config", "new_session_id", "validate_party_name",
           "session_fingerprint", "parameters_from_config",
           # the key ceremony (_cards)
           "Card", "generate_keys", "load_card", "new_session_config",
           # identity keys (_identity)
           "generate_identity", "save_identity", "load_identity", "public_key_bytes",
           "public_key_hex", "identity_fingerprint", "sign", "verify",
           # certificates and gRPC plumbing (_tls)
           "generate_certificates", "CertificateSet", "PartyFiles", "certificate_sha256",
           "server_credentials", "channel_credentials", "coordinator_credentials",
           "party_credentials", "make_server", "make_channel", "peer_common_name",
           "peer_certificate_sha256", "authenticated_party", "MAX_MESSAGE_BYTES",
           "check_own_keys",
           # the share-exchange protocol (sans-IO core and in-memory transport)
           "PROTOCOL_VERSION", "SessionParameters", "Party", "Coordinator", "Outcome",
           "PHASES", "run_memory_session", "Transcript", "ReceivedMessage",
           "parse_envelope",
           # gRPC transport
           "CoordinatorServer", "run_local_grpc_session", "LocalSession",
           # used by omnifc: distance storage, audit, CLI, Flower
           "DEFAULT_MEMORY_BUDGET", "DEFAULT_TILE_BYTES", "DistanceAccumulator",
           "DistanceStore", "TiledDistances", "storage_dtype", "rows_per_tile",
           "EphemeralKey", "PairKeys", "prepare_output_folder", "omnifc_pb2",
           "coordinator_from_config", "DEFAULT_MAX_PAIRS", "log_once", "log_once_scope",
           "check_distance_mask_degree", "collusion_threshold", "envelope", "row_tiles",
           "PARAMETER", "PARAMETERS", "add_parameter_options", "check_parameters",
           "parameter_fields", "table_fields", "values_from_options", "as_protocol_error",
           "IMPERSONATION_WARNING", "join_from_config", "load_party_data"]
