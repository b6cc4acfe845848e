"""The checked-in generated protobuf/gRPC code is what ``python -m protocols._codegen`` makes."""

from __future__ import annotations

import pytest

from protocols import _codegen


def test_generated_code_is_fresh():
    stale = _codegen.stale_files()
    assert stale == [], (f"protocols/_generated is stale ({stale}); run "
                         "`python -m protocols._codegen`")


def test_freshness_check_can_fail(monkeypatch):
    fresh = _codegen.generate()
    changed = dict(fresh)
    changed["omnifc_pb2.py"] += "# edited\n"
    monkeypatch.setattr(_codegen, "generate", lambda: changed)
    assert _codegen.stale_files() == ["omnifc_pb2.py"]


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
