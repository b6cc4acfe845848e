"""``omnifc serve --resume``: the coordinator process is killed (SIGKILL) halfway through the
evaluation and restarted from its journal; the party processes reconnect and the session
ends with the exact D (docs/protocol.md, "Coordinator restart"). Separate processes over
mutual TLS on 127.0.0.1, every wait bounded, every process cleaned up."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

from protocols._journal import count_records

pytestmark = [pytest.mark.network, pytest.mark.slow, pytest.mark.timeout(600)]

CLI = [sys.executable, "-m", "omnifc.cli"]
NAMES = ["a", "b", "c"]
ROWS = (400, 350, 450)  # n = 1,200: 8 tiles at the default 1 MiB
HELD_AFTER = 3  # party c uploads 3 tiles, then waits until the test lets it go on


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _omnifc(*args, cwd, timeout=180):
    return subprocess.run([*CLI, *map(str, args)], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "PYTHONUNBUFFERED": "1"})


def _serve(tmp_path, config, port, *extra):
    return subprocess.Popen([*CLI, "serve", "--config", str(config), "--address",
                             f"127.0.0.1:{port}", "--out", str(tmp_path / "results"),
                             "--no-progress", *extra], cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})


def _wait(predicate, seconds, what, *processes):
    end = time.monotonic() + seconds
    while not predicate():
        for p in processes:
            if p.poll() is not None:
                raise AssertionError(f"{what}: a process ended early: {p.communicate()}")
        if time.monotonic() > end:
            raise AssertionError(f"{what}: not within {seconds} s")
        time.sleep(0.05)


def _stop(*processes):
    for process in processes:
        if process.poll() is None:
            process.kill()
        process.communicate()


def test_a_killed_coordinator_resumes_from_its_journal_and_d_is_exact(tmp_path):
    out = _omnifc("certs", "--out", tmp_path / "s", "--parties", ",".join(NAMES),
                  "--coordinator-address", "127.0.0.1:0", "--bound", "2", "--scale-bits", "8",
                  "--n-clusters", "2", "--deadline", "join=120",
                  "--deadline", "evaluation=120", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    config = tmp_path / "s" / "session.toml"
    rng = np.random.default_rng(5)
    data = {name: rng.uniform(-1, 1, (rows, 3)) for name, rows in zip(NAMES, ROWS)}
    for name in NAMES:
        np.save(tmp_path / f"{name}.npy", data[name])
    port = _free_port()
    release = tmp_path / "release"
    journal = tmp_path / "results" / "in-progress" / "session.journal"
    first = _serve(tmp_path, config, port)
    parties, resumed = [], None
    try:
        for name in NAMES:
            fault = ["--fault", f"hold-tiles:{release}:{HELD_AFTER}"] if name == "c" else []
            parties.append(subprocess.Popen(
                [sys.executable, "-m", "protocols._grpc_party", "--config", str(config),
                 "--party", name, "--data", str(tmp_path / f"{name}.npy"), "--target",
                 f"127.0.0.1:{port}", "--labels-out", str(tmp_path / f"{name}-labels.npy"),
                 *fault], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                text=True))
        # halfway: the journal vouches for c's first tiles (with a's and b's), no more
        _wait(lambda: count_records(journal, "tile") >= HELD_AFTER, 180, "tiles journaled", first)
        time.sleep(0.5)
        assert count_records(journal, "tile") == HELD_AFTER
        first.kill()  # SIGKILL: nothing of it runs after this
        first_out, first_err = first.communicate(timeout=30)
        assert "resume" in first_out and "--resume" in first_out, first_out
        assert journal.exists() and (journal.parent / "result.npy").exists()

        # a resume with another config is refused, and changes nothing
        changed = tmp_path / "s" / "changed.toml"
        changed.write_text(re.sub(r"scale_bits = 8", "scale_bits = 7", config.read_text()))
        refused = _omnifc("serve", "--config", changed, "--address", f"127.0.0.1:{port}",
                          "--out", tmp_path / "results", "--resume", "--no-progress",
                          cwd=tmp_path, timeout=120)
        assert refused.returncode == 1, (refused.stdout, refused.stderr)
        assert "config changed" in refused.stderr and "Traceback" not in refused.stderr
        assert count_records(journal, "tile") == HELD_AFTER

        resumed = _serve(tmp_path, config, port, "--resume")
        release.touch()
        serve_out, serve_err = resumed.communicate(timeout=240)
        ends = [p.communicate(timeout=120) for p in parties]
        assert resumed.returncode == 0, (serve_out, serve_err, ends)
        assert all(p.returncode == 0 for p in parties), ends
    finally:
        _stop(first, *parties, *([resumed] if resumed is not None else []))
    x = np.concatenate([data[n] for n in NAMES])
    q = np.floor(np.clip(x, -2, 2) * 256 + 0.5).astype(np.int64)
    expected = ((q[:, None, :] - q[None, :, :]) ** 2).sum(-1) / 256.0**2
    folder = tmp_path / "results"
    assert np.array_equal(np.load(folder / "distances.npy"), expected)
    labels = np.load(folder / "labels.npy")
    offsets = np.cumsum([0, *ROWS])
    for i, name in enumerate(NAMES):
        assert np.array_equal(np.load(tmp_path / f"{name}-labels.npy"),
                              labels[offsets[i]:offsets[i + 1]])
    assert not (folder / "in-progress").exists()  # the journal and the partial result went
    assert f"{HELD_AFTER} of " in serve_err and "tiles held" in serve_err, serve_err


def test_resume_without_a_journal_says_so(tmp_path):
    out = _omnifc("certs", "--out", tmp_path / "s", "--parties", ",".join(NAMES),
                  "--coordinator-address", "127.0.0.1:0", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    result = _omnifc("serve", "--config", tmp_path / "s" / "session.toml", "--resume",
                     "--out", tmp_path / "nothing", cwd=tmp_path)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "no journal of session" in result.stderr, result.stderr
    assert not (tmp_path / "nothing").exists()


def test_a_new_serve_refuses_a_folder_holding_a_journal_and_points_to_resume(tmp_path):
    out = _omnifc("certs", "--out", tmp_path / "s", "--parties", ",".join(NAMES),
                  "--coordinator-address", "127.0.0.1:0", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    journal = tmp_path / "results" / "in-progress" / "session.journal"
    journal.parent.mkdir(parents=True)
    journal.write_bytes(b"omnifc-journal/1\n")
    result = _omnifc("serve", "--config", tmp_path / "s" / "session.toml", "--out",
                     tmp_path / "results", cwd=tmp_path)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "continue it with --resume" in result.stderr, result.stderr
    assert journal.read_bytes() == b"omnifc-journal/1\n"  # untouched
