"""The share-exchange protocol: sans-IO state machines, cryptography and transports."""

from finite_field import (DeadlineError, DeviationError, InputError, IntegrityError,
                          OmniFCError, ParameterError, PeerError, ProtocolError)
from finite_field._lazy import lazy_exports

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
    "._tls": ["MAX_MESSAGE_BYTES", "CertificateSet", "PartyFiles", "authenticated_party",
              "certificate_sha256", "channel_credentials", "coordinator_credentials",
              "check_own_keys", "generate_certificates", "make_channel", "make_server",
              "party_credentials", "peer_certificate_sha256", "peer_common_name",
              "server_credentials"],
    "._coordinator": ["PHASES", "Coordinator", "Outcome"],
    "._crypto": ["PROTOCOL_VERSION"],
    "._memory": ["ReceivedMessage", "Transcript", "run_memory_session"],
    "._messages": ["SessionParameters", "parse_envelope"],
    "._party": ["Party"],
    "._grpc_coordinator": ["CoordinatorServer"],
    "._grpc_local": ["LocalSession", "run_local_grpc_session"],
})

__all__ = ["OmniFCError", "ParameterError", "InputError", "ProtocolError", "PeerError",
           "DeadlineError", "IntegrityError", "DeviationError",
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
           "CoordinatorServer", "run_local_grpc_session", "LocalSession"]
