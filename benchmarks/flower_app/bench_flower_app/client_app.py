"""Every SuperNode is one party. In a deployment its node config names the party, session
config, identity key and rows (.npy); in the simulation engine partition k is party-k, with
its key and rows in the run config's folders. Each handled message leaves its process's
stamps (``trace-client-*.json`` beside the rows) for bench_flower.py's breakdown."""

import time

from bench_flower_app import _trace

_STAMPS = {"process": _trace.process_start(), "module": time.time(),
           "cpu:module": time.process_time()}

import os  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
from flwr.clientapp import ClientApp  # noqa: E402

from omnifc.flower import ACTION, PartyHandler, PartySetup, setup_from_node_config  # noqa: E402
from protocols import load_identity, load_session_config  # noqa: E402
from protocols._grpc_coordinator import parameters_from_config  # noqa: E402

_STAMPS["imported"] = time.time()
_STAMPS["cpu:imported"] = time.process_time()

app = ClientApp()


def _index(context) -> int:
    return int(context.node_config["partition-id"])


def _folder(context) -> Path:
    if "bench-data" in context.node_config:
        return Path(str(context.node_config["bench-data"])).parent
    return Path(str(context.run_config["data-dir"]))


def rows(context):
    if "bench-data" in context.node_config:
        return np.load(str(context.node_config["bench-data"]))
    return np.load(_folder(context) / f"data-{_index(context)}.npy")


def setup(context):
    if "omnifc-party" in context.node_config:
        return setup_from_node_config(context)
    name = f"party-{_index(context)}"
    config = load_session_config(str(context.run_config["session-config"]))
    return PartySetup(name, config.session_id, parameters_from_config(config),
                      load_identity(Path(str(context.run_config["keys-dir"]))
                                    / f"{name}.identity.pem"),
                      {p.name: p.identity_public_key for p in config.parties}, config)


handler = PartyHandler(rows, setup=setup)


@app.query(ACTION)
def omnifc_party(message, context):
    reply = handler(message, context)
    stamps = dict(_STAMPS, **handler.timeline, returned=time.time(),
                  **{"cpu:returned": time.process_time()},
                  message=str(message.metadata.message_id), node=int(context.node_id),
                  pid=os.getpid())
    _trace.write(_folder(context) / f"trace-client-{context.node_id}-{time.time_ns()}.json",
                 stamps)
    return reply
