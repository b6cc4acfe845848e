"""The TOML session config: round trips, validation messages, paths, and ``omnifc certs``."""

from __future__ import annotations

import math
import os
import re
import stat
import tomllib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from finite_field import ParameterError, make_plan
from omnifc.cli import main
from protocols import (
    ClusteringRequest,
    ConfigParameters,
    Deadlines,
    PartyEntry,
    SessionConfig,
    TLSSettings,
    _config,
    dump_session_config,
    load_identity,
    load_session_config,
    public_key_bytes,
)
from protocols._config import (
    MODES,
    PROTOCOL_VERSION,
    _toml_value,
    format_session_config,
    new_session_id,
    split_address,
    validate_party_name,
)

pytestmark = pytest.mark.timeout(60)

KEY_A, KEY_B, KEY_C = "aa" * 32, "bb" * 32, "cc" * 32
SHA_A = "0a" * 32

BASE = f'''
[session]
id = "{"1f" * 16}"
protocol_version = 3
coordinator = "127.0.0.1:50051"
mode = "masked"

[parameters]
dim = 4
segments = 1
noise_segments = 1
scale_bits = 16
bound = 8.0
nonnegative = false
primes = []

[clustering]
method = "kmeans"
n_clusters = 3

[deadlines]
join = 60
shares = 120
evaluation = 300
result = 60

[tls]
enabled = true
ca = "ca.pem"
coordinator_cert = "coordinator.pem"
coordinator_key = "coordinator.key"

[[parties]]
name = "a"
identity_public_key = "{KEY_A}"
certificate_sha256 = "{SHA_A}"
cert = "a.pem"
key = "a.key"
identity_key = "a.identity.pem"

[[parties]]
name = "b"
identity_public_key = "{KEY_B}"

[[parties]]
name = "c"
identity_public_key = "{KEY_C}"
'''


def _write(folder: Path, text: str, name: str = "session.toml") -> Path:
    path = folder / name
    path.write_text(text)
    return path


def _full_config(folder: Path) -> SessionConfig:
    """Every field away from its default."""
    parties = tuple(PartyEntry(name, bytes([i + 1]) * 32, bytes([i + 9]) * 32,
                               folder / "keys" / f"{name}.pem", folder / "keys" / f"{name}.key",
                               folder / "keys" / f"{name}.identity.pem")
                    for i, name in enumerate(["alpha", "beta.2", "gamma_3", "d-4", "e"]))
    return SessionConfig(
        session_id="0123456789abcdef" * 2, coordinator="[::1]:6000", mode="transparent",
        parties=parties,
        parameters=ConfigParameters(dim=6, segments=2, noise_segments=1, scale_bits=12,
                                    bound=2.5, nonnegative=True, primes=(2147483647, 65521)),
        clustering=ClusteringRequest(method="spectral", n_clusters=None),
        deadlines=Deadlines(join=1.5, shares=2, evaluation=3.25, result=4),
        tls=TLSSettings(enabled=True, ca=folder / "ca.pem",
                        coordinator_cert=folder / "srv" / "c.pem",
                        coordinator_key=Path("/etc/omnifc/c.key")))


# --- round trips and paths -----------------------------------------------------------------

def test_dump_load_round_trip_is_equal(tmp_path):
    config = _full_config(tmp_path)
    path = dump_session_config(config, tmp_path / "session.toml")
    loaded = load_session_config(path)
    assert loaded == config
    assert loaded.path == path
    # and again: dumping what was loaded gives the same text
    assert format_session_config(loaded, tmp_path) == path.read_text()


def test_written_toml_is_plain_toml_with_relative_paths(tmp_path):
    path = dump_session_config(_full_config(tmp_path), tmp_path / "session.toml")
    data = tomllib.loads(path.read_text())
    assert data["tls"]["ca"] == "ca.pem"
    assert data["tls"]["coordinator_cert"] == "srv/c.pem"
    assert data["tls"]["coordinator_key"] == "/etc/omnifc/c.key"  # outside: absolute
    assert data["parties"][0]["cert"] == "keys/alpha.pem"
    assert data["parties"][0]["identity_public_key"] == "01" * 32
    assert data["parameters"]["primes"] == [2147483647, 65521]
    assert "n_clusters" not in data["clustering"]
    assert data["session"]["mode"] == "transparent"


def test_dump_into_another_folder_keeps_the_same_files(tmp_path):
    config = _full_config(tmp_path / "here")
    path = dump_session_config(config, (tmp_path / "elsewhere").mkdir() or
                               tmp_path / "elsewhere" / "s.toml")
    assert tomllib.loads(path.read_text())["tls"]["ca"] == str(tmp_path / "here" / "ca.pem")
    assert load_session_config(path) == config


def test_relative_paths_resolve_against_the_config_folder(tmp_path, monkeypatch):
    folder = tmp_path / "conf"
    folder.mkdir()
    text = BASE.replace('ca = "ca.pem"', 'ca = "../pki/ca.pem"').replace(
        'key = "a.key"', 'key = "/abs/a.key"')
    path = _write(folder, text)
    monkeypatch.chdir(tmp_path)  # the working directory must not matter
    config = load_session_config(Path("conf") / "session.toml")
    assert config.tls.ca == tmp_path / "pki" / "ca.pem"
    assert config.tls.coordinator_cert == folder / "coordinator.pem"
    assert config.party("a").cert == folder / "a.pem"
    assert config.party("a").key == Path("/abs/a.key")
    assert config.party("b").cert is None
    assert config.path == path
    assert config.party_tls("a") == (folder / "a.pem", Path("/abs/a.key"), config.tls.ca)


def test_loaded_values(tmp_path):
    config = load_session_config(_write(tmp_path, BASE))
    assert config.session_id == "1f" * 16
    assert config.protocol_version == PROTOCOL_VERSION == 3
    assert config.mode == "masked" and not config.insecure
    assert config.parameters == ConfigParameters(dim=4)
    assert config.deadlines == Deadlines(60, 120, 300, 60)
    assert config.party_names == ("a", "b", "c")
    assert config.party("a").identity_public_key == bytes.fromhex(KEY_A)
    assert config.party("a").certificate_sha256 == bytes.fromhex(SHA_A)
    assert config.party("b").certificate_sha256 is None


def test_defaults_for_optional_tables(tmp_path):
    text = re.sub(r"\[clustering\].*?\[tls\]", "[tls]", BASE, flags=re.S)
    config = load_session_config(_write(tmp_path, text))
    assert config.clustering == ClusteringRequest("kmeans", 3)
    assert config.deadlines == Deadlines()
    # a [clustering] table without n_clusters means "the method chooses"
    text = BASE.replace("n_clusters = 3\n", "")
    assert load_session_config(_write(tmp_path, text)).clustering.n_clusters is None


# --- validation ------------------------------------------------------------------------------

INVALID = [
    ('mode = "masked"', 'mode = "open"', r"\[session\] mode .*'open'"),
    ("join = 60", "join = -5", r"\[deadlines\] join .*-5"),
    ("shares = 120", "shares = 0", r"\[deadlines\] shares .*> 0, got 0"),
    ("evaluation = 300", 'evaluation = "soon"', r"\[deadlines\] evaluation .*'soon'"),
    ('name = "b"', 'name = "a"', r"duplicate party 'a'"),
    ('name = "b"', 'name = "b c"', r"\[\[parties\]\] name .*'b c'"),
    (f'"{KEY_B}"', '"zz' + "b" * 62 + '"', r"'b': identity_public_key must be 64 hex .*'zzb"),
    (f'"{KEY_B}"', '"' + "b" * 62 + '"', r"'b': identity_public_key must be 64 hex .*got 62"),
    (f'"{KEY_B}"', f'"{KEY_A}"', r"parties 'a' and 'b' pin the same identity key"),
    (f'"{SHA_A}"', '"abc"', r"'a': certificate_sha256 must be 64 hex .*'abc'"),
    ('mode = "masked"', 'mode = "masked"\nmoode = 1', r"\[session\]: unknown key moode"),
    ("[tls]", "[extra]\nx = 1\n[tls]", r"top level: unknown key extra"),
    ('name = "c"', 'name = "c"\ncolour = "red"', r"entry 2: unknown key colour"),
    ("protocol_version = 3", "protocol_version = 2", r"protocol_version 2 is not supported"),
    ("segments = 1", "segments = 0", r"\[parameters\] segments must be >= 1, got 0"),
    ("segments = 1", "segments = 5", r"segments must be <= dim = 4, got 5"),
    ("segments = 1", "segments = 2", r"lists 3 parties; .*need at least 2l\+2t-1 = 5"),
    ("noise_segments = 1", "noise_segments = 1.5", r"noise_segments must be an integer, got 1.5"),
    ("scale_bits = 16", "scale_bits = 31", r"scale_bits must be <= 30, got 31"),
    ("bound = 8.0", "bound = -1.0", r"\[parameters\] bound .*> 0, got -1.0"),
    ("bound = 8.0", 'bound = "8"', r"\[parameters\] bound .*'8'"),
    ("bound = 8.0", "bound = inf", r"\[parameters\] bound .*inf"),
    ("dim = 4", "dim = -1", r"\[parameters\] dim must be >= 0, got -1"),
    ("dim = 4\n", "", r"\[parameters\] dim is missing"),
    ("primes = []", "primes = [15]", r"primes entry must be prime, got 15"),
    ("primes = []", "primes = [13, 13]", r"primes must be distinct"),
    ("primes = []", "primes = 13", r"primes must be a list"),
    ("nonnegative = false", "nonnegative = 0", r"nonnegative must be true or false, got 0"),
    ("n_clusters = 3", "n_clusters = 0", r"n_clusters must be >= 1, got 0"),
    ('method = "kmeans"', 'method = ""', r"\[clustering\] method .*''"),
    ('"127.0.0.1:50051"', '"localhost"', r"coordinator must look like 'host:port'.*'localhost'"),
    ('"127.0.0.1:50051"', '"127.0.0.1:70000"', r"port must be in \[0, 65535\], got 70000"),
    ('id = "' + "1f" * 16 + '"', 'id = "session-1"', r"\[session\] id .*'session-1'"),
    ('id = "' + "1f" * 16 + '"\n', "", r"\[session\] id is missing"),
    ('ca = "ca.pem"\n', "", r"\[tls\] ca is required when TLS is enabled"),
    ("enabled = true", 'enabled = "yes"', r"\[tls\] enabled must be true or false"),
    ("[[parties]]", "[[partys]]", r"unknown key partys"),
    ("coordinator_key =", "coordinator_key = =", None),  # invalid TOML
    # the quantizer and the no-wrap bound are checked at load, not at run time
    ("bound = 8.0", "bound = 1.0e12", r"bound \* 2\^scale_bits must be below 2\^53"),
    ("scale_bits = 16", "scale_bits = 30", r"needed 70.0 bits, at most 63"),
    ("primes = []", "primes = [2147483647]", r"product of the primes \(31.0 bits\) must "
                                             r"exceed the largest squared distance"),
    ("dim = 4", "dim = 2000000", r"dim must be <= 1048576, got 2000000"),
    ("join = 60", "join = 1e9", r"\[deadlines\] join must be <= 604800 seconds"),
    ("primes = []", "primes = []\nmax_rows_per_party = 0",
     r"max_rows_per_party must be >= 1, got 0"),
    ("primes = []", "primes = []\nmax_rows_total = 1.5", r"max_rows_total must be an integer"),
    ("primes = []", "primes = []\nmax_rows_per_party = 10\nmax_rows_total = 9",
     r"max_rows_per_party \(10\) must be <= max_rows_total \(9\)"),
    ("primes = []", "primes = []\nmax_rows_total = 20000000", r"max_rows_total must be <= "),
]


@pytest.mark.parametrize("old, new, match", INVALID, ids=[f"{i}" for i in range(len(INVALID))])
def test_each_invalid_value_names_the_key_and_the_value(tmp_path, old, new, match):
    assert old in BASE
    path = _write(tmp_path, BASE.replace(old, new, 1))
    with pytest.raises(ParameterError) as info:
        load_session_config(path)
    message = str(info.value)
    assert str(path) in message
    if match is None:
        assert "not valid TOML" in message
    else:
        assert re.search(match, message), message


def test_no_parties_and_missing_file(tmp_path):
    text = BASE[:BASE.index("[[parties]]")]
    with pytest.raises(ParameterError, match=r"at least one \[\[parties\]\] entry"):
        load_session_config(_write(tmp_path, text))
    with pytest.raises(ParameterError, match="session config not found"):
        load_session_config(tmp_path / "nope.toml")


def test_tls_disabled_is_allowed_but_insecure_and_warns(tmp_path, caplog):
    with caplog.at_level("WARNING", logger="protocols"):
        load_session_config(_write(tmp_path, BASE))
    assert not caplog.records
    text = re.sub(r"\[tls\].*?\n\n", "[tls]\nenabled = false\n\n", BASE, flags=re.S)
    with caplog.at_level("WARNING", logger="protocols"):
        config = load_session_config(_write(tmp_path, text))
    assert config.insecure and config.tls.ca is None
    assert any("disables TLS" in r.getMessage() and r.levelname == "WARNING"
               for r in caplog.records)
    with pytest.raises(ParameterError, match="TLS is disabled"):
        config.coordinator_tls()
    with pytest.raises(ParameterError, match="TLS is disabled"):
        config.party_tls("a")
    assert "enabled = false" in format_session_config(config, tmp_path)


def test_with_revalidates_and_lookups_are_clear(tmp_path):
    config = load_session_config(_write(tmp_path, BASE))
    moved = config.with_(coordinator="10.0.0.1:4242")
    assert moved.coordinator == "10.0.0.1:4242" and moved.parties == config.parties
    with pytest.raises(ParameterError, match=r"\[session\] mode"):
        config.with_(mode="plain")
    with pytest.raises(ParameterError, match=r"at least 2l\+2t-1 = 3"):
        config.with_(parties=config.parties[:2])
    with pytest.raises(ParameterError, match=r"unknown party 'zed'; .*'a', 'b', 'c'"):
        config.party("zed")
    with pytest.raises(ParameterError, match=r"no TLS certificate file for party 'b': pass "
                                             r"--keys DIR"):
        config.party_tls("b")


def test_parameters_make_the_same_plan_as_finite_field(tmp_path):
    params = ConfigParameters(dim=0, segments=2, noise_segments=1, scale_bits=10, bound=3.0)
    plan = params.make_plan(parties=5, dim=6)
    direct = make_plan(6, bound=3.0, scale_bits=10, segments=2, noise_segments=1, parties=5)
    assert plan.primes == direct.primes and plan.describe() == direct.describe()
    fixed = ConfigParameters(dim=4)
    with pytest.raises(ParameterError, match="fixes d = 4, the data has d = 5"):
        fixed.make_plan(parties=3, dim=5)
    assert fixed.make_plan(parties=3).dim == 4
    with pytest.raises(ParameterError, match="d is not known yet"):
        ConfigParameters().make_plan(parties=3)


def test_constants_agree_with_the_protocol_messages():
    from protocols import _crypto, _messages

    assert PROTOCOL_VERSION == _crypto.PROTOCOL_VERSION
    assert tuple(MODES) == tuple(_messages.MODES)


def test_strings_are_escaped_in_toml(tmp_path):
    config = _full_config(tmp_path).with_(
        tls=TLSSettings(True, ca=tmp_path / 'we"ird\\ca\t.pem', coordinator_cert=tmp_path / "c",
                        coordinator_key=tmp_path / "k"))
    path = dump_session_config(config, tmp_path / "s.toml")
    assert load_session_config(path).tls.ca == tmp_path / 'we"ird\\ca\t.pem'


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",))))
def test_any_string_survives_the_toml_emitter(text):
    assert tomllib.loads(f"x = {_toml_value(text)}\n")["x"] == text


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(st.floats(allow_nan=False, allow_infinity=False), st.integers(-2**63, 2**63 - 1))
def test_numbers_survive_the_toml_emitter(number, integer):
    data = tomllib.loads(f"f = {_toml_value(number)}\ni = {_toml_value(integer)}\n")
    assert data["f"] == number and isinstance(data["f"], float)
    assert data["i"] == integer


# --- the CLI ----------------------------------------------------------------------------------

def test_certs_cli_writes_a_loadable_session_config(tmp_path, capsys):
    out = tmp_path / "session"
    argv = ["certs", "--out", str(out), "--parties", "north,south,east,west,centre",
            "--coordinator", "hub", "--days", "7", "--dim", "8", "--bound", "4.5",
            "--scale-bits", "12", "--segments", "2", "--noise-segments", "1",
            "--mode", "transparent", "--coordinator-address", "127.0.0.1:6001",
            "--n-clusters", "4", "--deadline", "join=15", "--deadline", "evaluation=90"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    config = load_session_config(out / "session.toml")
    assert config.party_names == ("north", "south", "east", "west", "centre")
    assert config.parameters == ConfigParameters(dim=8, segments=2, noise_segments=1,
                                                 scale_bits=12, bound=4.5)
    assert (config.mode, config.coordinator) == ("transparent", "127.0.0.1:6001")
    assert config.clustering == ClusteringRequest("kmeans", 4)
    assert config.deadlines == Deadlines(join=15, evaluation=90)
    assert config.tls.coordinator_name == "hub"
    assert config.coordinator_tls().cert == (out / "hub.pem").read_bytes()
    assert config.coordinator_tls().key == out / "hub.key"
    for party in config.parties:
        assert public_key_bytes(load_identity(party.identity_key)) == party.identity_public_key
        assert stat.S_IMODE(party.key.stat().st_mode) == 0o600
    # it says plainly that it is a demo shortcut: its operator can impersonate everyone
    assert "WARNING: DEMO ONLY" in printed and "impersonate every party" in printed
    # the fingerprints it prints are the ones the config and the cards hold, one format
    from protocols._cards import load_card
    for party in config.parties:
        assert re.search(rf"party\s+{party.name}\s+{party.fingerprint}", printed)
        assert load_card(out / f"{party.name}.card.toml").fingerprint == party.fingerprint
    assert re.search(rf"coordinator\s+hub\s+{config.tls.coordinator_fingerprint}", printed)
    assert f"session fingerprint: {config.fingerprint}" in printed
    # it says what it wrote, and prints no key material
    assert "session.toml" in printed and "north.identity.pem" in printed
    for path in out.iterdir():
        if path.suffix in (".key",) or path.name.endswith(".identity.pem"):
            body = "".join(path.read_text().splitlines()[1:-1])
            assert body[:40] not in printed.replace("\n", "")


def test_certs_cli_refuses_to_overwrite_without_force(tmp_path, capsys):
    argv = ["certs", "--out", str(tmp_path), "--parties", "a,b,c"]
    assert main(argv) == 0
    key = (tmp_path / "a.key").read_bytes()
    capsys.readouterr()
    assert main(argv) == 1
    assert "refusing to overwrite" in capsys.readouterr().err
    assert (tmp_path / "a.key").read_bytes() == key
    assert main(argv + ["--force"]) == 0
    assert (tmp_path / "a.key").read_bytes() != key


@pytest.mark.parametrize("extra, message", [
    (["--parties", "a,,c"], "--parties must be comma-separated"),
    (["--parties", "a,b,c", "--deadline", "lunch=5"], "--deadline phases"),
    (["--parties", "a,b,c", "--deadline", "join"], "PHASE=SECONDS"),
    (["--parties", "a,b,c", "--primes", "x"], "--primes must be"),
    (["--parties", "a,b", "--noise-segments", "1"], r"need at least 2l\+2t-1 = 3"),
])
def test_certs_cli_errors(tmp_path, capsys, extra, message):
    assert main(["certs", "--out", str(tmp_path / "o")] + extra) == 1
    assert re.search(message, capsys.readouterr().err)
    assert not (tmp_path / "o").exists()


# --- row caps, warnings and the validation hook -----------------------------------------------

def test_row_caps_have_documented_defaults_and_round_trip(tmp_path):
    assert (ConfigParameters().max_rows_per_party, ConfigParameters().max_rows_total) == \
        (1_000_000, 2_000_000)
    config = load_session_config(_write(tmp_path, BASE))
    assert config.parameters.max_rows_per_party == 1_000_000
    capped = config.with_(parameters=ConfigParameters(dim=4, max_rows_per_party=500,
                                                      max_rows_total=1200))
    path = dump_session_config(capped, tmp_path / "capped.toml")
    data = tomllib.loads(path.read_text())
    assert (data["parameters"]["max_rows_per_party"], data["parameters"]["max_rows_total"]) \
        == (500, 1200)
    assert load_session_config(path).parameters == capped.parameters


def test_transparent_mode_loads_with_a_warning(tmp_path, caplog):
    with caplog.at_level("WARNING", logger="protocols"):
        config = load_session_config(_write(tmp_path, BASE.replace('"masked"',
                                                                    '"transparent"')))
    assert config.mode == "transparent"
    warnings = [r for r in caplog.records if "transparent" in r.getMessage()]
    assert warnings and all(r.levelname == "WARNING" for r in warnings)
    assert "per-segment distance" in warnings[0].getMessage()


def test_the_validation_hook_runs_at_load_and_its_error_names_the_file(tmp_path):
    seen = []

    def refuse_spectral(config):
        seen.append(config.session_id)
        if config.clustering.method == "spectral":
            raise ParameterError("[clustering] spectral is not allowed here")

    path = _write(tmp_path, BASE)
    load_session_config(path, validate=refuse_spectral)
    assert seen == ["1f" * 16]
    path = _write(tmp_path, BASE.replace('"kmeans"', '"spectral"'))
    with pytest.raises(ParameterError, match=re.escape(str(path)) + ".*spectral is not "):
        load_session_config(path, validate=refuse_spectral)


@pytest.mark.parametrize("change, match", [
    ('method = "kmenas"', r"method 'kmenas' is not a clustering method of omnifc; valid "
                          r"methods: kmeans, kmeans-rows, spectral, .*dbscan"),
    ('method = "hierarchical"\n', r"method 'hierarchical' needs n_clusters"),
])
def test_the_omnifc_cli_validates_the_clustering_request_at_load(tmp_path, capsys, change,
                                                                 match):
    from omnifc.cli.cmd_session import load_config

    text = BASE.replace('method = "kmeans"\nn_clusters = 3\n', change)
    path = _write(tmp_path, text)
    load_session_config(path)  # protocols alone cannot know omnifc's methods
    with pytest.raises(ParameterError, match=match):
        load_config(path)
    # serve, join, audit and `session fingerprint` refuse it before doing anything
    for argv in (["serve", "--config", str(path), "--address", "127.0.0.1:0"],
                 ["join", "--config", str(path), "--party", "a", "--data", "none.npy"],
                 ["audit", "--config", str(path), "--dim", "4"],
                 ["session", "fingerprint", str(path)]):
        assert main(argv) == 1, argv
        captured = capsys.readouterr()
        assert re.search(match, captured.err), (argv, captured.err)
        assert "listening" not in captured.out
    # a method that chooses its own number of clusters needs none
    text = BASE.replace('method = "kmeans"\nn_clusters = 3\n', 'method = "dbscan"\n')
    assert load_config(_write(tmp_path, text)).clustering == ClusteringRequest("dbscan", None)


def test_certs_refuses_an_unknown_clustering_method_before_writing(tmp_path, capsys):
    out = tmp_path / "o"
    assert main(["certs", "--out", str(out), "--parties", "a,b,c", "--method", "kmenas"]) == 1
    assert "valid methods: kmeans" in capsys.readouterr().err
    assert not out.exists()


# --- the session fingerprint --------------------------------------------------------------------

@pytest.fixture(scope="module")
def ceremony(tmp_path_factory):
    from protocols import generate_certificates

    folder = tmp_path_factory.mktemp("fp")
    certs = generate_certificates(folder, ["a", "b", "c", "d", "e"])
    other = generate_certificates(tmp_path_factory.mktemp("fp-other"), ["a", "b", "c", "d", "e"])
    return certs, other


def test_fingerprint_is_stable_across_copies_formatting_and_local_paths(ceremony, tmp_path):
    from protocols import session_fingerprint

    certs, _ = ceremony
    text = certs.config.read_text()
    config = load_session_config(certs.config)
    fingerprint = config.fingerprint
    assert re.fullmatch(r"[A-Z2-7]{4}(-[A-Z2-7]{4}){7}", fingerprint)
    assert session_fingerprint(load_session_config(certs.config)) == fingerprint
    # a copy elsewhere, with other comments, number formatting and key paths
    edited = re.sub(r" +#[^\n]*", "", text).replace("join = 60.0", "join = 60")
    edited = edited.replace('coordinator_key = "coordinator.key"',
                            'coordinator_key = "/elsewhere/keys/coordinator.key"')
    edited = edited.replace('mode = "masked"', "").replace(
        "[session]\n", '[session]\nmode = "masked"\n')  # another key order
    assert edited != text
    copy = _write(tmp_path, edited)
    assert load_session_config(copy).fingerprint == fingerprint
    assert config.with_keys("b", tmp_path).fingerprint == fingerprint
    # a dump of the loaded config (relative paths rewritten) keeps it too
    moved = dump_session_config(config, tmp_path / "moved.toml")
    assert load_session_config(moved).fingerprint == fingerprint


TEXT_CHANGES = [
    (r'id = "[0-9a-f]{32}"', 'id = "' + "ab" * 16 + '"'),
    ('coordinator = "127.0.0.1:50051"', 'coordinator = "127.0.0.1:50052"'),
    ('mode = "masked"', 'mode = "transparent"'),
    ("adversaries = 2", "adversaries = 1"),
    ("dim = 0", "dim = 4"),
    # (with t = 2 the five parties leave no check: A must then be 0)
    (r"(?s)adversaries = 2(.*)noise_segments = 1", r"adversaries = 0\1noise_segments = 2"),
    ("scale_bits = 16", "scale_bits = 15"),
    ("bound = 8.0", "bound = 8.5"),
    ("nonnegative = false", "nonnegative = true"),
    ("primes = []", "primes = [2147483647, 2147483629]"),
    ("max_rows_per_party = 1000000", "max_rows_per_party = 999999"),
    ("max_rows_total = 2000000", "max_rows_total = 2000001"),
    ('method = "kmeans"', 'method = "spectral"'),
    ("n_clusters = 3", "n_clusters = 4"),
    ("join = 60.0", "join = 61.0"),
    ("shares = 120.0", "shares = 120.5"),
    ("evaluation = 300.0", "evaluation = 299.0"),
    ("result = 60.0", "result = 1.0"),
    ("enabled = true", "enabled = false"),
]


@pytest.mark.parametrize("old, new", TEXT_CHANGES, ids=[n for _, n in TEXT_CHANGES])
def test_fingerprint_changes_with_every_setting_of_meaning(ceremony, tmp_path, old, new):
    certs, _ = ceremony
    text = certs.config.read_text()
    pattern = old if old.startswith(("id", "(?s)")) else re.escape(old)  # regexes
    assert re.search(pattern, text), old
    changed = load_session_config(_write(tmp_path, re.sub(pattern, new, text, count=1)))
    assert changed.fingerprint != load_session_config(certs.config).fingerprint


def test_fingerprint_changes_with_every_pinned_key_certificate_and_the_roster_order(ceremony):
    import dataclasses

    certs, other = ceremony
    config, foreign = load_session_config(certs.config), load_session_config(other.config)
    fingerprints = {config.fingerprint}
    variants = [
        config.with_(parties=config.parties[::-1]),                        # roster order
        config.with_(parties=(foreign.parties[0],) + config.parties[1:]),  # a's whole card
        config.with_(parties=tuple(                                        # b's identity key
            dataclasses.replace(p, identity_public_key=foreign.party("b").identity_public_key,
                                certificate=None, fingerprint=None) if p.name == "b" else p
            for p in config.parties), tls=dataclasses.replace(config.tls, ca=certs.config)),
        config.with_(tls=dataclasses.replace(config.tls, coordinator_fingerprint=None,  # hub
                                             coordinator_certificate=foreign.tls
                                             .coordinator_certificate)),
    ]
    for variant in variants:
        fingerprints.add(variant.fingerprint)
    assert len(fingerprints) == len(variants) + 1


def test_dump_refuses_to_write_through_a_symbolic_link(ceremony, tmp_path):
    import os

    target = tmp_path / "precious.txt"
    target.write_text("keep me")
    link = tmp_path / "session.toml"
    os.symlink(target, link)
    config = load_session_config(ceremony[0].config)
    for overwrite in (False, True):
        with pytest.raises(ParameterError, match="symbolic link"):
            dump_session_config(config, link, overwrite=overwrite)
    assert target.read_text() == "keep me" and link.is_symlink()


def test_safe_writes_without_hard_links_still_refuse_existing_files(tmp_path, monkeypatch):
    import os

    from protocols._files import write_file

    def no_links(*args, **kwargs):
        raise PermissionError("this file system has no hard links")

    monkeypatch.setattr(os, "link", no_links)
    path = write_file(tmp_path / "x.txt", b"one")
    assert path.read_bytes() == b"one"
    with pytest.raises(ParameterError, match="refusing to overwrite"):
        write_file(tmp_path / "x.txt", b"two")
    assert write_file(tmp_path / "x.txt", b"two", overwrite=True).read_bytes() == b"two"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.txt"]  # no temporary left


# -- folded in from test_config_bites.py --------------------------------------------------
# protocols._config: the typed field checks and name/address rules, boundary by boundary.
#
# Mutation testing (issue 14) of the validation functions of _config.py: each rule is
# checked at and just past its documented limits, with the exact message (what was
# expected, what was seen), against hand-written cases.

def _raises(text, call, *args, **kwargs):
    with pytest.raises(ParameterError) as info:
        call(*args, **kwargs)
    assert str(info.value) == text
    return info.value


def test_show_shortens_long_values_to_80_characters():
    assert _config._show("a" * 78) == repr("a" * 78)                  # 80 characters: kept
    assert _config._show("a" * 79) == repr("a" * 79)[:77] + "..."     # 81: cut to 80
    assert len(_config._show("a" * 79)) == 80
    assert _config._show(None) == "None" and _config._show(b"x") == "b'x'"


@pytest.mark.parametrize("name", ["a", "0", "Z" * 64, "a.b-c_d", "9lives", "x" + "-" * 63])
def test_valid_party_names(name):
    assert validate_party_name(name) == name


@pytest.mark.parametrize("name", ["", "-a", ".a", "_a", "a" * 65, "a b", "a/b", "a:b", "é",
                                  None, 5, b"abc", "a\n"])
def test_invalid_party_names_are_refused_naming_the_value(name):
    _raises("party name must be 1-64 characters from [A-Za-z0-9_.-] starting with a letter "
            f"or digit, got {_config._show(name)}", validate_party_name, name)
    _raises("coordinator name must be 1-64 characters from [A-Za-z0-9_.-] starting with a "
            f"letter or digit, got {_config._show(name)}", validate_party_name, name,
            what="coordinator name")


@pytest.mark.parametrize("address, expected", [
    ("127.0.0.1:0", ("127.0.0.1", 0)), ("localhost:65535", ("localhost", 65535)),
    ("[::1]:50051", ("::1", 50051)), ("[fe80::A:1]:1", ("fe80::A:1", 1)),
    ("[::ffff:10.0.0.1]:7", ("::ffff:10.0.0.1", 7)), ("host.example:00080", ("host.example", 80)),
])
def test_split_address(address, expected):
    assert split_address(address) == expected


@pytest.mark.parametrize("address", ["localhost", ":80", "host:", "host:123456", "a b:1",
                                     "::1:80", "[::1]", "[::1]:", "[host]:80", "host:80 ",
                                     "[::1]:1x", "ho[st:1", "host:-1", ""])
def test_malformed_addresses_are_refused(address):
    _raises("[session] coordinator must look like 'host:port' or '[ipv6]:port', got "
            f"{address!r}", split_address, address)


def test_address_port_range_and_type():
    _raises("[session] coordinator port must be in [0, 65535], got 65536", split_address,
            "host:65536")
    _raises("[session] coordinator port must be in [0, 65535], got 99999", split_address,
            "[::1]:99999")
    _raises("[session] coordinator must be a 'host:port' string, got 50051", split_address,
            50051)
    _raises("[session] coordinator must be a 'host:port' string, got None", split_address, None)


def test_new_session_ids_are_fresh_32_hex_characters():
    ids = {new_session_id() for _ in range(20)}
    assert len(ids) == 20
    for value in ids:
        assert re.fullmatch(r"[0-9a-f]{32}", value)
        assert _config._SESSION_ID.fullmatch(value)


def test_int_checks_type_and_both_bounds_inclusively():
    assert _config._int(5, "k") == 5 and type(_config._int(5, "k")) is int
    assert _config._int(3, "k", 3, 7) == 3 and _config._int(7, "k", 3, 7) == 7
    assert _config._int(-10**30, "k") == -10**30
    assert _config._int(0, "k", minimum=0) == 0 and _config._int(0, "k", maximum=0) == 0
    _raises("k must be >= 3, got 2", _config._int, 2, "k", 3, 7)
    _raises("k must be <= 7, got 8", _config._int, 8, "k", 3, 7)
    _raises("k must be >= 0, got -1", _config._int, -1, "k", minimum=0)
    _raises("k must be <= 0, got 1", _config._int, 1, "k", maximum=0)
    for bad in (True, False, 2.0, "2", None):
        _raises(f"k must be an integer, got {_config._show(bad)}", _config._int, bad, "k")


def test_positive_number():
    assert _config._positive_number(2, "x") == 2.0 and type(_config._positive_number(2, "x")) \
        is float
    assert _config._positive_number(1e-300, "x") == 1e-300
    for bad in (0, 0.0, -1, -0.5, math.inf, math.nan, -math.inf, True, "1", None):
        _raises(f"x must be a finite number > 0, got {_config._show(bad)}",
                _config._positive_number, bad, "x")


def test_bool():
    assert _config._bool(True, "b") is True and _config._bool(False, "b") is False
    for bad in (0, 1, "true", None):
        _raises(f"b must be true or false, got {_config._show(bad)}", _config._bool, bad, "b")


def test_hex_bytes():
    assert _config._hex_bytes("00ff", "h", 2) == b"\x00\xff"
    assert _config._hex_bytes("ABcd", "h", 2) == b"\xab\xcd"
    assert _config._hex_bytes(b"\x01\x02", "h", 2) == b"\x01\x02"
    assert _config._hex_bytes(bytearray(b"\x01\x02"), "h", 2) == b"\x01\x02"
    assert _config._hex_bytes("", "h", 0) == b""
    for bad in ("0g00", "abc", " 00ff", "00ff\n", 1234, None):
        _raises(f"h must be 4 hex characters, got {_config._show(bad)}", _config._hex_bytes,
                bad, "h", 2)
    _raises("h must be 4 hex characters (2 bytes), got 6", _config._hex_bytes, "00ff00", "h", 2)
    _raises("h must be 4 hex characters (2 bytes), got 2", _config._hex_bytes, b"\x00", "h", 2)
    _raises("h must be 64 hex characters (32 bytes), got 62", _config._hex_bytes, "ab" * 31,
            "h", 32)


def test_path():
    assert _config._path(None, "p") is None
    assert _config._path("a/./b/../c", "p") == Path("a/c")
    assert _config._path(Path("x//y/"), "p") == Path("x/y")
    assert isinstance(_config._path(os.path.join("a", "b"), "p"), Path)
    for bad in ("", 5, b"a/b"):
        _raises(f"p must be a non-empty path string, got {_config._show(bad)}", _config._path,
                bad, "p")
