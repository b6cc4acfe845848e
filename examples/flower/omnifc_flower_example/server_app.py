"""The ServerApp: cluster the nodes through omnifc's secure distances, then one FedAvg
model per cluster (``omnifc.flower.ClusteredFedAvg``).

The server learns the clients' pairwise descriptor distances D (never a descriptor, share
or unmasked evaluation) and, as with Flower's FedAvg, every node's model update.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
from flwr.app import Array, ArrayRecord, Context
from flwr.serverapp import Grid, ServerApp

from omnifc.flower import ClusteredFedAvg, embedding  # omnifc
from protocols import load_session_config  # omnifc

from .task import FEATURES

app = ServerApp()
logger = logging.getLogger("omnifc.flower.example")


@app.main()
def main(grid: Grid, context: Context) -> None:
    run = context.run_config
    config = load_session_config(Path(str(run["keys-dir"])).expanduser() / "session.toml")
    timeouts = {"join_timeout": float(run["phase-timeout"])}
    if str(run["transport"]) != "grpc":  # one Flower message per node per step
        timeouts["phase_timeout"] = float(run["phase-timeout"])
    strategy = ClusteredFedAvg(  # omnifc: the clustering session, then FedAvg per cluster
        config, embedding("raw", n_clusters=int(run["n-clusters"])),
        transport=str(run["transport"]), workflow_options=timeouts)
    result = strategy.start(grid, ArrayRecord({"w": Array(np.zeros(FEATURES))}),
                            num_rounds=int(run["num-server-rounds"]))
    clusters = {result.parties[node]: c for node, c in result.labels.items()}
    logger.info("clusters: %s", clusters)
    final = result.evaluate_metrics.get(int(run["num-server-rounds"]), {})
    summary = {"clusters": clusters,
               "models": {str(c): m["w"].numpy().tolist() for c, m in result.models.items()},
               "mse": {str(c): float(m["mse"]) for c, m in final.items()},
               "round": result.outcomes[0].round,
               "transport": str(run["transport"]),
               "distances": result.distances.tolist()}
    print(json.dumps({"clusters": clusters, "mse": summary["mse"]}))
    if str(run["result-file"]):
        Path(str(run["result-file"])).write_text(json.dumps(summary))
