"""The checked-in generated protobuf/gRPC code is what ``python -m protocols._codegen`` makes.

Byte-for-byte freshness needs the pinned grpcio-tools (``_codegen.GRPCIO_TOOLS_VERSION``,
setup.cfg's ``codegen`` extra; the low-protobuf venv of ``.ci/protobuf_matrix.sh`` has it);
with any other grpcio-tools the wire descriptor embedded in the stubs is compared instead.
"""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest

from protocols import _codegen

#: run by .ci/run on the lowest and the highest protobuf too (.ci/protobuf_matrix.sh)
pytestmark = [pytest.mark.protobuf, pytest.mark.protobuf_matrix]

ROOT = pathlib.Path(__file__).resolve().parents[2]
PINNED = _codegen.tools_version() == _codegen.GRPCIO_TOOLS_VERSION


@pytest.mark.skipif(not PINNED, reason=(
    f"byte-exact freshness needs grpcio-tools=={_codegen.GRPCIO_TOOLS_VERSION} (installed: "
    f"{_codegen.tools_version()}); .ci/protobuf_matrix.sh runs it in its low-protobuf venv, "
    "and test_wire_descriptor_is_fresh checks the descriptor here"))
def test_generated_code_is_fresh():
    stale = _codegen.stale_files()
    assert stale == [], (f"protocols/_generated is stale ({stale}); run "
                         "`python -m protocols._codegen`")


def test_wire_descriptor_is_fresh():
    assert not _codegen.stale_descriptor(), (
        "protocols/_generated/omnifc_pb2.py does not encode proto/omnifc/v1/omnifc.proto; "
        "run `python -m protocols._codegen`")


def test_freshness_check_can_fail(monkeypatch):
    checked_in = {path.name: path.read_text() for path in _codegen.OUT_DIR.glob("*.py")}
    changed = dict(checked_in)
    changed["omnifc_pb2.py"] += "# edited\n"
    monkeypatch.setattr(_codegen, "generate", lambda: changed)
    assert _codegen.stale_files() == ["omnifc_pb2.py"]


def test_descriptor_check_can_fail(monkeypatch):
    fresh = _codegen.generate()
    source = fresh["omnifc_pb2.py"]
    # the .proto gained a message: its serialized descriptor changes
    changed = dict(fresh, **{"omnifc_pb2.py": source.replace(
        "omnifc.proto\\x12\\tomnifc.v1", "omnifc.proto\\x12\\tomnifc.v2", 1)})
    assert changed["omnifc_pb2.py"] != source
    monkeypatch.setattr(_codegen, "generate", lambda: changed)
    assert _codegen.stale_descriptor()


def test_stubs_come_from_the_pinned_grpcio_tools():
    """The checked-in stubs load on the oldest supported protobuf (gencode 5.29)."""
    pb2 = (_codegen.OUT_DIR / "omnifc_pb2.py").read_text()
    grpc_stub = (_codegen.OUT_DIR / "omnifc_pb2_grpc.py").read_text()
    assert "# Protobuf Python Version: 5.29.0" in pb2
    assert f"GRPC_GENERATED_VERSION = '{_codegen.GRPCIO_TOOLS_VERSION}'" in grpc_stub


@pytest.mark.timeout(120)
def test_codegen_check_runs_without_the_protocols_package():
    """``--check`` works even when the package (and the stubs it imports) cannot load."""
    code = ("import sys, runpy; sys.modules['protocols'] = None; "
            "sys.argv = ['_codegen.py', '--check']; "
            "runpy.run_path('protocols/_codegen.py', run_name='__main__')")
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, timeout=100)
    assert run.returncode == 0, run.stderr
    assert "up to date" in run.stdout


@pytest.mark.timeout(120)
def test_codegen_runs_as_a_file_path_as_its_docstring_says():
    """``python protocols/_codegen.py --check``: Python puts protocols/ first on sys.path,
    where protocols/_csv.py would shadow the standard library's ``_csv`` (imported by
    importlib.metadata) unless the script takes its own folder off the path."""
    run = subprocess.run([sys.executable, "protocols/_codegen.py", "--check"], cwd=ROOT,
                         capture_output=True, text=True, timeout=100)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "up to date" in run.stdout


def test_generated_package_imports_as_a_subpackage():
    from protocols._generated import omnifc_pb2, omnifc_pb2_grpc

    assert omnifc_pb2.DESCRIPTOR.package == "omnifc.v1"
    assert hasattr(omnifc_pb2_grpc, "CoordinatorStub")
    envelope = omnifc_pb2.Envelope(hello=omnifc_pb2.Hello(party_id="a"))
    assert omnifc_pb2.Envelope.FromString(envelope.SerializeToString()).hello.party_id == "a"


@pytest.mark.parametrize("field", ["hello", "roster", "share", "ready", "round_start", "tile",
                                   "result", "error"])
def test_every_message_kind_is_in_the_envelope(field):
    from protocols._generated import omnifc_pb2

    assert field in omnifc_pb2.Envelope.DESCRIPTOR.fields_by_name
