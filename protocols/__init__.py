"""The share-exchange protocol: sans-IO state machines, cryptography and transports."""

import logging

from finite_field import (AuthenticationError, DeadlineError, DeviationError, InputError,
                          IntegrityError, OmniFCError, ParameterError, PeerError,
                          ProtocolError)
from finite_field import lazy_exports

# Submodules load on first use (PEP 562): a command or a party process pays only for the
# parts it touches (gRPC, cryptography, the numba kernels).
__getattr__, __dir__ = lazy_exports(__name__, {
    "._config": ["ClusteringRequest", "ConfigParameters", "Deadlines", "PartyEntry",
                 "SessionConfig", "TLSFiles", "TLSSettings", "dump_session_config",
                 "load_session_config", "new_session_id", "parameters_from_config",
                 "session_fingerprint", "validate_party_name"],
    "._cards": ["Card", "generate_keys", "load_card", "new_session_config"],
    "._identity": ["generate_identity", "identity_fingerprint", "load_identity",
                   "public_key_bytes", "public_key_hex", "save_identity", "sign", "verify"],
    "._tls": ["MAX_MESSAGE_BYTES", "authenticated_party", "channel_credentials",
              "coordinator_credentials", "make_channel", "make_server", "party_credentials",
              "peer_certificate_sha256", "peer_common_name", "server_credentials"],
    "._certificates": ["certificate_sha256", "check_own_keys"],
    "._demo_certificates": ["CertificateSet", "PartyFiles", "generate_certificates",
                            "IMPERSONATION_WARNING"],
    "._coordinator": ["PHASES", "Coordinator"],
    "._outcome": ["Outcome"],
    "._crypto": ["PROTOCOL_VERSION", "EphemeralKey", "PairKeys", "transcript"],
    "._memory": ["ReceivedMessage", "Transcript", "run_memory_session"],
    "._messages": ["SessionParameters", "parse_envelope", "envelope", "row_tiles"],
    "._party": ["Party"],
    "._fail_closed": ["as_protocol_error"],
    "._grpc_coordinator": ["CoordinatorServer", "coordinator_from_config"],
    "._grpc_local": ["LocalSession", "run_local_grpc_session"],
    "._party_processes": ["new_party_server"],
    # what omnifc (the next layer) uses besides the above; omnifc imports no private module
    "._accumulator": ["DistanceAccumulator"],
    "._distance_store": ["DistanceStore", "TiledDistances", "discard_store"],
    "._result_storage": ["DEFAULT_MEMORY_BUDGET", "DEFAULT_TILE_BYTES", "storage_dtype",
                         "rows_per_tile", "IncompleteResultError"],
    "._zarr_store": ["ZarrMatrix", "ZARR_COMPONENT", "require_zarr"],
    "._files": ["prepare_output_folder"],
    "._journal": ["Journal", "read_journal", "WORK_DIR", "why_not_journaled",
                  "open_serve_journal"],
    "._generated.omnifc_pb2": ["omnifc_pb2"],
    "._layouts": ["DEFAULT_MAX_PAIRS"],
    "._log_once": ["log_once", "log_once_scope"],
    "._mask_graph": ["check_distance_mask_degree", "collusion_threshold"],
    "._parameters": ["PARAMETER", "PARAMETERS", "add_parameter_options", "check_parameters",
                     "parameter_fields", "table_fields", "values_from_options"],
    # also run as ``python -m protocols._grpc_party`` (every party process): loading it only
    # on first use keeps runpy from warning that it was imported before it ran
    "._grpc_party": ["join_from_config", "run_party"],
    "._party_data": ["load_party_data"],
})

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
           # certificates (_certificates, _demo_certificates) and gRPC plumbing (_tls)
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
           "new_party_server",
           # used by omnifc: distance storage, audit, CLI, Flower
           "DEFAULT_MEMORY_BUDGET", "DEFAULT_TILE_BYTES", "DistanceAccumulator",
           "DistanceStore", "TiledDistances", "storage_dtype", "rows_per_tile",
           "IncompleteResultError", "ZarrMatrix", "ZARR_COMPONENT", "require_zarr",
           "EphemeralKey", "PairKeys", "transcript", "prepare_output_folder", "omnifc_pb2",
           "coordinator_from_config", "DEFAULT_MAX_PAIRS", "log_once", "log_once_scope",
           "check_distance_mask_degree", "collusion_threshold", "envelope", "row_tiles",
           "PARAMETER", "PARAMETERS", "add_parameter_options", "check_parameters",
           "parameter_fields", "table_fields", "values_from_options", "as_protocol_error",
           "IMPERSONATION_WARNING", "join_from_config", "load_party_data", "run_party",
           "discard_store", "Journal", "read_journal", "WORK_DIR", "why_not_journaled", "open_serve_journal"]

logging.getLogger(__name__).addHandler(logging.NullHandler())
