"""examples/flower runs as Flower runs apps: ``flwr run .`` in the simulation engine, and as a
local deployment of real ``flower-superlink`` and ``flower-supernode`` processes.

Everything listens on 127.0.0.1 on free ports, with Flower's insecure (plaintext HTTP)
transport: omnifc's guarantees do not depend on Flower's transport (shares are end-to-end
encrypted, evaluations masked, hellos signed under pinned keys). Every process runs in its
own process group, killed in ``finally``; FLWR_HOME is a temporary folder; runtime
dependency installation is disabled (the venv already holds flwr and omnifc).
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import time

import numpy as np
import pytest

pytest.importorskip("flwr", reason="flwr is not installed (pip install 'omnifc[flower]'); "
                    ".ci/protobuf_matrix.sh runs these tests in its low venv")

from omnifc.flower._local import LocalProcesses, free_port, wait_listening  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "flower"
BIN = pathlib.Path(sys.executable).parent
NODES = 6
GROUPS = 3

pytestmark = [pytest.mark.network, pytest.mark.slow]


def _tool(name: str) -> str:
    path = BIN / name
    if not path.exists():
        pytest.skip(f"{name} is not installed beside {sys.executable}")
    return str(path)


def _env(home: pathlib.Path) -> dict:
    env = dict(os.environ)
    env.update({"FLWR_HOME": str(home), "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
                "FLWR_DISABLE_UPDATE_CHECK": "1",
                # the SuperExecs look for an app to start every 0.1 s, not every 1 s
                "FLWR_SUPEREXEC_TASK_POLL_INTERVAL": "0.1", "PATH": f"{BIN}{os.pathsep}{env['PATH']}",
                # the ServerApp and ClientApp processes import this checkout's packages
                "PYTHONPATH": os.pathsep.join([str(ROOT)] + [p for p in [env.get("PYTHONPATH")] if p])})
    return env


def _keys(folder: pathlib.Path) -> pathlib.Path:
    """The demo key ceremony for org-0..org-5 (one machine: a test shortcut); the
    coordinator address (the gRPC data plane's) is a free loopback port."""
    subprocess.run([sys.executable, "-m", "omnifc", "certs", "--out", str(folder),
                    "--parties", ",".join(f"org-{i}" for i in range(NODES)), "--dim", "4",
                    "--bound", "16", "--scale-bits", "8", "--adversaries", "0",
                    "--coordinator-address", f"127.0.0.1:{free_port()}"],
                   check=True, capture_output=True, cwd=ROOT, env=_env(folder.parent),
                   timeout=120)
    return folder


def _connection(home: pathlib.Path, port: int, options: str = "") -> None:
    home.mkdir(exist_ok=True)
    (home / "config.toml").write_text(
        '[superlink]\ndefault = "test"\n\n[superlink.test]\n'
        f'address = "127.0.0.1:{port}"\ninsecure = true\n{options}')


def _superlink(processes: LocalProcesses, env: dict, port: int, *, simulation: bool):
    argv = [_tool("flower-superlink"), "--insecure", "--host", "127.0.0.1", "--port",
            str(port), "--database", ":flwr-in-memory:",
            "--disable-runtime-dependency-installation"]
    if simulation:
        argv += ["--simulation"]
    process = processes.start("superlink", argv, env)
    wait_listening(port, process)
    return process


def _flwr_run(processes: LocalProcesses, env: dict, keys: pathlib.Path, result: pathlib.Path,
              timeout: float, rounds: int, transport: str = "flower") -> None:
    overrides = (f'keys-dir="{keys}" result-file="{result}" phase-timeout=120.0 '
                 f'num-server-rounds={rounds} transport="{transport}"')
    run = subprocess.run([_tool("flwr"), "run", ".", "test", "--stream", "--run-config",
                          overrides], cwd=EXAMPLE, env=env, capture_output=True,
                         timeout=timeout)
    (processes.folder / "flwr-run.log").write_bytes(run.stdout + run.stderr)
    deadline = time.monotonic() + 30  # --stream returns at the run's end; the file is there
    while not result.exists() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert result.exists(), (run.stdout + run.stderr).decode(errors="replace")[-4000:]


def _check_result(result: pathlib.Path) -> dict:
    """The planted groups (org-k in group k % 3) come back, and the cluster models differ."""
    summary = json.loads(result.read_text())
    clusters = summary["clusters"]
    assert sorted(clusters) == [f"org-{i}" for i in range(NODES)]
    found = {frozenset(p for p, c in clusters.items() if c == label)
             for label in set(clusters.values())}
    planted = {frozenset(f"org-{i}" for i in range(NODES) if i % GROUPS == g)
               for g in range(GROUPS)}
    assert found == planted
    models = [np.array(m) for m in summary["models"].values()]
    assert len(models) == GROUPS
    assert min(np.linalg.norm(a - b) for i, a in enumerate(models)
               for b in models[i + 1:]) > 0.1
    return summary


@pytest.mark.timeout(600)
def test_example_runs_with_flwr_run_in_the_simulation_engine(tmp_path):
    pytest.importorskip("ray", reason="Flower's simulation engine needs flwr[simulation]")
    keys = _keys(tmp_path / "keys")
    home = tmp_path / "flwr-home"
    port = free_port()
    _connection(home, port, f"options.num-supernodes = {NODES}\n"
                            "options.backend.client-resources.num-cpus = 1\n")
    env = _env(home)
    processes = LocalProcesses(tmp_path)
    try:
        _superlink(processes, env, port, simulation=True)
        _flwr_run(processes, env, keys, tmp_path / "result.json", timeout=480, rounds=3)
        _check_result(tmp_path / "result.json")
    finally:
        processes.stop()
    assert not processes.alive()


@pytest.mark.timeout(720)
@pytest.mark.parametrize("transport", ["flower", "grpc"])
def test_example_runs_as_a_local_deployment_of_superlink_and_supernodes(tmp_path, transport):
    """``transport="grpc"``: one Flower message per node carries the clustering (omnifc's
    gRPC to the coordinator the ServerApp hosts), and each node's binding proof is checked
    against the node and message ids real Flower processes assign."""
    keys = _keys(tmp_path / "keys")
    home = tmp_path / "flwr-home"
    port = free_port()
    _connection(home, port)
    env = _env(home)
    processes = LocalProcesses(tmp_path)
    try:
        superlink = _superlink(processes, env, port, simulation=False)
        for i in range(NODES):
            node_config = (f'omnifc-party="org-{i}" '
                           f'omnifc-session-config="{keys / "session.toml"}" '
                           f'omnifc-identity="{keys / f"org-{i}.identity.pem"}"')
            processes.start(f"supernode-{i}", [
                _tool("flower-supernode"), "--insecure", "--superlink", f"127.0.0.1:{port}",
                "--host", "127.0.0.1", "--port", str(free_port()),
                "--node-config", node_config], env)
        # a ClientApp process per message (Flower's subprocess isolation): one round
        _flwr_run(processes, env, keys, tmp_path / "result.json", timeout=600, rounds=1,
                  transport=transport)
        summary = _check_result(tmp_path / "result.json")
        assert summary["round"] == 1 and summary["transport"] == transport
        assert superlink.poll() is None  # still serving: the run ended, not the SuperLink
    finally:
        processes.stop()
    assert not processes.alive()  # every process of the deployment is gone
