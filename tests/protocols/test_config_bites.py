"""protocols._config: the typed field checks and name/address rules, boundary by boundary.

Mutation testing (issue 14) of the validation functions of _config.py: each rule is
checked at and just past its documented limits, with the exact message (what was
expected, what was seen), against hand-written cases.
"""

from __future__ import annotations

import math
import os
import re
from pathlib import Path

import pytest

from finite_field import ParameterError
from protocols import _config
from protocols._config import new_session_id, split_address, validate_party_name

pytestmark = pytest.mark.timeout(60)


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
