"""Every SuperNode is one party. In a deployment its node config names the party, session
config, identity key and rows (.npy); in the simulation engine partition k is party-k, with
its key and rows in the run config's folders."""

from pathlib import Path

import numpy as np
from flwr.clientapp import ClientApp

from omnifc.flower import PartySetup, add_party, setup_from_node_config
from protocols import load_identity, load_session_config
from protocols._grpc_coordinator import parameters_from_config

app = ClientApp()


def _index(context) -> int:
    return int(context.node_config["partition-id"])


def rows(context):
    if "bench-data" in context.node_config:
        return np.load(str(context.node_config["bench-data"]))
    return np.load(Path(str(context.run_config["data-dir"])) / f"data-{_index(context)}.npy")


def setup(context):
    if "omnifc-party" in context.node_config:
        return setup_from_node_config(context)
    name = f"party-{_index(context)}"
    config = load_session_config(str(context.run_config["session-config"]))
    return PartySetup(name, config.session_id, parameters_from_config(config),
                      load_identity(Path(str(context.run_config["keys-dir"]))
                                    / f"{name}.identity.pem"),
                      {p.name: p.identity_public_key for p in config.parties}, config)


add_party(app, rows, setup=setup)
