"""``--mask-degree`` on the commands that set session parameters (``session new``, ``certs``,
``simulate``, ``demo``), the same refusal of 1 <= k <= t as the library, and the warning
``serve`` / ``join`` log once for any 1 <= k < m - 1 (how many colluders the masks withstand).

``serve`` and ``join`` run through the CLI entry point in this process, up to the point
where they would open the network: the server and the party session are stubbed to stop
there (the warning comes before).
"""

from __future__ import annotations

import logging

import numpy as np
import pytest

from finite_field import ProtocolError
from protocols import load_session_config

from test_key_ceremony import PARTIES, _mkdir, keygen_everyone, omnifc

pytestmark = pytest.mark.timeout(120)

WEAK = "mask_degree must be 0 (every pair) or at least t + 1 = {} (noise_segments t = {}), got {}"
WARNING = "the pairwise masks withstand the coordinator colluding with only {} parties"


def _session_new(desk, *extra):
    return omnifc("session", "new", *[a for n in PARTIES for a in ("--card", f"{n}.card.toml")],
                  "--coordinator-card", "hub.card.toml", "--address", "127.0.0.1:50051",
                  "--dim", 3, "--out", "session.toml", "--force", *extra, cwd=desk)


def test_session_new_writes_the_mask_degree_and_refuses_a_weak_one(tmp_path):
    import shutil

    folders = keygen_everyone(tmp_path)
    desk = _mkdir(tmp_path / "desk")
    for who, (folder, _) in folders.items():
        shutil.copy(folder / "keys" / f"{who}.card.toml", desk / f"{who}.card.toml")
    result = _session_new(desk, "--mask-degree", 1)
    assert result.returncode == 1 and not (desk / "session.toml").exists()
    assert "[parameters] " + WEAK.format(2, 1, 1) in result.stderr
    result = _session_new(desk, "--mask-degree", 2, "--noise-segments", 2)
    assert result.returncode == 1 and "[parameters] " + WEAK.format(3, 2, 2) in result.stderr
    result = _session_new(desk, "--mask-degree", 2)
    assert result.returncode == 0, result.stderr
    assert load_session_config(desk / "session.toml").parameters.mask_degree == 2
    result = _session_new(desk)
    assert result.returncode == 0, result.stderr
    assert load_session_config(desk / "session.toml").parameters.mask_degree == 0


def _certs(folder, degree, parties="a,b,c,d,e"):
    return omnifc("certs", "--out", folder, "--parties", parties, "--dim", 3,
                  "--mask-degree", degree, "--force", cwd=folder.parent)


@pytest.fixture
def stop_before_the_network(monkeypatch):
    import protocols
    import protocols._grpc_coordinator as coordinator
    import protocols._grpc_party as party

    def stop(*args, **kwargs):
        raise ProtocolError("stopped before the network (test)")

    # the package's lazy names too: the CLI looks them up there, and a name resolved once
    # stays in the package's namespace (monkeypatch puts the real one back afterwards)
    for module in (coordinator, protocols):
        monkeypatch.setattr(module, "CoordinatorServer", stop)
    for module in (party, protocols):
        monkeypatch.setattr(module, "join_from_config", stop)


def _warnings(caplog):
    return [r.getMessage() for r in caplog.records
            if r.levelno == logging.WARNING and "mask_degree" in r.getMessage()]


@pytest.mark.parametrize("degree, warned", [(2, 1), (3, 2), (0, None), (4, None)])
def test_serve_and_join_warn_once_how_many_colluders_the_masks_withstand(
        tmp_path, caplog, stop_before_the_network, degree, warned):
    folder = tmp_path / "certs"
    result = _certs(folder, degree)  # m = 5: degrees 2 and 3 are sparser than every pair
    assert result.returncode == 0, result.stderr
    config = folder / "session.toml"
    np.save(tmp_path / "a.npy", np.zeros((2, 3)))
    for command in (["serve", "--config", config, "--out", tmp_path / "out"],
                    ["join", "--config", config, "--party", "a", "--data", tmp_path / "a.npy",
                     "--out", tmp_path / "out"]):
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            result = omnifc(*command, cwd=tmp_path)
        assert result.returncode == 1 and "stopped before the network" in result.stderr
        found = _warnings(caplog)
        if warned is None:
            assert found == [], (command[0], found)
        else:
            assert len(found) == 1, (command[0], found)
            assert WARNING.format(warned) in found[0]
            assert f"mask_degree = {degree}:" in found[0]


def test_certs_simulate_and_demo_refuse_a_weak_degree_before_any_work(tmp_path):
    result = _certs(tmp_path / "weak", 1)
    assert result.returncode == 1 and WEAK.format(2, 1, 1) in result.stderr
    assert not (tmp_path / "weak" / "session.toml").exists()
    for command in ("simulate", "demo"):
        result = omnifc(command, "--mask-degree", 1, cwd=tmp_path)
        assert result.returncode == 1, (command, result.stdout)
        assert WEAK.format(2, 1, 1) in result.stderr, command
        assert "exact" not in result.stdout  # nothing ran
        result = omnifc(command, "--mask-degree", 2, "--noise-segments", 2, "--parties", 7,
                        cwd=tmp_path)
        assert result.returncode == 1 and WEAK.format(3, 2, 2) in result.stderr, command


def test_simulate_runs_with_a_legal_mask_degree(tmp_path):
    result = omnifc("simulate", "--parties", 5, "--mask-degree", 2, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "exact         yes" in result.stdout


def test_audit_cli_reports_the_refusal_of_a_weak_config(tmp_path):
    folder = tmp_path / "certs"
    assert _certs(folder, 2).returncode == 0
    config = folder / "session.toml"
    config.write_text(config.read_text().replace("mask_degree = 2", "mask_degree = 1"))
    result = omnifc("audit", "--config", config, "--checks", "5", cwd=tmp_path)
    assert result.returncode == 1
    assert "[parameters] " + WEAK.format(2, 1, 1) in result.stderr
    config.write_text(config.read_text().replace("mask_degree = 1", "mask_degree = 2"))
    result = omnifc("audit", "--config", config, "--checks", "5", cwd=tmp_path)
    assert result.returncode == 0 and "| 5 | Transport security | PASS |" in result.stdout
