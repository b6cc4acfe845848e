"""omnifc on Flower: secure distances and clustering as a Flower workflow (``omnifc[flower]``).

A ServerApp runs :class:`SecureDistanceWorkflow` (omnifc's coordinator over Flower's Grid
and Message API), :class:`GrpcDataPlaneWorkflow` (one Flower message per node, the session
over omnifc's own gRPC + mutual TLS, each node proving which party it ran), or
:class:`ClusteredFedAvg` (a Flower strategy over either: cluster the clients through the
secure D on an adapter's :class:`Embedding` (raw, CLoVE, Client2Vec, FLUX, FMCL), then one
FedAvg per cluster, newcomers assigned to the nearest cluster); every ClientApp registers
omnifc's party with
:func:`add_party` (a ``query.omnifc`` handler whose party state lives in the node's
Context). Flower's server is untrusted like omnifc's coordinator: it relays ciphertexts and
sees masked tiles and D. See docs/flower.md.

Names load on first use. This subpackage imports flwr when the strategy module loads (``ClusteredFedAvg`` subclasses
Flower's FedAvg) and when a message is built or handled: the ``protocols`` package never
imports it.
"""

from finite_field import lazy_exports

# Every name loads on first use (PEP 562): a ClientApp that only registers the party
# (``add_party``) does not import the ServerApp's workflow, strategy or embeddings.
__getattr__, __dir__ = lazy_exports(__name__, {
    "._client": ["KeystreamSource", "PartyHandler", "PartySetup", "add_party", "party_status",
                 "setup_from_node_config"],
    "._constants": ["ACTION", "MESSAGE_TYPE"],
    "._binding": ["NodeBindingError"],
    "._server": ["GrpcDataPlaneWorkflow", "SecureDistanceWorkflow", "distance_workflow"],
    "._embeddings": ["EMBEDDINGS", "FMCL_PARTS", "Embedding", "client_distances", "embedding",
                     "fmcl_dims", "fmcl_exact_parameters", "fmcl_exact_rows", "fmcl_rows"],
    "._strategy": ["ClusteredFedAvg", "ClusteredResult"],
})

__all__ = ["SecureDistanceWorkflow", "GrpcDataPlaneWorkflow", "distance_workflow",
           "ClusteredFedAvg", "ClusteredResult", "Embedding", "EMBEDDINGS", "embedding",
           "client_distances", "fmcl_rows", "fmcl_dims", "fmcl_exact_rows",
           "fmcl_exact_parameters", "FMCL_PARTS", "NodeBindingError",
           "PartyHandler", "PartySetup", "add_party", "party_status", "setup_from_node_config",
           "KeystreamSource", "ACTION", "MESSAGE_TYPE"]
