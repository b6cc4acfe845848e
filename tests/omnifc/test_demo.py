"""``omnifc demo``, ``serve`` and ``join``: the main job end to end over gRPC with TLS."""

from __future__ import annotations

import subprocess
import sys
import time

import numpy as np
import pytest

from omnifc.cli import main

pytestmark = pytest.mark.network


def test_demo_runs_exact_and_cleans_up(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    code = main(["demo", "--parties", "3", "--no-progress", "--deadline", "30"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "exact        yes" in out
    assert "ARI 1.0000" in out  # secure k-means equals centralized k-means on iris
    assert "each party received the labels of its own rows: yes" in out
    for phase in ("join", "shares", "evaluation", "decode"):
        assert f"  {phase}" in out
    assert list(tmp_path.iterdir()) == []  # certificates, keys and data removed


@pytest.mark.timeout(180)
@pytest.mark.parametrize("data_out", ["D.npy", "D.zarr"])
def test_serve_and_join_as_separate_commands(tmp_path, data_out):
    rng = np.random.default_rng(3)
    names = ["a", "b", "c"]
    subprocess.run([sys.executable, "-m", "omnifc.cli", "certs", "--out", str(tmp_path / "s"),
                    "--parties", ",".join(names), "--coordinator-address", "127.0.0.1:0",
                    "--bound", "2", "--scale-bits", "8", "--n-clusters", "2",
                    "--deadline", "join=30", "--deadline", "shares=20",
                    "--deadline", "evaluation=20"], check=True, capture_output=True)
    config = tmp_path / "s" / "session.toml"
    data = {}
    for i, name in enumerate(names):
        data[name] = rng.uniform(-1, 1, (4 + i, 3))
        path = tmp_path / f"{name}.{'csv' if i == 0 else 'npy'}"
        if i == 0:
            np.savetxt(path, data[name], delimiter=",")
        else:
            np.save(path, data[name])
    port_file = tmp_path / "port"
    serve = subprocess.Popen([sys.executable, "-m", "omnifc.cli", "serve", "--config", str(config),
                              "--port-file", str(port_file), "--no-progress", "--data-out",
                              str(tmp_path / data_out)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    joins = []
    try:
        deadline = time.monotonic() + 60
        while not (port_file.exists() and port_file.read_text().strip()):
            assert time.monotonic() < deadline and serve.poll() is None, serve.stderr.read()
            time.sleep(0.1)
        port = port_file.read_text().strip()
        for i, name in enumerate(names):
            joins.append(subprocess.Popen(
                [sys.executable, "-m", "omnifc.cli", "join", "--config", str(config), "--party",
                 name, "--no-progress", "--target", f"127.0.0.1:{port}", "--data",
                 str(tmp_path / f"{name}.{'csv' if i == 0 else 'npy'}")], stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, text=True, cwd=tmp_path))
        out, err = serve.communicate(timeout=120)
        assert serve.returncode == 0, err
        assert "reconstructed the 15 x 15 squared-distance matrix of 3 parties" in out
        for join in joins:
            jout, jerr = join.communicate(timeout=60)
            assert join.returncode == 0, jerr
            assert "labels of your rows" in jout
    finally:
        for process in [serve, *joins]:
            if process.poll() is None:
                process.kill()
                process.wait()
    x = np.concatenate([data[n] for n in names])
    q = np.floor(np.clip(x, -2, 2) * 256 + 0.5).astype(np.int64)
    exact = ((q[:, None, :] - q[None, :, :]) ** 2).sum(-1)  # Python-exact small integers
    if data_out == "D.npy":
        assert np.array_equal(np.load(tmp_path / data_out), exact / 256.0**2)
        return
    # the Zarr result: the exact integers, read by Dask straight from the store, and the
    # same matrix through omnifc, whose metadata says it is complete
    import dask.array as da

    from omnifc import DistanceStore
    integer = da.from_zarr(str(tmp_path / data_out), component="integer").compute()
    assert integer.dtype == np.int32 and np.array_equal(integer, exact)
    store = DistanceStore.open(tmp_path / data_out)
    assert store.format == "zarr" and np.array_equal(store.distances[0:15], exact / 256.0**2)
    assert "saved the squared-distance matrix to " + str(tmp_path / data_out) in out


@pytest.mark.timeout(300)
def test_demo_names_each_party_exit_code_and_the_rows_the_split_leaves_out(capsys):
    # iris has 150 rows; the paper's split gives 4 parties 37 rows each
    code = main(["demo", "--no-progress", "--deadline", "30"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "148 of the data set's 150 rows are used" in out
    assert "150 // 4 = 37 rows, so 2 rows are left out" in out and "not duplicates" in out
    assert ("(party exit codes: party-0 0, party-1 0, party-2 0, party-3 0)") in out


class _Recorded:
    """new_party_server, recording the servers it made and when (issue 25, item 7)."""

    def __init__(self, events):
        from protocols._party_processes import new_party_server
        self.real, self.events, self.servers = new_party_server, events, []

    def __call__(self):
        self.events.append("party server")
        server = self.real()
        self.servers.append(server)
        return server


@pytest.mark.timeout(120)
def test_demo_starts_its_party_server_before_its_imports_and_forks_the_parties_from_it(
        capsys, monkeypatch):
    # The server loads the parties' modules and numba's kernels (about 2 s) while the demo
    # imports scikit-learn and loads its data set: it must be made first, and be the one
    # every party is forked from (their parent), and be closed at the end.
    import protocols
    import omnifc
    events = []
    record = _Recorded(events)
    monkeypatch.setattr(protocols, "new_party_server", record)
    load = omnifc.load_dataset
    monkeypatch.setattr(omnifc, "load_dataset",
                        lambda *a, **k: (events.append("data set"), load(*a, **k))[1])
    parents = []
    from protocols import LocalSession
    start_party = LocalSession.start_party

    def recording_start(self, *a, **k):
        process = start_party(self, *a, **k)
        with open(f"/proc/{process.pid}/stat") as stat:
            parents.append(int(stat.read().rsplit(")", 1)[1].split()[1]))
        return process
    monkeypatch.setattr(LocalSession, "start_party", recording_start)
    assert main(["demo", "--parties", "3", "--no-progress", "--deadline", "30"]) == 0
    assert events[:2] == ["party server", "data set"]
    assert len(record.servers) == 1
    server = record.servers[0]
    assert parents == [server._process.pid] * 3
    assert server._process.poll() is not None  # closed with the session


@pytest.mark.timeout(60)
def test_a_demo_that_fails_before_its_session_still_closes_its_party_server(monkeypatch):
    import protocols
    import omnifc
    record = _Recorded([])
    monkeypatch.setattr(protocols, "new_party_server", record)

    def broken(*a, **k):
        raise OSError("the data set cannot be read")
    monkeypatch.setattr(omnifc, "load_dataset", broken)
    with pytest.raises(OSError, match="cannot be read"):
        main(["demo", "--parties", "3", "--no-progress"])
    (server,) = record.servers
    assert server._process.wait(10) is not None  # ended: nothing outlives the command
