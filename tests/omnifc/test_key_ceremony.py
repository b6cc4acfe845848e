"""The key ceremony end to end: every organization makes its own keys in its own folder,
the session config is assembled from public cards only, everyone sees the same session
fingerprint, and ``serve`` / ``join`` over gRPC (mutual TLS with pinned self-signed
certificates) in separate processes give the exact distance matrix. (``keygen`` and
``session`` run through the CLI entry point in this process, each in its own folder:
they only write files.)

Every subprocess has a timeout and is killed in ``finally``; loopback and ephemeral ports
only.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from protocols import load_session_config

PARTIES = ("hospital-a", "hospital-b", "hospital-c")
SCALE_BITS = 8
TIMEOUT = 240
FINGERPRINT = re.compile(r"[A-Z2-7]{4}(?:-[A-Z2-7]{4}){7}")


class Result:
    def __init__(self, returncode, stdout, stderr):
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


def omnifc(*args, cwd):
    """Run ``omnifc ARGS`` in this process as if from folder ``cwd`` (the one-shot
    commands; ``serve`` and ``join`` run as separate processes below)."""
    import contextlib
    import io

    from omnifc.cli import main

    out, err = io.StringIO(), io.StringIO()
    here = os.getcwd()
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main([str(a) for a in args])
    finally:
        os.chdir(here)
    return Result(code, out.getvalue(), err.getvalue())


def start(*args, cwd, log):
    handle = open(log, "w")
    return subprocess.Popen([sys.executable, "-m", "omnifc.cli", *map(str, args)], cwd=cwd,
                            stdout=handle, stderr=subprocess.STDOUT, text=True), handle


def wait_for_file(path: Path, process, seconds: float = 120.0) -> str:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().strip():
            return path.read_text().strip()
        if process.poll() is not None:
            break
        time.sleep(0.2)
    raise AssertionError(f"{path} did not appear (process exit code {process.poll()})")


def private_key_files(folder: Path) -> set:
    """Files under ``folder`` that hold a private key, found by content."""
    return {p.relative_to(folder).as_posix() for p in folder.rglob("*")
            if p.is_file() and b"PRIVATE KEY" in p.read_bytes()}


def make_data(seed: int) -> np.ndarray:
    """Rows on the 2^-q grid (exactly representable, no clipping): D is exact."""
    rng = np.random.default_rng(seed)
    return rng.integers(-600, 600, size=(6, 3)) / 2.0 ** SCALE_BITS


def plaintext_distances(rows: np.ndarray) -> np.ndarray:
    """Squared distances computed independently with Python integers, then dequantized."""
    q = [[round(v * 2 ** SCALE_BITS) for v in row] for row in rows.tolist()]
    exact = [[sum((a - b) ** 2 for a, b in zip(x, y)) for y in q] for x in q]
    return np.array(exact, dtype=np.float64) / 4.0 ** SCALE_BITS


def keygen_everyone(root: Path) -> dict:
    """Each organization runs keygen in its own folder (separate processes)."""
    folders = {}
    result = omnifc("keygen", "--coordinator", "hub", "--host", "127.0.0.1", "--out", "keys",
                    cwd=_mkdir(root / "hub"))
    assert result.returncode == 0, result.stderr
    folders["hub"] = (root / "hub", FINGERPRINT.search(result.stdout).group())
    for name in PARTIES:
        result = omnifc("keygen", "--party", name, "--out", "keys", cwd=_mkdir(root / name))
        assert result.returncode == 0, result.stderr
        assert re.search(r"PRIVATE, mode 0600", result.stdout)
        folders[name] = (root / name, FINGERPRINT.search(result.stdout).group())
    return folders


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def assemble(root: Path, folders: dict, cards: dict | None = None) -> tuple:
    """One person collects only the cards and runs session new; the config goes back."""
    desk = _mkdir(root / "desk")
    for who, (folder, _) in folders.items():
        source = (cards or {}).get(who, folder / "keys" / f"{who}.card.toml")
        shutil.copy(source, desk / f"{who}.card.toml")
    result = omnifc("session", "new", *[a for n in PARTIES for a in ("--card", f"{n}.card.toml")],
                    "--coordinator-card", "hub.card.toml", "--address", "127.0.0.1:50051",
                    "--dim", 3, "--scale-bits", SCALE_BITS, "--bound", 4.0, "--n-clusters", 2,
                    "--deadline", "join=60", "--out", "session.toml", cwd=desk)
    assert result.returncode == 0, result.stderr
    assert private_key_files(desk) == set()  # assembled from public cards only
    for who, (folder, _) in folders.items():
        shutil.copy(desk / "session.toml", folder / "session.toml")
    return desk, result.stdout


@pytest.mark.network
@pytest.mark.timeout(TIMEOUT)
def test_ceremony_end_to_end_over_grpc_with_separate_folders(tmp_path):
    folders = keygen_everyone(tmp_path)
    desk, printed = assemble(tmp_path, folders)
    session_fp = re.search(r"session fingerprint: (\S+)", printed).group(1)
    # the card fingerprints session new shows are the ones keygen printed, same format
    for who, (_, card_fp) in folders.items():
        assert re.search(rf"{re.escape(who)}\s+card {card_fp}", printed), who
    config = load_session_config(desk / "session.toml")
    assert config.fingerprint == session_fp
    assert config.party("hospital-b").fingerprint == folders["hospital-b"][1]
    assert config.tls.coordinator_fingerprint == folders["hub"][1]

    # each organization's folder holds its own private files and nothing else private
    expected = {"hub": {"keys/hub.key"}}
    expected |= {n: {f"keys/{n}.key", f"keys/{n}.identity.pem"} for n in PARTIES}
    for who, (folder, _) in folders.items():
        assert private_key_files(folder) == expected[who], who
        for name in expected[who]:
            assert stat.S_IMODE((folder / name).stat().st_mode) == 0o600
    # `session fingerprint` agrees on every organization's copy
    for who, (folder, _) in folders.items():
        result = omnifc("session", "fingerprint", "session.toml", cwd=folder)
        assert result.returncode == 0, result.stderr
        assert f"session fingerprint: {session_fp}" in result.stdout

    data = {}
    for i, name in enumerate(PARTIES):
        data[name] = make_data(i)
        np.save(folders[name][0] / "rows.npy", data[name])
    hub = folders["hub"][0]
    processes, handles = [], []
    try:
        server, handle = start("serve", "--config", "session.toml", "--keys", "keys",
                               "--address", "127.0.0.1:0", "--port-file", "port",
                               "--data-out", "D.npy", "--no-progress", cwd=hub,
                               log=hub / "serve.log")
        processes.append(server)
        handles.append(handle)
        port = wait_for_file(hub / "port", server)
        for name in PARTIES:
            process, handle = start("join", "--config", "session.toml", "--party", name,
                                    "--keys", "keys", "--data", "rows.npy", "--target",
                                    f"127.0.0.1:{port}", "--labels-out", "labels.npy",
                                    "--no-progress", cwd=folders[name][0],
                                    log=folders[name][0] / "join.log")
            processes.append(process)
            handles.append(handle)
        codes = [p.wait(timeout=TIMEOUT - 30) for p in processes]
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait(10)
        for handle in handles:
            handle.close()
    logs = {who: (folder / ("serve.log" if who == "hub" else "join.log")).read_text()
            for who, (folder, _) in folders.items()}
    assert codes == [0, 0, 0, 0], logs
    for who, log in logs.items():  # printed before the first round, the same for everyone
        assert f"fingerprint {session_fp}" in log, who
    distances = np.load(hub / "D.npy")
    expected_d = plaintext_distances(np.vstack([data[n] for n in PARTIES]))
    assert np.array_equal(distances, expected_d)
    for name in PARTIES:
        assert np.load(folders[name][0] / "labels.npy").shape == (6,)


@pytest.mark.network
@pytest.mark.timeout(TIMEOUT)
def test_a_config_pinning_another_card_refuses_that_party_naming_it(tmp_path):
    folders = keygen_everyone(tmp_path)
    # hospital-b's card in the config comes from other keys (a stale or swapped card)
    stale = _mkdir(tmp_path / "stale")
    result = omnifc("keygen", "--party", "hospital-b", "--out", "keys", cwd=stale)
    assert result.returncode == 0, result.stderr
    desk, _ = assemble(tmp_path, folders,
                       cards={"hospital-b": stale / "keys" / "hospital-b.card.toml"})
    folder = folders["hospital-b"][0]
    np.save(folder / "rows.npy", make_data(1))
    # join refuses before connecting, naming the party and what does not match
    result = omnifc("join", "--config", "session.toml", "--party", "hospital-b", "--keys",
                    "keys", "--data", "rows.npy", "--no-progress", cwd=folder)
    assert result.returncode == 1
    assert re.search(r"not the key of the TLS certificate pinned for party 'hospital-b'",
                     result.stderr), result.stderr
    assert "compare the card fingerprints" in result.stderr
    # and the coordinator's TLS server refuses the real key of hospital-b, which it does
    # not pin, even when the party skips its own check
    from protocols import PeerError, channel_credentials
    from protocols._grpc_party import party_from_config, run_party

    hub = folders["hub"][0]
    processes = []
    try:
        server, handle = start("serve", "--config", "session.toml", "--keys", "keys",
                               "--address", "127.0.0.1:0", "--port-file", "port",
                               "--no-progress", cwd=hub, log=hub / "serve.log")
        processes.append((server, handle))
        port = wait_for_file(hub / "port", server)
        # (the protocol state machine gets the identity key the config pins; only the
        # TLS key and certificate are hospital-b's real, unpinned ones)
        config = load_session_config(folder / "session.toml").with_keys(
            "hospital-b", stale / "keys")
        party = party_from_config(config, "hospital-b", make_data(1))
        credentials = channel_credentials(folder / "keys" / "hospital-b.pem",
                                          folder / "keys" / "hospital-b.key",
                                          config.tls.coordinator_certificate.encode())
        # the refusal is the server's at once: 2 s of trying shows it (as 5 s did)
        with pytest.raises(PeerError, match="could not establish a connection"):
            run_party(party, f"127.0.0.1:{port}", credentials=credentials, timeout=20,
                      connect_timeout=2)
    finally:
        for process, handle in processes:
            if process.poll() is None:
                process.kill()
                process.wait(10)
            handle.close()


def test_session_new_refuses_a_coordinator_address_its_certificate_does_not_cover(tmp_path):
    folders = keygen_everyone(tmp_path)
    desk = _mkdir(tmp_path / "desk")
    for who, (folder, _) in folders.items():
        shutil.copy(folder / "keys" / f"{who}.card.toml", desk)
    result = omnifc("session", "new", *[a for n in PARTIES for a in ("--card", f"{n}.card.toml")],
                    "--coordinator-card", "hub.card.toml", "--address",
                    "clustering.example.org:50051", "--out", "session.toml", cwd=desk)
    assert result.returncode == 1
    assert "not for 'clustering.example.org'" in result.stderr
    assert "--host clustering.example.org" in result.stderr
    assert not (desk / "session.toml").exists()
    # a party card given as the coordinator's, or the other way round, is refused
    result = omnifc("session", "new", "--card", "hub.card.toml", "--card",
                    "hospital-b.card.toml", "--card", "hospital-c.card.toml",
                    "--coordinator-card", "hospital-a.card.toml", "--address",
                    "127.0.0.1:50051", "--out", "session.toml", cwd=desk)
    assert result.returncode == 1 and "is not a party card" in result.stderr


# --- file safety -------------------------------------------------------------------------------

def _plant_link(folder: Path, name: str, tmp_path: Path) -> Path:
    """A symbolic link ``folder/name`` to a file someone wants overwritten."""
    target = tmp_path / f"victim-{name}"
    target.write_text("precious")
    target.chmod(0o600)
    folder.mkdir(parents=True, exist_ok=True)
    os.symlink(target, folder / name)
    return target


@pytest.mark.parametrize("planted", ["hospital-a.key", "hospital-a.identity.pem",
                                     "hospital-a.card.toml"])
def test_keygen_refuses_a_planted_symbolic_link_even_with_force(tmp_path, planted):
    out = tmp_path / "keys"
    target = _plant_link(out, planted, tmp_path)
    for force in ([], ["--force"]):
        result = omnifc("keygen", "--party", "hospital-a", "--out", out, *force, cwd=tmp_path)
        assert result.returncode == 1
        assert "symbolic link" in result.stderr
        assert sorted(os.listdir(out)) == [planted]  # nothing else written either
    assert target.read_text() == "precious"
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert (out / planted).is_symlink()


def test_certs_force_refuses_planted_links_and_writes_nothing(tmp_path):
    out = tmp_path / "session"
    assert omnifc("certs", "--out", out, "--parties", "a,b,c", cwd=tmp_path).returncode == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    (out / "b.key").unlink()
    target = _plant_link(out, "b.key", tmp_path)
    result = omnifc("certs", "--out", out, "--parties", "a,b,c", "--force", cwd=tmp_path)
    assert result.returncode == 1 and "symbolic link" in result.stderr
    assert target.read_text() == "precious"
    after = {p.name: p.read_bytes() for p in out.iterdir() if not p.is_symlink()}
    assert after == {k: v for k, v in before.items() if k != "b.key"}  # nothing rewritten


def test_session_new_refuses_a_link_at_out(tmp_path):
    folders = keygen_everyone(tmp_path)
    desk = _mkdir(tmp_path / "desk")
    for who, (folder, _) in folders.items():
        shutil.copy(folder / "keys" / f"{who}.card.toml", desk)
    target = _plant_link(desk, "session.toml", tmp_path)
    for force in ([], ["--force"]):
        result = omnifc("session", "new", *[a for n in PARTIES for a in ("--card",
                                                                          f"{n}.card.toml")],
                        "--coordinator-card", "hub.card.toml", "--address", "127.0.0.1:50051",
                        "--out", "session.toml", *force, cwd=desk)
        assert result.returncode == 1 and "symbolic link" in result.stderr
    assert target.read_text() == "precious"


def test_a_group_or_other_writable_out_folder_is_refused(tmp_path, caplog):
    # (more cases in tests/omnifc/test_keygen_folder.py)
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    result = omnifc("keygen", "--party", "hospital-a", "--out", shared, cwd=tmp_path)
    assert result.returncode == 1 and list(shared.iterdir()) == []
    assert "writable by group and others" in result.stderr and str(shared) in result.stderr
    private = tmp_path / "private"
    with caplog.at_level("WARNING", logger="omnifc"):
        assert omnifc("keygen", "--party", "hospital-a", "--out", private,
                      cwd=tmp_path).returncode == 0
    assert not [r for r in caplog.records if "writable" in r.getMessage()]
    assert stat.S_IMODE(private.stat().st_mode) == 0o700  # created private


def test_join_and_serve_refuse_a_tls_key_readable_by_others(tmp_path):
    folders = keygen_everyone(tmp_path)
    assemble(tmp_path, folders)
    folder = folders["hospital-c"][0]
    (folder / "keys" / "hospital-c.key").chmod(0o644)
    result = omnifc("join", "--config", "session.toml", "--party", "hospital-c", "--keys",
                    "keys", "--data", "rows.npy", cwd=folder)
    assert result.returncode == 1
    assert re.search(r"TLS private key file .*hospital-c.key.* has mode 0o644: group or "
                     r"others may read .*chmod 600", result.stderr), result.stderr
    hub = folders["hub"][0]
    (hub / "keys" / "hub.key").chmod(0o640)
    result = omnifc("serve", "--config", "session.toml", "--keys", "keys", "--address",
                    "127.0.0.1:0", cwd=hub)
    assert result.returncode == 1 and "mode 0o640" in result.stderr
    assert "listening" not in result.stdout
