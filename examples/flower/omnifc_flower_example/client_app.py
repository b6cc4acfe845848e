"""The ClientApp: a Flower client that trains a numpy model, plus omnifc's party.

The omnifc lines are marked ``# omnifc``: the party handler (``query.omnifc``) sends this
node's descriptor through the secure distance session; ``train`` and ``evaluate`` are plain
Flower handlers (the strategy sends each node its cluster's model).
"""

from __future__ import annotations

from pathlib import Path

from flwr.app import Array, ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from omnifc.flower import PartySetup, add_party, setup_from_node_config  # omnifc
from protocols import load_identity, load_session_config  # omnifc
from protocols._grpc_coordinator import parameters_from_config  # omnifc

from .task import descriptor, evaluate, load_data, train

app = ClientApp()


def node_index(context: Context) -> int:
    """``org-k`` in a deployment (``--node-config 'omnifc-party="org-k" ...'``), else the
    simulation's ``partition-id``."""
    party = context.node_config.get("omnifc-party")
    return int(str(party).rsplit("-", 1)[1]) if party else int(context.node_config["partition-id"])


def party_setup(context: Context):  # omnifc
    """A deployment names its party, session config and identity key in the node config; a
    simulation (all nodes on one machine: a demo) finds them in the run config's keys-dir."""
    if "omnifc-party" in context.node_config:
        return setup_from_node_config(context)
    keys = Path(str(context.run_config["keys-dir"])).expanduser()
    name = f"org-{node_index(context)}"
    config = load_session_config(keys / "session.toml")
    return PartySetup(name, config.session_id, parameters_from_config(config),
                      load_identity(keys / f"{name}.identity.pem"),
                      {p.name: p.identity_public_key for p in config.parties}, config)


add_party(app, lambda context: descriptor(load_data(node_index(context))[0]),  # omnifc
          setup=party_setup)


@app.train()
def train_handler(message: Message, context: Context) -> Message:
    x, y = load_data(node_index(context))
    w = train(message.content["arrays"]["w"].numpy(), x, y)
    return Message(RecordDict({"arrays": ArrayRecord({"w": Array(w)}),
                               "metrics": MetricRecord({"num-examples": len(y),
                                                        "train-mse": evaluate(w, x, y)})}),
                   reply_to=message)


@app.evaluate()
def evaluate_handler(message: Message, context: Context) -> Message:
    x, y = load_data(node_index(context))
    mse = evaluate(message.content["arrays"]["w"].numpy(), x, y)
    return Message(RecordDict({"metrics": MetricRecord({"num-examples": len(y), "mse": mse})}),
                   reply_to=message)
