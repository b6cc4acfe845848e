"""The parameter table (protocols/_parameters.py) is the one declaration of the public
session parameters: every row reaches SessionParameters, the session config (TOML written
and read back), the proto, the session fingerprint, the CLI options and AuditParameters.

The last test adds a throwaway row to the table's source (and nothing else) in a fresh
interpreter and follows it through every layer: adding a parameter is one edit.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

from finite_field import ParameterError
from protocols import (ConfigParameters, PartyEntry, SessionConfig, SessionParameters,
                       TLSSettings, dump_session_config, load_session_config,
                       parameters_from_config, session_fingerprint)
from protocols._config import canonical_session
from protocols._generated import omnifc_pb2 as pb
from protocols._parameters import PARAMETER, PARAMETERS, REQUIRED, table_fields

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parents[2]
SID = "ab" * 16
#: A value other than the default for every config parameter (valid together, m = 9).
M = 9
CONFIG_VALUES = {"dim": 6, "bound": 3.0, "scale_bits": 12, "segments": 2, "noise_segments": 2,
                 "nonnegative": True, "primes": (2147483647, 2147483629),
                 "max_rows_per_party": 500, "max_rows_total": 900, "mask_degree": 3,
                 "mode": "transparent", "integrity": "correct", "adversaries": 1,
                 "layout": "landmarks", "layout_rows": (1, 4), "n_landmarks": 2,
                 "max_landmarks": 64, "max_pairs": 1000, "reconnect_grace": 5.0}
#: Other values for the fingerprint test where the default alone would be refused (the
#: full layout lists no rows).
OTHER_VALUES = {"dim": {"dim": 7}, "max_rows_per_party": {"max_rows_per_party": 400},
                "adversaries": {"adversaries": 0},
                "layout": {"layout": "full", "layout_rows": (), "n_landmarks": 0}}


def _config(**changes) -> SessionConfig:
    session = {f.name: changes.pop(f.name) for f in table_fields("session")
               if f.name in changes}
    parties = tuple(PartyEntry(f"p{i}", bytes([i + 1]) * 32) for i in range(M))
    return SessionConfig(SID, "127.0.0.1:50051", parties, tls=TLSSettings(enabled=False),
                         parameters=ConfigParameters(**changes), **session)


def test_the_table_covers_every_config_value_chosen_here():
    assert set(CONFIG_VALUES) == {f.name for f in PARAMETERS if f.in_config}
    for name, value in CONFIG_VALUES.items():
        assert value != PARAMETER[name].default_in_config, name


def test_session_parameters_has_exactly_the_table_as_fields_with_its_defaults():
    fields = dataclasses.fields(SessionParameters)
    assert [f.name for f in fields] == [p.name for p in PARAMETERS]
    for f in fields:
        p = PARAMETER[f.name]
        assert (f.default is dataclasses.MISSING) == (p.default is REQUIRED), f.name
        if p.default is not REQUIRED:
            assert f.default == p.default, f.name
    for p in PARAMETERS:
        assert f"\n{p.name} : " in SessionParameters.__doc__, p.name


def test_config_parameters_are_the_parameters_rows_of_the_table():
    assert [f.name for f in dataclasses.fields(ConfigParameters)] == \
        [p.name for p in table_fields("parameters")]
    session_keys = [f.name for f in dataclasses.fields(SessionConfig)
                    if f.name in PARAMETER]
    assert session_keys == [p.name for p in table_fields("session")]


def test_every_config_parameter_is_written_read_back_and_reaches_session_parameters(
        tmp_path):
    config = _config(**CONFIG_VALUES)
    path = dump_session_config(config, tmp_path / "session.toml")
    text = path.read_text()
    for p in PARAMETERS:
        if p.in_config:
            table = text.split(f"[{p.table}]\n", 1)[1].split("\n\n", 1)[0]
            assert f"\n{p.name} = " in "\n" + table, p.name
    again = load_session_config(path)
    assert again == config
    params = parameters_from_config(again)
    for name, value in CONFIG_VALUES.items():
        assert getattr(params, name) == value, name
    assert ConfigParameters.of(params) == config.parameters


def test_every_config_parameter_is_in_the_fingerprint():
    base = _config(**CONFIG_VALUES)
    canonical = canonical_session(base)
    for p in PARAMETERS:
        if not p.in_config:
            continue
        section = canonical["session" if p.table == "session" else "parameters"]
        value = CONFIG_VALUES[p.name]
        assert section[p.name] == (list(value) if isinstance(value, tuple) else value)
        # the default value gives another fingerprint (mask_degree = 0 by leaving it out;
        # d = 0 would check l = 2 against d = 1, and the default per-party cap exceeds
        # the total given, and A = None resolves to the 1 given: other values there)
        other = _config(**{**CONFIG_VALUES, **OTHER_VALUES.get(
            p.name, {p.name: p.default_in_config})})
        assert session_fingerprint(other) != session_fingerprint(base), p.name
    assert "mask_degree" not in canonical_session(_config())["parameters"]


def test_every_wire_parameter_round_trips_through_the_proto():
    wire = {p.name for p in PARAMETERS if p.wire_name is not None}
    assert wire <= {f.name for f in pb.Parameters.DESCRIPTOR.fields}
    params = SessionParameters(dim=6, bound=3.0, scale_bits=12, segments=2, noise_segments=2,
                               nonnegative=True, mode="transparent", chunk_bytes=8192,
                               max_rows_per_party=500, max_rows_total=900,
                               integrity="correct", mask_degree=3, adversaries=1,
                               alphas=(11, 12, 13, 14), betas=tuple(range(21, 21 + M)))
    plan = params.plan(M)
    message = params.to_proto(plan)
    back = SessionParameters.from_proto(pb.Parameters.FromString(message.SerializeToString()))
    assert back == params.with_plan(plan)
    for p in PARAMETERS:
        if p.wire_name is not None and p.from_plan is None:
            assert getattr(back, p.name) == getattr(params, p.name), p.name


def test_every_config_parameter_is_an_option_of_session_new_and_certs(tmp_path):
    from omnifc.cli import build_parser
    from omnifc.cli.cmd_session import session_settings

    parser = build_parser()
    flags = []
    for p in PARAMETERS:
        if p.in_config:
            value = CONFIG_VALUES[p.name]
            if isinstance(value, bool):
                flags.append(p.option)
            else:
                flags += [p.option, ",".join(map(str, value)) if isinstance(value, tuple)
                          else str(value)]
    for command in (["certs", "--out", str(tmp_path), "--parties", "a,b"],
                    ["session", "new", "--card", "a", "--coordinator-card", "c",
                     "--address", "h:1", "--out", "o"]):
        settings = session_settings(parser.parse_args(command + flags))
        config = _config(**CONFIG_VALUES)
        assert settings["parameters"] == config.parameters
        for p in table_fields("session"):
            assert settings[p.name] == CONFIG_VALUES[p.name], p.name
    defaults = session_settings(parser.parse_args(["certs", "--out", str(tmp_path),
                                                   "--parties", "a,b"]))
    assert defaults["parameters"] == ConfigParameters()


def test_every_audit_parameter_is_a_field_of_audit_parameters_and_an_audit_option():
    from omnifc.audit import AuditParameters
    from omnifc.cli import build_parser
    from omnifc.cli.cmd_audit import parameters_from_args

    audited = [p for p in PARAMETERS if p.audit]
    names = [f.name for f in dataclasses.fields(AuditParameters)]
    assert names[:len(audited)] == [p.name for p in audited]
    values = {"dim": 6, "bound": 3.0, "scale_bits": 12, "segments": 2, "noise_segments": 2,
              "nonnegative": True, "primes": (2147483647,), "mode": "transparent",
              "integrity": "correct", "adversaries": 1, "alphas": (11, 12, 13, 14),
              "betas": tuple(range(21, 21 + M))}
    assert set(values) == {p.name for p in audited}
    flags = []
    for p in audited:
        value = values[p.name]
        flags += [p.option] if isinstance(value, bool) else \
            [p.option, ",".join(map(str, value)) if isinstance(value, tuple) else str(value)]
    params = parameters_from_args(build_parser().parse_args(["audit", *flags]))
    for name, value in values.items():
        assert getattr(params, name) == value, name
    with pytest.raises(ParameterError, match=r"^mode must be one of \('masked', "):
        AuditParameters(mode="open")


def test_the_audit_reads_every_audited_config_parameter(tmp_path):
    from omnifc.audit._transport import read_session_config

    path = dump_session_config(_config(**CONFIG_VALUES), tmp_path / "session.toml")
    values, _ = read_session_config(path)
    for p in PARAMETERS:
        if p.audit and p.in_config:
            assert values[p.name] == CONFIG_VALUES[p.name], p.name
    assert values["parties"] == M


THROWAWAY_ROW = '''
    Parameter(
        "throwaway", "int", "a throwaway knob", 0, comment="a knob",
        check=lambda v, k: _integer(v, k, 0, 9), table="parameters",
        config_check=lambda v, k: _integer(v, k, 0, 9), audit=True, wire=None),
    Parameter(
        "session_knob", "str", "a throwaway [session] knob", "a", choices=("a", "b"),
        check=lambda v, k: _choice(v, k, ("a", "b"), listed=False), table="session",
        config_check=lambda v, k: _choice(v, k, ("a", "b"), listed=True), wire=None),
'''

THROWAWAY_RUN = '''
import importlib.abc, importlib.util, sys, tempfile
from pathlib import Path

source = Path(sys.argv[1]).read_text()
marker = "\\n)\\n\\n#: The table by name."
assert source.count(marker) == 1
patched = Path(tempfile.mkdtemp()) / "_parameters.py"
patched.write_text(source.replace(marker, "\\n" + sys.argv[2].strip("\\n") + marker))


class Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "protocols._parameters":
            return importlib.util.spec_from_file_location(name, patched)


sys.meta_path.insert(0, Finder())

import dataclasses
from finite_field import ParameterError
from protocols import (ConfigParameters, PartyEntry, SessionConfig, SessionParameters,
                       TLSSettings, dump_session_config, load_session_config,
                       parameters_from_config, session_fingerprint)
from protocols._config import canonical_session
import protocols._parameters as table
assert table.__file__ == str(patched)

# SessionParameters and its checks
assert SessionParameters(dim=2, bound=1.0).throwaway == 0
assert SessionParameters(dim=2, bound=1.0, throwaway=4).throwaway == 4
try:
    SessionParameters(dim=2, bound=1.0, throwaway=10)
    raise SystemExit("no refusal")
except ParameterError as error:
    assert str(error) == "throwaway must be <= 9, got 10", error
# the config: written, read back, fingerprinted, and into SessionParameters
parties = tuple(PartyEntry(f"p{i}", bytes([i + 1]) * 32) for i in range(3))
config = SessionConfig("ab" * 16, "127.0.0.1:1", parties, tls=TLSSettings(enabled=False),
                       parameters=ConfigParameters(throwaway=3))
path = dump_session_config(config, Path(tempfile.mkdtemp()) / "s.toml")
assert "\\nthrowaway = 3 " in path.read_text(), path.read_text()
assert load_session_config(path) == config
assert load_session_config(path).parameters.throwaway == 3
assert canonical_session(config)["parameters"]["throwaway"] == 3
assert session_fingerprint(config) != session_fingerprint(
    config.with_(parameters=ConfigParameters()))
assert parameters_from_config(config).throwaway == 3
assert ConfigParameters.of(parameters_from_config(config)) == config.parameters
try:
    ConfigParameters(throwaway=10)
    raise SystemExit("no refusal")
except ParameterError as error:
    assert str(error) == "[parameters] throwaway must be <= 9, got 10", error
# not declared for the wire (wire=None): left off the proto, which still round-trips
params = SessionParameters(dim=2, bound=1.0, throwaway=4)
plan = params.plan(3)
assert SessionParameters.from_proto(params.to_proto(plan)).throwaway == 0
# the CLI and the audit
from omnifc.cli import build_parser
from omnifc.cli.cmd_session import session_settings
from omnifc.cli.cmd_audit import parameters_from_args
from omnifc.audit import AuditParameters
from omnifc.audit._transport import read_session_config
parser = build_parser()
args = parser.parse_args(["certs", "--out", "x", "--parties", "a,b", "--throwaway", "5"])
assert session_settings(args)["parameters"].throwaway == 5
assert parameters_from_args(parser.parse_args(["audit", "--throwaway", "6"])).throwaway == 6
assert AuditParameters(throwaway=7).throwaway == 7
assert read_session_config(path)[0]["throwaway"] == 3
# a [session] row: SessionConfig's field, the file, the fingerprint, the ceremony, the CLI
assert SessionParameters(dim=2, bound=1.0, session_knob="b").session_knob == "b"
knob = config.with_(session_knob="b")
text = dump_session_config(knob, Path(tempfile.mkdtemp()) / "k.toml").read_text()
assert "\\nsession_knob = \\"b\\"" in text.split("[parameters]")[0], text
assert canonical_session(knob)["session"]["session_knob"] == "b"
assert session_fingerprint(knob) != session_fingerprint(config)
assert parameters_from_config(knob).session_knob == "b"
try:
    config.with_(session_knob="c")
    raise SystemExit("no refusal")
except ParameterError as error:
    assert str(error) == "[session] session_knob must be one of ['a', 'b'], got 'c'", error
from protocols import generate_certificates
certs = generate_certificates(tempfile.mkdtemp(), ["a", "b", "c"], session_knob="b")
assert load_session_config(certs.config).session_knob == "b"
args = parser.parse_args(["certs", "--out", "x", "--parties", "a,b", "--session-knob", "b"])
assert session_settings(args)["session_knob"] == "b"
print("reached everything")
'''


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_row_added_to_the_table_reaches_config_fingerprint_cli_and_audit():
    done = subprocess.run([sys.executable, "-c", THROWAWAY_RUN,
                           str(ROOT / "protocols" / "_parameters.py"),
                           THROWAWAY_ROW],
                          cwd=ROOT, capture_output=True, text=True, timeout=280)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "reached everything"
