"""The command line as a new user meets it (serve and join, input and certificate errors,
help), through ``python -m omnifc.cli`` in subprocesses (each with a timeout, loopback only,
every process cleaned up)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest

pytestmark = [pytest.mark.network, pytest.mark.timeout(600)]

CLI = [sys.executable, "-m", "omnifc.cli"]
NAMES = ["a", "b", "c"]


def omnifc(*args, cwd, timeout=180):
    return subprocess.run([*CLI, *map(str, args)], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "PYTHONUNBUFFERED": "1"})


def make_session(folder, *extra):
    out = omnifc("certs", "--out", folder, "--parties", ",".join(NAMES),
                 "--coordinator-address", "127.0.0.1:0", "--bound", "2", "--scale-bits", "8",
                 "--n-clusters", "2", "--deadline", "join=120", "--deadline", "shares=60",
                 "--deadline", "evaluation=60", *extra, cwd=folder.parent)
    assert out.returncode == 0, out.stderr
    return folder / "session.toml"


def one_clear_line(result, *patterns):
    """Exit 1 with one error line matching every pattern, no traceback."""
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    for pattern in patterns:
        assert re.search(pattern, result.stderr), result.stderr


@pytest.fixture(scope="module")
def session_copy(tmp_path_factory):
    """``copy(folder, *extra)``: a fresh copy at ``folder`` of the session that ``omnifc
    certs`` makes with ``extra``, made once per module (the tests damage, rewrite or run
    their copy; none reads another's, and a copy has never run, so no run record)."""
    made = {}

    def copy(folder, *extra):
        if extra not in made:
            made[extra] = make_session(tmp_path_factory.mktemp("certs") / "s", *extra)
        shutil.copytree(made[extra].parent, folder)
        return folder / "session.toml"
    return copy


@pytest.fixture
def session(tmp_path, session_copy):
    rng = np.random.default_rng(3)
    config = session_copy(tmp_path / "s")
    data = {}
    for i, name in enumerate(NAMES):
        data[name] = rng.uniform(-1, 1, (4 + i, 3))
        if i == 0:
            np.savetxt(tmp_path / "a.csv", data[name], delimiter=",")
        else:
            np.save(tmp_path / f"{name}.npy", data[name])
    return config, data


def data_file(tmp_path, name):
    return tmp_path / ("a.csv" if name == "a" else f"{name}.npy")


def start_serve(tmp_path, config, *extra):
    port_file = tmp_path / "port"
    serve = subprocess.Popen([*CLI, "serve", "--config", str(config), "--port-file",
                              str(port_file), *extra], cwd=tmp_path, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not (port_file.exists() and port_file.read_text().strip()):
        if serve.poll() is not None or time.monotonic() > deadline:
            serve.kill()
            raise AssertionError(serve.communicate()[1])
        time.sleep(0.1)
    return serve, port_file.read_text().strip()


def stop(*processes):
    for process in processes:
        if process.poll() is None:
            process.kill()
        process.communicate()


# -- item 2 (results saved and named), 3 (clipping in the summary), 10 (no bar redraws) -
def test_serve_and_join_save_results_by_default_and_print_the_paths(tmp_path, session):
    config, data = session
    serve, port = start_serve(tmp_path, config)
    joins = []
    try:
        for name in NAMES:
            joins.append(subprocess.Popen(
                [*CLI, "join", "--config", str(config), "--party", name, "--target",
                 f"127.0.0.1:{port}", "--data", str(data_file(tmp_path, name))],
                cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        out, err = serve.communicate(timeout=240)
        results = [join.communicate(timeout=120) for join in joins]
        assert serve.returncode == 0, (err, results)
    finally:
        stop(serve, *joins)
    session_id = re.search(r"session (\w+) listening", out).group(1)
    folder = tmp_path / "omnifc-results" / session_id
    saved = os.path.join("omnifc-results", session_id, "distances.npy")
    assert f"saved the squared-distance matrix to {saved}" in out
    x = np.concatenate([data[n] for n in NAMES])
    q = np.floor(np.clip(x, -2, 2) * 256 + 0.5).astype(np.int64)
    expected = ((q[:, None, :] - q[None, :, :]) ** 2).sum(-1) / 256.0**2
    assert np.array_equal(np.load(folder / "distances.npy"), expected)
    labels = np.load(folder / "labels.npy")
    assert labels.shape == (15,)
    offsets = np.cumsum([0, 4, 5, 6])
    for i, (name, (jout, jerr)) in enumerate(zip(NAMES, results)):
        assert "Traceback" not in jerr
        path = os.path.join("omnifc-results", session_id, f"{name}-labels.npy")
        assert f"to {path}" in jout, jout
        assert np.array_equal(np.load(tmp_path / path), labels[offsets[i]:offsets[i + 1]])
        n = 3 * (4 + i)
        assert f"clipping: 0 of {n} entries (0.0%)" in jout
        # stderr is a pipe: plain phase lines, each at most once, no tqdm redraws
        assert "\r" not in jerr
        phase_lines = [line for line in jerr.splitlines() if re.match(r"\[\d/5\]", line)]
        assert phase_lines and len(phase_lines) == len(set(phase_lines)), jerr
    assert "\r" not in err


# -- item 3: clipping is refused above the limit, and clip=error is reachable ------------
def test_join_refuses_heavy_clipping_before_connecting(tmp_path, session):
    config, data = session
    rows = data["b"].copy()
    rows[:, 0] = 5.0                                   # a third of the entries > R = 2
    np.save(tmp_path / "wide.npy", rows)
    result = omnifc("join", "--config", config, "--party", "b", "--data", "wide.npy",
                    "--target", "127.0.0.1:1", cwd=tmp_path)
    one_clear_line(result, r"party 'b': 5 of 15 entries \(33\.3%\) lie outside the public "
                           r"bound \[-2, 2\] and would be clipped", r"--max-clipped 1")
    assert "are clipped" not in result.stderr      # refused: nothing was clipped
    rows = data["b"].copy()
    rows[0, 0] = 2.5
    np.save(tmp_path / "one.npy", rows)
    result = omnifc("join", "--config", config, "--party", "b", "--data", "one.npy",
                    "--clip", "error", "--target", "127.0.0.1:1", cwd=tmp_path)
    one_clear_line(result, r"party 'b'", r"clip='error' refuses")


# -- item 5: one clear line for each way a first day goes wrong --------------------------
@pytest.mark.parametrize("content, pattern", [
    (None, r"data file 'missing\.npy' not found"),
    (b"", r"data file 'bad\.npy' is empty \(0 bytes\)"),
    ("strings", r"'bad\.npy' holds a <U\d+ array; the rows must be real numbers"),
    (b"not an npy file", r"could not read 'bad\.npy' as a NumPy \.npy array"),
])
def test_unusable_data_files_end_in_one_line(tmp_path, session, content, pattern):
    config, _ = session
    name = "missing.npy" if content is None else "bad.npy"
    if content == "strings":
        np.save(tmp_path / name, np.array([["x", "y", "z"]]))
    elif content is not None:
        (tmp_path / name).write_bytes(content)
    result = omnifc("join", "--config", config, "--party", "a", "--data", name,
                    "--target", "127.0.0.1:1", cwd=tmp_path)
    one_clear_line(result, r"^omnifc join: error: .*" + pattern)


@pytest.mark.parametrize("content, pattern", [
    ("x,y,z\n1,2,3\n", r"line 1, column 1: 'x' is not a number \(the file must have no "
                        r"header line\)"),
    ("1,2,3\n4,nan,6\n", r"line 2, column 2: 'nan' is not a finite number"),
    ("1,2,3\n\n4,5\n", r"line 3 has 2 values, line 1 has 3: every row needs the same "
                        r"number of columns"),
])
def test_csv_errors_name_the_line_and_column_a_user_sees(tmp_path, session, content,
                                                           pattern):
    config, _ = session
    (tmp_path / "bad.csv").write_text(content)
    result = omnifc("join", "--config", config, "--party", "a", "--data", "bad.csv",
                    "--target", "127.0.0.1:1", cwd=tmp_path)
    one_clear_line(result, r"^omnifc join: error: .*'bad\.csv'.*" + pattern)
    assert "usecols" not in result.stderr and "row 0" not in result.stderr


def test_damaged_coordinator_certificate_is_named(tmp_path, session):
    # the config pins (embeds) the coordinator's certificate: damage it there
    config, _ = session
    text = config.read_text()
    damaged = re.sub(r"(coordinator_certificate = '''\n-----BEGIN CERTIFICATE-----\n)[^\n]*\n",
                     r"\1garbage\n", text, count=1)
    assert damaged != text
    config.write_text(damaged)
    result = omnifc("serve", "--config", config, cwd=tmp_path)
    one_clear_line(result, r"coordinator_certificate is not a valid PEM X\.509 certificate")
    assert "port free" not in result.stderr


def test_damaged_coordinator_key_is_named(tmp_path, session):
    config, _ = session
    key = config.parent / "coordinator.key"
    key.write_bytes(key.read_bytes()[:60])
    result = omnifc("serve", "--config", config, cwd=tmp_path)
    one_clear_line(result, r"TLS key file '.*coordinator\.key' does not hold an unencrypted PEM "
                           r"private key")


def test_wrong_identity_key_names_the_pinned_party(tmp_path, session):
    config, _ = session
    text = config.read_text().replace('identity_key = "a.identity.pem"',
                                      'identity_key = "b.identity.pem"')
    config.write_text(text)
    result = omnifc("join", "--config", config, "--party", "a", "--data", "a.csv",
                    "--target", "127.0.0.1:1", cwd=tmp_path)
    one_clear_line(result, r"the identity key file '.*b\.identity\.pem' does not match the "
                           r"identity_public_key pinned for party 'a'")


def test_other_sessions_config_fails_on_the_certificate_not_after_the_deadline(tmp_path,
                                                                               session):
    config, _ = session
    other = make_session(tmp_path / "other", "--deadline", "join=200")
    serve, port = start_serve(tmp_path, config)
    try:
        # the join deadline is 200 s; the subprocess timeout (150 s) would fail the test
        result = omnifc("join", "--config", other, "--party", "a", "--data", "a.csv",
                        "--target", f"127.0.0.1:{port}", "--no-progress", cwd=tmp_path,
                        timeout=150)
    finally:
        stop(serve)
    one_clear_line(result, r"TLS handshake with 127\.0\.0\.1:\d+ failed",
                   r"CERTIFICATE_VERIFY_FAILED", r"another session")


def test_coordinator_not_running_logs_while_waiting_then_stops(tmp_path):
    config = make_session(tmp_path / "s", "--deadline", "join=7")
    np.save(tmp_path / "a.npy", np.zeros((3, 2)))
    import socket
    with socket.socket() as sock:                    # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    result = omnifc("join", "--config", config, "--party", "a", "--data", "a.npy",
                    "--target", f"127.0.0.1:{port}", cwd=tmp_path)
    one_clear_line(result, r"waiting for the coordinator at 127\.0\.0\.1:\d+ \(connection "
                           r"refused",
                   r"could not establish a connection to 127\.0\.0\.1:\d+ within 7 s",
                   r"omnifc serve")
    # item 7: a rerun warns as it starts; what follows (7 s of waiting for the coordinator
    # again) is what the first join showed, so it is stopped once the warning is out
    again = subprocess.Popen([*CLI, "join", "--config", str(config), "--party", "a", "--data",
                              "a.npy", "--target", f"127.0.0.1:{port}"], cwd=tmp_path,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONUNBUFFERED": "1"})
    said = []
    try:
        for line in again.stderr:  # ends by itself when the join gives up (7 s)
            said.append(line)
            if "was already run with this config" in line:
                break
    finally:
        stop(again)
    assert "was already run with this config" in "".join(said), said


# -- items 6/7: consistent CLI ----------------------------------------------------------
def test_version_flag(tmp_path):
    import omnifc as package

    result = omnifc("--version", cwd=tmp_path)
    assert result.returncode == 0 and result.stdout.strip() == f"omnifc {package.__version__}"


@pytest.mark.parametrize("command", ["demo", "simulate", "audit", "serve", "join", "certs",
                                     "bench", "reproduce"])
def test_every_help_shows_defaults_and_choices(capsys, command):
    """In process (the entry point itself is exercised by every other test here)."""
    from omnifc.cli import main

    with pytest.raises(SystemExit) as stop:
        main([command, "--help"])
    assert stop.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    if command in ("demo", "simulate"):
        assert "--parties PARTIES number of parties m (default: 4" in text or \
            "--parties PARTIES number of parties m (default: 3" in text
        assert "(default: 16)" in text
    if command == "demo":
        assert "--method {kmeans,kmeans-rows,spectral,fcm,nmf,dbscan,hierarchical,kmedoids}" \
            in text
        assert "--n-clusters" in text and "--clusters " not in text
        assert "--deadline [PHASE=]SECONDS" in text and "(default: 60 s per phase" in text
    if command == "join":
        assert "--max-clipped FRACTION" in text and "(default: 0.01)" in text
        assert "comma-separated" in text and "no header" in text
    if command == "audit":
        assert "--signed" in text and "--nonnegative" in text


def test_old_spelling_clusters_still_works(tmp_path):
    from omnifc.cli import build_parser

    args = build_parser().parse_args(["demo", "--clusters", "5"])
    assert args.n_clusters == 5
    assert build_parser().parse_args(["demo", "--n-clusters", "4"]).n_clusters == 4


@pytest.mark.parametrize("command", ["serve", "join"])
def test_insecure_flag_says_where_tls_is_switched_off(tmp_path, session, command):
    config, _ = session
    extra = ["--party", "a", "--data", "a.csv"] if command == "join" else []
    result = omnifc(command, "--config", config, *extra, "--insecure", cwd=tmp_path)
    one_clear_line(result, r"--insecure is not a command-line switch", r"\[tls\] enabled = false")


# -- item 4: the audit runs on the public config plus the caller's own files -------------
@pytest.mark.parametrize("keep", ["a", "coordinator"])
def test_audit_config_on_one_organizations_files(tmp_path, keep, session_copy):
    config = session_copy(tmp_path / "s", "--dim", "3")
    folder = config.parent
    own = {"a": {"a.pem", "a.key", "a.identity.pem"},
           "coordinator": {"coordinator.pem", "coordinator.key"}}[keep]
    for path in folder.iterdir():
        if path.name not in own | {"ca.pem", "session.toml"}:
            path.unlink()
    result = omnifc("audit", "--config", config, "--checks", "5", "--out", "report",
                    cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Transport security | PASS" in result.stdout
    report = (tmp_path / "report" / "report.md").read_text()
    assert "not on this machine" in report
    # the files that are here are still checked: a damaged own file fails the audit
    damaged = folder / ("a.identity.pem" if keep == "a" else "coordinator.key")
    damaged.write_text("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n")
    result = omnifc("audit", "--config", config, "--checks", "5", cwd=tmp_path)
    assert result.returncode == 1, result.stdout
    assert "Transport security | **FAIL**" in result.stdout


@pytest.mark.timeout(240)
@pytest.mark.parametrize("extra, data_out, pattern", [
    ((), "D.csv", r"--data-out D\.csv: the file must end in \.npy or \.zarr, got '\.csv'"),
    (("--layout", "landmarks", "--n-landmarks", "2"), "D.zarr",
     r"--data-out D\.zarr: a Zarr result holds the full layout's n x n matrix; this "
     r"session's layout is 'landmarks' \(save it as \.npy\)"),
])
def test_serve_refuses_a_data_out_it_cannot_write_before_it_listens(tmp_path, session_copy,
                                                                    extra, data_out, pattern):
    config = session_copy(tmp_path / "s", *extra)
    result = omnifc("serve", "--config", config, "--data-out", data_out, "--port-file",
                    "port", cwd=tmp_path)
    one_clear_line(result, pattern)
    assert not (tmp_path / "port").exists() and not (tmp_path / data_out).exists()
