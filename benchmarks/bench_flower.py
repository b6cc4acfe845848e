"""Flower path vs omnifc's native gRPC path: one secure-distance session, same data, same run.

n = 2000 rows, d = 16, at m = 3 and m = 10 parties (l = 1, t = 1, masked mode, q = 12), as
``bench_protocol.py``. Alternating, ``--repeats`` times each:

- **native**: ``run_local_grpc_session`` (one process per party, mutual TLS on loopback),
  wall time from the parties' process start to the result;
- **Flower**: ``flwr run`` of ``benchmarks/flower_app``, whose ServerApp runs
  :class:`omnifc.flower.GrpcDataPlaneWorkflow` (``--transport grpc``, the default: one Flower
  message per node, the session over omnifc's gRPC + mutual TLS to the coordinator the
  ServerApp hosts; ``--strategy``: :class:`omnifc.flower.ClusteredFedAvg`'s clustering step
over it, the session plus every node's party-binding proof checked) or
:class:`omnifc.flower.SecureDistanceWorkflow` (``--transport flower``:
  one Flower message per node per step), on a local deployment (``--engine
  deployment``, the default: one ``flower-superlink`` and m ``flower-supernode`` processes on
  127.0.0.1, Flower's insecure transport: omnifc's shares stay end-to-end encrypted and its
  evaluations masked; every message runs in a fresh ClientApp process, which imports omnifc
  and rebuilds the party from its Context) or in Flower's simulation engine (``--engine
  simulation``: the ClientApps live in Ray actors, so the party stays in memory). Its wall time is the
  workflow's (from the first message to the result; Flower starts a ClientApp process per
  message, which is included); ``flwr run`` end to end (app install, ServerApp start) is
  shown too. The SuperLink and SuperNodes are started once per m and are not timed (a
  deployment runs them all along).

Bytes are omnifc's envelopes as the coordinator counts them (``Outcome.stats``), the same for
both paths; Flower's own framing is not counted. Both paths must return the same integer D
(compared by digest). Goal (issue 21): the Flower path within 2x of the native one.

    python benchmarks/bench_flower.py [--n 2000] [--dim 16] [--parties 3,10] [--repeats 3]

Needs flwr (``pip install "omnifc[flower]"``) and its ``flower-superlink``,
``flower-supernode`` and ``flwr`` commands beside this interpreter. ``--quick``: n = 200,
m = 3, one run each, no warm-up (a smoke run: its ratios say little); ``--json PATH`` saves the figures;
``--check`` exits 1 when the goal is missed.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

from omnifc.flower._local import LocalProcesses, free_port, wait_listening
from protocols import SessionParameters
from protocols._config import SESSION_FIELDS, ConfigParameters, Deadlines
from protocols._grpc_local import run_local_grpc_session
from protocols._demo_certificates import generate_certificates

ROOT = pathlib.Path(__file__).resolve().parents[1]
APP = ROOT / "benchmarks" / "flower_app"
BIN = pathlib.Path(sys.executable).parent
GOAL = 2.0


def _tool(name: str) -> str:
    path = BIN / name
    if not path.exists():
        raise SystemExit(f"bench_flower: {name} is not installed beside {sys.executable} "
                         "(pip install 'omnifc[flower]')")
    return str(path)


class FlowerDeployment:
    """A SuperLink and one SuperNode per party on loopback (``engine="deployment"``), or a
    SuperLink running Flower's simulation engine with one simulated SuperNode per party
    (``engine="simulation"``), each process in its own session; closing kills them and
    every process they started."""

    def __init__(self, folder: pathlib.Path, data: dict, session_config: pathlib.Path,
                 identity: dict, engine: str = "deployment", transport: str = "grpc",
                 strategy: bool = False) -> None:
        self.folder = folder
        self.parties = len(data)
        self.engine = engine
        self.port = free_port()
        self.home = folder / "flwr-home"
        self.home.mkdir()
        options = ""
        if engine == "simulation":
            options = (f"options.num-supernodes = {len(data)}\n"
                       "options.backend.client-resources.num-cpus = 1\n")
            if transport == "grpc":
                # every party's ClientApp runs the whole session at once: as many actors
                # as parties (Ray is told of m logical CPUs; the machine's cores are shared)
                options += f"options.backend.init-args.num-cpus = {len(data)}\n"
        (self.home / "config.toml").write_text(
            '[superlink]\ndefault = "bench"\n\n[superlink.bench]\n'
            f'address = "127.0.0.1:{self.port}"\ninsecure = true\n{options}')
        self.extra = (f' transport="{transport}" strategy={str(bool(strategy)).lower()}'
                      f' keys-dir="{pathlib.Path(str(identity[next(iter(data))])).parent}"'
                      f' data-dir="{folder}"')
        env = dict(os.environ)
        env.update({"FLWR_HOME": str(self.home), "FLWR_DISABLE_UPDATE_CHECK": "1",
                    "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
                    # the SuperExecs look for a ClientApp / ServerApp to start every 1 s by
                    # default (flwr 1.42's run_superexec.py); the SuperNode's 3 s idle poll
                    # has no option
                    "FLWR_SUPEREXEC_TASK_POLL_INTERVAL": "0.1",
                    "PATH": f"{BIN}{os.pathsep}{env['PATH']}",
                    "PYTHONPATH": os.pathsep.join([str(ROOT)] + [
                        p for p in [env.get("PYTHONPATH")] if p])})
        self.env = env
        self.processes = LocalProcesses(folder)
        try:
            superlink = self.processes.start("superlink", [
                _tool("flower-superlink"), "--insecure", "--host", "127.0.0.1", "--port",
                str(self.port), "--database", ":flwr-in-memory:",
                "--disable-runtime-dependency-installation"]
                + (["--simulation"] if engine == "simulation" else []), env)
            wait_listening(self.port, superlink)
            for i, name in enumerate(data):
                rows = folder / f"data-{i}.npy"
                np.save(rows, np.asarray(data[name], dtype=np.float64))
                if engine == "simulation":
                    continue
                config = (f'omnifc-party="{name}" omnifc-session-config="{session_config}" '
                          f'omnifc-identity="{identity[name]}" bench-data="{rows}"')
                self.processes.start(f"supernode-{i}", [
                    _tool("flower-supernode"), "--insecure", "--superlink",
                    f"127.0.0.1:{self.port}", "--host", "127.0.0.1", "--port",
                    str(free_port()), "--node-config", config], env)
        except BaseException:
            self.close()
            raise

    def run(self, session_config: pathlib.Path, timeout: float) -> tuple[dict, float]:
        result = self.folder / f"result-{time.monotonic_ns()}.json"
        overrides = f'session-config="{session_config}" result-file="{result}"' + self.extra
        for old in self.folder.glob("trace-client-*.json"):  # the last run's stamps
            old.unlink()
        launched = time.time()
        start = time.perf_counter()
        done = subprocess.run([_tool("flwr"), "run", ".", "bench", "--stream", "--run-config",
                               overrides], cwd=APP, env=self.env, capture_output=True,
                              timeout=timeout)
        deadline = time.monotonic() + 30
        while not result.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        wall = time.perf_counter() - start
        if not result.exists():
            raise RuntimeError("the Flower run produced no result:\n"
                               + (done.stdout + done.stderr).decode(errors="replace")[-3000:])
        figures = json.loads(result.read_text())
        deadline = time.monotonic() + 10  # the ClientApps write their stamps on return
        while (len(list(self.folder.glob("trace-client-*.json"))) < self.parties
               and time.monotonic() < deadline):
            time.sleep(0.1)
        figures["clients"] = [json.loads(path.read_text())
                              for path in sorted(self.folder.glob("trace-client-*.json"))]
        figures["stamps"]["launched"] = launched
        return figures, wall

    def close(self) -> None:
        self.processes.stop()


#: The breakdown's events, in order: (label, where, key). ``where`` is "server" (the
#: ServerApp process's stamps), "workflow" (GrpcDataPlaneWorkflow.timeline), "client" (one
#: value per node: its ClientApp process's stamps and PartyHandler.timeline) or "reply"
#: (one per node: when the ServerApp pulled its reply).
EVENTS = [
    ("`flwr run` launched", "server", "launched"),
    ("ServerApp process started", "server", "process"),
    ("ServerApp imports done", "server", "imported"),
    ("workflow called (clock starts)", "workflow", "call"),
    ("coordinator listening", "workflow", "listening"),
    ("start messages pushed", "workflow", "pushed"),
    ("ClientApp process started", "client", "process"),
    ("ClientApp module loading (flwr loaded)", "client", "module"),
    ("ClientApp imports done", "client", "imported"),
    ("handler entered", "client", "handler"),
    ("party built", "client", "party"),
    ("party got the roster", "client", "party:shares"),
    ("coordinator: all joined (shares)", "workflow", "phase:shares"),
    ("coordinator: evaluation", "workflow", "phase:evaluation"),
    ("coordinator: decode", "workflow", "phase:decode"),
    ("coordinator: result final", "workflow", "outcome"),
    ("workflow returns (clock stops)", "workflow", "returned"),
    ("party's session ended", "client", "ended"),
    ("ClientApp handler returned", "client", "returned"),
    ("reply seen by the ServerApp (bind)", "reply", None),
    ("proofs checked (bind)", "workflow", "bound"),
]


def breakdown(figures: dict) -> list:
    """[(label, first, last)] seconds after ``workflow called`` (first and last node for
    per-node events; the same twice otherwise; None where the stamp is missing)."""
    timeline, stamps = figures.get("timeline") or {}, figures.get("stamps") or {}
    zero = timeline.get("call")
    if zero is None:
        return []
    rows = []
    for label, where, key in EVENTS:
        if where == "server":
            values = [stamps.get(key)]
        elif where == "workflow":
            values = [timeline.get(key)]
        elif where == "client":
            values = [c.get(key) for c in figures.get("clients", [])]
        else:
            values = [v for k, v in timeline.items() if k.startswith("reply:")]
        values = [v - zero for v in values if v is not None and v == v]
        rows.append((label, min(values), max(values)) if values else (label, None, None))
    return rows


def client_cpu(figures: dict) -> list:
    """Per ClientApp process, CPU seconds (all threads): before its module loaded (Python,
    flwr, the FAB), the module's imports (numpy, omnifc), and the handler (the party's
    session, numba's start and kernel loads included)."""
    return [(c["cpu:module"], c["cpu:imported"] - c["cpu:module"],
             c["cpu:returned"] - c["cpu:imported"])
            for c in figures.get("clients", []) if "cpu:returned" in c]


def _median_breakdown(runs: list) -> list:
    """The per-event medians of several runs' :func:`breakdown`."""
    out = []
    for i, (label, _, _) in enumerate(EVENTS):
        firsts = [r[i][1] for r in runs if r and r[i][1] is not None]
        lasts = [r[i][2] for r in runs if r and r[i][2] is not None]
        out.append((label, statistics.median(firsts) if firsts else None,
                    statistics.median(lasts) if lasts else None))
    return out


def print_breakdown(row: dict) -> None:
    """The median timeline of the Flower runs of one row, as a Markdown table."""
    print(f"\nm = {row['parties']}: where the Flower path's time goes (seconds after the "
          f"workflow is called; medians of {row['runs']} runs; per-node events: first and "
          "last node)")
    print("| event | first | last |\n|---|---|---|")
    for label, first, last in row["breakdown"]:
        if first is None:
            print(f"| {label} | - | - |")
        else:
            print(f"| {label} | {first:+.2f} | {last:+.2f} |")
    cpu = row.get("client_cpu") or [None]
    if cpu[0] is not None:
        print(f"CPU seconds per ClientApp process (median): {cpu[0]:.2f} before its module "
              f"(Python, flwr, the FAB), {cpu[1]:.2f} its imports (numpy, omnifc), "
              f"{cpu[2]:.2f} the handler (the party's session)")


def _total_bytes(stats: dict) -> int:
    return int(sum(v[1] for v in stats.values()))


def _digest(outcome) -> str:
    return hashlib.sha256(np.ascontiguousarray(outcome.integer, dtype=np.int64).tobytes()
                          ).hexdigest()


#: How many ClientApps flwr 1.42's simulation engine runs at once: its VCE backend hands
#: messages to a ThreadPoolExecutor() (vce_api.py), min(32, CPUs + 4) threads.
SIMULATION_CONCURRENCY = min(32, (os.cpu_count() or 1) + 4)


def bench(n: int, dim: int, parties: int, scale_bits: int, repeats: int, timeout: float,
          warmup: bool = True, engine: str = "deployment", transport: str = "grpc",
          strategy: bool = False):
    if engine == "simulation" and transport == "grpc" and parties > SIMULATION_CONCURRENCY:
        # over the gRPC data plane every party's ClientApp must run at once; the others
        # would wait for a thread while the session waits for them (until its join deadline)
        raise SystemExit(f"bench_flower: the simulation engine runs {SIMULATION_CONCURRENCY} "
                         f"ClientApps at once on {os.cpu_count()} CPUs, m = {parties} parties "
                         "over the gRPC data plane need them all at once: use --transport "
                         "flower")
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (n, dim))
    bounds = np.linspace(0, n, parties + 1).astype(int)
    data = {f"party-{i}": x[bounds[i]:bounds[i + 1]] for i in range(parties)}
    params = SessionParameters(dim=dim, bound=1.0, scale_bits=scale_bits)
    folder = pathlib.Path(tempfile.mkdtemp(prefix="omnifc-bench-flower-"))
    try:
        certs = generate_certificates(
            # the gRPC data plane's coordinator listens in the ServerApp on this port
            folder / "certs", list(data), coordinator_address=f"127.0.0.1:{free_port()}",
            parameters=ConfigParameters.of(params),
            deadlines=Deadlines(join=timeout, shares=timeout, evaluation=timeout,
                                result=timeout),
            **{f.name: getattr(params, f.name) for f in SESSION_FIELDS})
        identity = {name: folder / "certs" / f"{name}.identity.pem" for name in data}
        deployment = FlowerDeployment(folder, data, certs.config, identity, engine, transport,
                                      strategy)
        native, flower, flower_run, digests, traces = [], [], [], set(), []
        cpu: list = []
        try:
            if warmup:  # app install, first imports and numba caches, on both paths
                deployment.run(certs.config, timeout)
                run_local_grpc_session(data, params, deadline=timeout)
            for _ in range(repeats):
                start = time.perf_counter()
                outcome = run_local_grpc_session(data, params, deadline=timeout)
                native.append((time.perf_counter() - start, _total_bytes(outcome.stats)))
                digests.add(("native", _digest(outcome)))
                figures, wall = deployment.run(certs.config, timeout)
                if transport == "grpc" and figures["bound"] != parties:
                    raise RuntimeError(f"the strategy bound {figures['bound']} of {parties} "
                                       "parties to their nodes")
                flower.append((figures["seconds"], _total_bytes(figures["stats"])))
                flower_run.append(wall)
                traces.append(breakdown(figures))
                cpu.extend(client_cpu(figures))
                digests.add(("flower", figures["sha256"]))
        finally:
            deployment.close()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    if len({d for _, d in digests}) != 1:
        raise RuntimeError(f"the two paths returned different D: {sorted(digests)}")
    native_s = statistics.median(s for s, _ in native)
    flower_s = statistics.median(s for s, _ in flower)
    return {"parties": parties, "runs": repeats, "engine": engine, "transport": transport,
            "strategy": bool(strategy),
            "native_seconds": native_s, "native_bytes": statistics.median(b for _, b in native),
            "flower_seconds": flower_s, "flower_bytes": statistics.median(b for _, b in flower),
            "flower_run_seconds": statistics.median(flower_run),
            "native_all": [s for s, _ in native], "flower_all": [s for s, _ in flower],
            "ratio": flower_s / native_s, "goal_met": flower_s / native_s <= GOAL,
            "breakdown": _median_breakdown(traces),
            "client_cpu": [statistics.median(c[i] for c in cpu) if cpu else None
                           for i in range(3)]}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--dim", type=int, default=16)
    parser.add_argument("--parties", default="3,10", help="comma-separated m values")
    parser.add_argument("--scale-bits", type=int, default=12)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=900.0,
                        help="seconds allowed per run and per phase")
    parser.add_argument("--engine", choices=("deployment", "simulation"), default="deployment",
                        help="the Flower runtime: SuperNode processes (a ClientApp process "
                             "per message) or the simulation engine (Ray actors)")
    parser.add_argument("--transport", choices=("grpc", "flower"), default="grpc",
                        help="the Flower path's data plane: one Flower message per node and "
                             "the session over omnifc's gRPC (GrpcDataPlaneWorkflow), or one "
                             "Flower message per node per step (SecureDistanceWorkflow)")
    parser.add_argument("--strategy", action="store_true",
                        help="time ClusteredFedAvg's clustering step on the Flower path (the "
                             "session, each node's party binding, the clustering) instead of "
                             "the bare workflow")
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: n = 200, m = 3, one run each")
    parser.add_argument("--json", metavar="PATH", help="also write the figures as JSON")
    parser.add_argument("--trace", action="store_true",
                        help="print where the Flower path's time goes (gRPC data plane: "
                             "the ServerApp's, the workflow's and every ClientApp's stamps)")
    parser.add_argument("--check", action="store_true", help="exit 1 when the goal is missed")
    args = parser.parse_args(argv)
    parties = [int(m) for m in str(args.parties).split(",") if m.strip()]
    if args.quick:
        args.n, args.repeats, parties = min(args.n, 200), 1, [3]
    load_before = os.getloadavg()
    now = datetime.datetime.now(datetime.timezone.utc)
    rows = []
    for m in parties:
        row = bench(args.n, args.dim, m, args.scale_bits, args.repeats, args.timeout,
                    warmup=not args.quick, engine=args.engine, transport=args.transport,
                    strategy=args.strategy)
        rows.append(row)
        what = f"{args.engine}, {args.transport}" + (", strategy" if args.strategy else "")
        print(f"m={m:<3} [{what}] native gRPC+TLS {row['native_seconds']:8.2f} s "
              f"{row['native_bytes'] / 1e6:9.2f} MB | Flower {row['flower_seconds']:8.2f} s "
              f"{row['flower_bytes'] / 1e6:9.2f} MB (flwr run end to end "
              f"{row['flower_run_seconds']:.2f} s) | ratio {row['ratio']:5.2f}x "
              f"(goal <= {GOAL:g}x: {'met' if row['goal_met'] else 'NOT met'})", flush=True)
        if args.trace:
            print_breakdown(row)
    print(f"bench_flower: n={args.n} d={args.dim} q={args.scale_bits} l=1 t=1 masked, "
          f"medians of {args.repeats} runs; same integer D on both paths; load average "
          f"{load_before[0]:.2f} before, {os.getloadavg()[0]:.2f} after, on "
          f"{os.cpu_count()} CPUs")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"date": f"{now:%Y-%m-%d %H:%M} UTC", "quick": bool(args.quick),
                       "n": args.n, "dim": args.dim, "scale_bits": args.scale_bits,
                       "cpu_count": os.cpu_count(), "load_before": list(load_before),
                       "load_after": list(os.getloadavg()), "rows": rows}, fh, indent=2)
    missed = [row["parties"] for row in rows if not row["goal_met"]]
    if missed:
        print(f"goal missed at m = {missed}", file=sys.stderr)
    return 1 if (args.check and missed) else 0


if __name__ == "__main__":
    sys.exit(main())
