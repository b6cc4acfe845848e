"""One secure-distance session over the Grid (or, with ``strategy``, ClusteredFedAvg's
clustering step: the session, each node's party binding, the clustering); its time, bytes
and result digest as JSON, with this process's stamps and the workflow's timeline for
bench_flower.py's breakdown."""

import time

from bench_flower_app import _trace

_STAMPS = {"process": _trace.process_start(), "module": time.time()}

import hashlib  # noqa: E402
import json  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
from flwr.serverapp import ServerApp  # noqa: E402

from omnifc.flower import (ClusteredFedAvg, GrpcDataPlaneWorkflow,  # noqa: E402
                           SecureDistanceWorkflow, embedding)
from protocols import load_session_config  # noqa: E402
from protocols._grpc_coordinator import parameters_from_config  # noqa: E402

_STAMPS["imported"] = time.time()

app = ServerApp()


@app.main()
def main(grid, context):
    _STAMPS["main"] = time.time()
    run = context.run_config
    config = load_session_config(str(run["session-config"]))
    if str(run["transport"]) == "grpc":  # one Flower message per node, omnifc's gRPC
        workflow = GrpcDataPlaneWorkflow(config, join_timeout=float(run["phase-timeout"]))
    else:  # one Flower message per node per step
        workflow = SecureDistanceWorkflow(
            config.session_id, parameters_from_config(config),
            {p.name: p.identity_public_key for p in config.parties},
            phase_timeout=float(run["phase-timeout"]),
            join_timeout=float(run["phase-timeout"]))
    bound = None
    # the strategy (and its adapter's imports) is made before the clock starts, as the
    # ServerApp would before its first round: timed is the clustering step itself
    strategy = (ClusteredFedAvg(workflow, embedding("raw", n_clusters=2))
                if bool(run["strategy"]) else None)
    _STAMPS["start"] = time.time()
    start = time.perf_counter()
    if strategy is not None:  # ClusteredFedAvg's clustering step: session + node binding
        labels, result = strategy.cluster(grid)
        outcome, bound = result.outcomes[0], len(labels)
    else:
        outcome = workflow(grid)
    seconds = time.perf_counter() - start
    _STAMPS["end"] = time.time()
    if strategy is None and isinstance(workflow, GrpcDataPlaneWorkflow):
        # after the clock: the nodes' replies and binding proofs (nothing of the bare
        # session depends on them; the strategy checks them before it sends a label)
        bound = len(workflow.bind())
    integer = np.ascontiguousarray(outcome.integer, dtype=np.int64)
    Path(str(run["result-file"])).write_text(json.dumps({
        "seconds": seconds, "stats": outcome.stats, "round": outcome.round,
        "responders": outcome.responders, "primes": outcome.parameters["primes"],
        "sha256": hashlib.sha256(integer.tobytes()).hexdigest(),
        "transport": str(run["transport"]), "strategy": bool(run["strategy"]),
        "bound": bound, "stamps": _STAMPS,
        "timeline": dict(getattr(workflow, "timeline", {}))}))
