"""End to end over real gRPC: one process per party on 127.0.0.1, mutual TLS."""

from __future__ import annotations

import time

import numpy as np
import pytest

import omnifc
from finite_field import DeadlineError, IntegrityError, PeerError
from protocols import Deadlines, SessionParameters, generate_certificates, load_session_config
from protocols._grpc_local import LocalSession, run_local_grpc_session
from protocols._grpc_party import party_from_config, run_party
from protocols._tls import party_credentials
from protocol_helpers import plaintext_sq_distances, random_data

pytestmark = [pytest.mark.protobuf, pytest.mark.network,
              pytest.mark.usefixtures("shared_party_server")]


def rows(data):
    return np.concatenate(list(data.values()))


@pytest.mark.protobuf_matrix  # the one gRPC + mutual TLS session of .ci/protobuf_matrix.sh
def test_library_call_over_grpc_equals_memory_and_plaintext():
    data = random_data([6, 4, 5], 4, seed=21)  # m = 3, l = 1
    over_grpc = omnifc.secure_distance_matrix(data, bound=1.0, scale_bits=10,
                                              transport="grpc", deadline=20)
    in_memory = omnifc.secure_distance_matrix(data, bound=1.0, scale_bits=10)
    expected = plaintext_sq_distances(rows(data), 1.0, 10)
    assert np.array_equal(over_grpc.integer_distances, expected)
    assert np.array_equal(over_grpc.integer_distances, in_memory.integer_distances)
    assert np.array_equal(over_grpc.distances, in_memory.distances)
    assert over_grpc.parameters["transport"] == "grpc"
    assert over_grpc.stats["shares"].bytes_sent > 0 and over_grpc.stats["evaluation"].bytes_sent


@pytest.mark.parametrize("sizes, segments, scale_bits, n_primes", [
    ([3, 5, 2, 4, 3], 2, 8, 1),   # m = 5, l = 2
    ([4, 3, 5], 1, 24, 2),        # two RNS primes
])
def test_exact_over_grpc(sizes, segments, scale_bits, n_primes):
    data = random_data(sizes, 5, seed=len(sizes))
    params = SessionParameters(dim=5, bound=1.0, scale_bits=scale_bits, segments=segments)
    outcome = run_local_grpc_session(data, params, deadline=20)
    assert len(outcome.parameters["primes"]) == n_primes
    assert np.array_equal(outcome.integer, plaintext_sq_distances(rows(data), 1.0, scale_bits))


def test_killed_party_during_evaluation_is_replaced_when_enough_remain():
    # m = 2l + 2t = 4: party-2 stops answering when evaluation starts and its process is
    # then killed (SIGKILL); the round is abandoned and rerun with the other three.
    data = random_data([3, 4, 2, 3], 3, seed=8)
    # best effort (A = 0): the one check may be spent on the straggler
    params = SessionParameters(dim=3, bound=1.0, scale_bits=8, adversaries=0)
    outcome = run_local_grpc_session(data, params, deadline=20,
                                     faults={"party-2": "stall-in-evaluation"},
                                     kill_on={"party-2": "evaluation"})
    assert np.array_equal(outcome.integer, plaintext_sq_distances(rows(data), 1.0, 8))
    assert outcome.round == 2 and "party-2" not in outcome.responders


def test_crash_with_too_few_parties_is_a_clear_error_within_the_deadline():
    data = random_data([3, 4, 2], 3, seed=8)  # m = 2l + 2t - 1
    params = SessionParameters(dim=3, bound=1.0, scale_bits=8)
    start = time.monotonic()
    with pytest.raises(PeerError) as info:
        run_local_grpc_session(data, params, deadline=20,
                               faults={"party-1": "exit-in-evaluation"})
    assert (info.value.party, info.value.phase) == ("party-1", "evaluation")
    assert time.monotonic() - start < 60


def test_silent_party_hits_the_evaluation_deadline():
    data = random_data([3, 4, 2], 3, seed=8)
    params = SessionParameters(dim=3, bound=1.0, scale_bits=8)
    # only the evaluation's deadline is short: under load, party processes starting up
    # once missed a 3 s shares deadline (CI, load 7), which is not what this test pins
    deadlines = Deadlines(join=120, shares=60, evaluation=3, result=10)
    with pytest.raises(DeadlineError) as info:
        run_local_grpc_session(data, params, deadline=deadlines,
                               faults={"party-0": "stall-in-evaluation"})
    assert (info.value.party, info.value.phase) == ("party-0", "evaluation")


def test_flipped_byte_in_a_relayed_share_fails_cleanly():
    data = random_data([3, 4, 2], 3, seed=8)
    params = SessionParameters(dim=3, bound=1.0, scale_bits=8)
    flipped = []

    def tamper(dest, env):
        if env.HasField("share") and not flipped:
            ciphertext = bytearray(env.share.ciphertext)
            ciphertext[-1] ^= 0x01
            env.share.ciphertext = bytes(ciphertext)
            flipped.append((env.share.sender, dest))
        return env

    # the receiver's authentication check fails; the coordinator blames only the reporter
    with pytest.raises(PeerError) as info:
        run_local_grpc_session(data, params, deadline=20, tamper=tamper)
    [(sender, receiver)] = flipped
    assert (info.value.party, info.value.phase) == (receiver, "shares")
    assert f"reported by {receiver!r} (its report names {sender!r}): authentication" \
        in str(info.value)


def test_secure_sum_over_grpc():
    parts = {f"p{i}": np.array([[0.5 * i, -1.0, 2.0 - i]]) for i in range(3)}
    result = omnifc.secure_sum(parts, bound=4.0, scale_bits=8, transport="grpc", deadline=20)
    assert result.total.tolist() == [[1.5, -3.0, 3.0]]


def test_certificate_from_another_ca_is_refused(tmp_path):
    data = random_data([2, 2, 2], 2, seed=1)
    params = SessionParameters(dim=2, bound=1.0, scale_bits=8)
    with LocalSession(data, params, deadline=5) as local:
        server = local.server().start()
        try:
            stranger = load_session_config(
                generate_certificates(tmp_path / "stranger", list(data)).config)
            party = party_from_config(stranger, "party-0", data["party-0"], parameters=params)
            with pytest.raises(PeerError, match="could not establish a connection"):
                run_party(party, f"127.0.0.1:{server.port}",
                          credentials=party_credentials(stranger, "party-0"),
                          connect_timeout=2, timeout=5)
            assert server.coordinator.hellos == {}
        finally:
            server.stop()


def test_message_replayed_from_another_session_is_rejected():
    # A relay that injects a round start of another session: the party refuses it, says so,
    # and the run fails cleanly naming the phase.
    data = random_data([3, 4, 2], 3, seed=8)
    params = SessionParameters(dim=3, bound=1.0, scale_bits=8)

    def replay(dest, env):
        if env.HasField("round_start") and dest == "party-0":
            env.round_start.session_id = "0" * 32
        return env

    with pytest.raises(PeerError, match="replayed") as info:
        run_local_grpc_session(data, params, deadline=20, tamper=replay)
    assert info.value.phase == "evaluation"


def test_party_process_refusing_its_input_fails_the_join_fast():
    data = random_data([3, 4, 2], 3, seed=8)
    data["party-1"][1, 2] = np.nan
    params = SessionParameters(dim=3, bound=1.0, scale_bits=8)
    # after the abort the coordinator answers late parties for min(ABORT_GRACE, result)
    # seconds, and party-1 never connects: a short result deadline (a phase this session
    # never reaches) keeps that wait at 2 s instead of 10
    deadlines = Deadlines(join=20, shares=20, evaluation=20, result=2)
    start = time.monotonic()
    with pytest.raises(PeerError, match="finite") as info:
        run_local_grpc_session(data, params, deadline=deadlines)
    assert (info.value.party, info.value.phase) == ("party-1", "join")
    assert time.monotonic() - start < 60  # not the 120 s join deadline


def _run_with_faults(data, params, faults, error_type, cluster=None):
    """Serve with party processes (some misbehaving); return the error, exit codes, logs."""
    with LocalSession(data, params, deadline=20) as local:
        server = local.server(cluster=cluster).start()
        try:
            # honest parties first: they are connected when the faulty one speaks (a party
            # that never reached the server would keep trying until its join deadline)
            for name in local.names:
                if name not in faults:
                    local.start_party(name, server.port)
            end = time.monotonic() + 120
            while len(server.coordinator.hellos) < len(local.names) - len(faults) and \
                    time.monotonic() < end:
                time.sleep(0.1)
            for name, fault in faults.items():
                local.start_party(name, server.port, fault=fault)
            with pytest.raises(error_type) as info:
                server.run(poll=lambda: local.watch(server))
        finally:
            server.stop()
        codes = {n: p.wait(timeout=60) for n, p in local.processes.items()}
        logs = {n: local.party_log(n) for n in local.names}
        labels = {n: local.received_labels(n) for n in local.names}
    return info.value, codes, logs, labels


@pytest.mark.timeout(300)
def test_garbage_tiles_end_the_session_everywhere_and_every_process_exits_non_zero():
    data = random_data([3, 2, 3], 3, seed=31)
    params = SessionParameters(dim=3, bound=1.0, scale_bits=8)
    error, codes, logs, labels = _run_with_faults(
        data, params, {"party-1": "garbage-tiles"}, IntegrityError)
    assert error.phase == "decode" and "no-wrap bound" in str(error)
    assert set(codes.values()) == {1}
    for name, log in logs.items():  # each party says why, naming the phase
        assert "no-wrap bound" in log and "'decode'" in log, (name, log)
    assert all(v is None for v in labels.values())  # nothing written


@pytest.mark.timeout(300)
def test_an_oversized_hello_ends_the_session_everywhere_and_every_process_exits_non_zero():
    data = random_data([3, 2, 3], 3, seed=32)
    params = SessionParameters(dim=3, bound=1.0, scale_bits=8)
    error, codes, logs, labels = _run_with_faults(
        data, params, {"party-2": "oversized-hello"}, PeerError)
    assert (error.party, error.phase) == ("party-2", "join")
    assert "max_rows_per_party" in str(error)
    assert set(codes.values()) == {1}
    assert not any("MemoryError" in log for log in logs.values())
    assert all(v is None for v in labels.values())


@pytest.mark.timeout(300)
def test_an_exception_in_the_clustering_callback_ends_the_session_everywhere():
    from finite_field import ProtocolError

    data = random_data([3, 2, 3], 3, seed=33)
    params = SessionParameters(dim=3, bound=1.0, scale_bits=8)
    error, codes, logs, labels = _run_with_faults(data, params, {}, ProtocolError,
                                                  cluster=lambda d: 1 / 0)
    assert "clustering failed" in str(error) and "ZeroDivisionError" in str(error)
    assert set(codes.values()) == {1}
    assert all("clustering failed" in log and "'decode'" in log for log in logs.values())
    assert all(v is None for v in labels.values())


@pytest.mark.timeout(300)
def test_omnifc_serve_exits_non_zero_on_garbage_tiles_and_writes_nothing(tmp_path):
    import subprocess
    import sys

    names = ["a", "b", "c"]
    subprocess.run([sys.executable, "-m", "omnifc.cli", "certs", "--out", str(tmp_path / "s"),
                    "--parties", ",".join(names), "--coordinator-address", "127.0.0.1:0",
                    "--bound", "1", "--scale-bits", "8", "--deadline", "join=60",
                    "--deadline", "shares=20", "--deadline", "evaluation=20"],
                   check=True, capture_output=True, timeout=120)
    config = tmp_path / "s" / "session.toml"
    for i, name in enumerate(names):
        np.save(tmp_path / f"{name}.npy", np.random.default_rng(i).uniform(-1, 1, (3, 3)))
    port_file, out_file = tmp_path / "port", tmp_path / "D.npy"
    serve = subprocess.Popen([sys.executable, "-m", "omnifc.cli", "serve", "--config",
                              str(config), "--port-file", str(port_file), "--no-progress",
                              "--data-out", str(out_file)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    parties = []
    try:
        end = time.monotonic() + 60
        while not (port_file.exists() and port_file.read_text().strip()):
            assert time.monotonic() < end and serve.poll() is None
            time.sleep(0.1)
        port = port_file.read_text().strip()
        for name in names:
            command = [sys.executable, "-m", "protocols._grpc_party", "--config", str(config),
                       "--party", name, "--data", str(tmp_path / f"{name}.npy"),
                       "--target", f"127.0.0.1:{port}"]
            if name == "b":
                command += ["--fault", "garbage-tiles"]
            parties.append(subprocess.Popen(command, stdout=subprocess.PIPE,
                                            stderr=subprocess.PIPE, text=True))
        _, err = serve.communicate(timeout=120)
        assert serve.returncode == 1 and "no-wrap bound" in err, err
        for party in parties:
            _, perr = party.communicate(timeout=60)
            assert party.returncode == 1 and "'decode'" in perr, perr
    finally:
        for process in [serve, *parties]:
            if process.poll() is None:
                process.kill()
                process.wait()
    assert not out_file.exists()
