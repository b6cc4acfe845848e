"""Rerunning a session from the command line: the warning points real deployments to
``omnifc session new``, and earlier results in ``omnifc-results/<id>/`` are kept."""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys
import time

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "omnifc.cli"]
NAMES = ["a", "b", "c"]
ENV = {**os.environ, "PYTHONUNBUFFERED": "1",
       "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}


def omnifc(*args, cwd, timeout=180):
    return subprocess.run([*CLI, *map(str, args)], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=ENV)


@pytest.fixture
def session(tmp_path):
    done = omnifc("certs", "--out", tmp_path / "s", "--parties", ",".join(NAMES),
                  "--coordinator-address", "127.0.0.1:0", "--bound", "2", "--scale-bits", "8",
                  "--n-clusters", "2", "--deadline", "join=120", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    rng = np.random.default_rng(3)
    for i, name in enumerate(NAMES):
        np.save(tmp_path / f"{name}.npy", rng.uniform(-1, 1, (4 + i, 3)))
    return tmp_path / "s" / "session.toml"


def run_session(tmp_path, config, *extra):
    """serve + three joins as a user starts them; returns (serve out, err, [join outs])."""
    port_file = tmp_path / "port"
    port_file.unlink(missing_ok=True)
    serve = subprocess.Popen([*CLI, "serve", "--config", str(config), "--port-file",
                              str(port_file), "--no-progress", *extra], cwd=tmp_path,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
    joins = []
    try:
        deadline = time.monotonic() + 120
        while not (port_file.exists() and port_file.read_text().strip()):
            if serve.poll() is not None or time.monotonic() > deadline:
                serve.kill()
                raise AssertionError(serve.communicate())
            time.sleep(0.1)
        port = port_file.read_text().strip()
        for name in NAMES:
            joins.append(subprocess.Popen(
                [*CLI, "join", "--config", str(config), "--party", name, "--target",
                 f"127.0.0.1:{port}", "--data", str(tmp_path / f"{name}.npy"),
                 "--no-progress", *extra], cwd=tmp_path, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, text=True, env=ENV))
        out, err = serve.communicate(timeout=240)
        results = [join.communicate(timeout=120) for join in joins]
    finally:
        for process in (serve, *joins):
            if process.poll() is None:
                process.kill()
                process.communicate()
    assert serve.returncode == 0, (err, results)
    assert all(join.returncode == 0 for join in joins), results
    return out, err, results


@pytest.mark.network
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_rerun_keeps_earlier_results_and_points_to_session_new(tmp_path, session):
    out, err, _ = run_session(tmp_path, session)
    session_id = re.search(r"session (\w+) listening", out).group(1)
    first = tmp_path / "omnifc-results" / session_id
    before = {p.name: p.read_bytes() for p in first.iterdir()}
    assert sorted(before) == ["a-labels.npy", "b-labels.npy", "c-labels.npy",
                              "distances.npy", "labels.npy", "summary.json"]
    assert "was already run" not in err
    # the earlier results get a marker we can recognise: a rerun must not replace them
    marked = {name: data + b"earlier run" for name, data in before.items()}
    for name, data in marked.items():
        (first / name).write_bytes(data)

    out2, err2, joins2 = run_session(tmp_path, session)
    second = tmp_path / "omnifc-results" / f"{session_id}-run2"
    assert {p.name: p.read_bytes() for p in first.iterdir()} == marked     # untouched
    assert sorted(p.name for p in second.iterdir()) == sorted(before)
    assert np.array_equal(np.load(second / "distances.npy"), np.load(
        __import__("io").BytesIO(before["distances.npy"])))
    for text in (out2, *(o for o, _ in joins2)):
        assert f"this run's results go to {os.path.join('omnifc-results', session_id)}-run2" \
            in text
    for text in (err2, *(e for _, e in joins2)):
        assert "was already run with this config" in text
        assert "`omnifc session new`" in text
        assert "fresh session with `omnifc certs`" not in text


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_explicit_out_with_earlier_results_is_refused_before_connecting(tmp_path, session):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "a-labels.npy").write_bytes(b"earlier run")
    started = time.monotonic()
    done = omnifc("join", "--config", session, "--party", "a", "--data", tmp_path / "a.npy",
                  "--target", "127.0.0.1:9", "--out", out, cwd=tmp_path)
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "refusing to overwrite the results of an earlier run" in done.stderr
    assert str(out / "a-labels.npy") in done.stderr and "another --out" in done.stderr
    assert "Traceback" not in done.stderr
    assert (out / "a-labels.npy").read_bytes() == b"earlier run"
    done = omnifc("serve", "--config", session, "--data-out", out / "a-labels.npy",
                  "--out", tmp_path / "other", cwd=tmp_path)
    assert done.returncode == 1 and "refusing to overwrite" in done.stderr, done.stderr
    assert (out / "a-labels.npy").read_bytes() == b"earlier run"
