"""Start-up: the packages load their names lazily (PEP 562), and the public API still works.

Each check runs in a fresh interpreter (``sys.modules`` of this test process holds
whatever other tests imported). What ``import omnifc`` and ``omnifc --help`` may not load:
scikit-learn, scipy, numba, galois, gRPC, cryptography -- each is loaded by the first
name or command that needs it. galois is the test oracle only: no production path loads it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: Heavy modules nothing needs to import the package or to print the CLI's help.
HEAVY = ["sklearn", "scipy", "numba", "galois", "grpc", "cryptography", "google.protobuf",
         "matplotlib"]


def loaded_at(steps: list[str], watch=HEAVY) -> list[list[str]]:
    """Which of ``watch`` (top-level names) are in sys.modules after each of ``steps``, run
    in this order in one fresh interpreter (a later step sees what the earlier ones did, as
    in a process that ran them all)."""
    report = ("import sys as _sys, json as _json\n"
              f"print('LOADED', _json.dumps(sorted({{w for w in {watch!r} for m in _sys.modules "
              f"if m == w or m.startswith(w + '.')}})))")
    script = "\n".join(f"{step}\n{report}" for step in steps)
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    found = [json.loads(line.removeprefix("LOADED ")) for line in done.stdout.splitlines()
             if line.startswith("LOADED ")]
    assert len(found) == len(steps), done.stdout[-2000:]
    return found


def loaded_after(code: str, watch=HEAVY) -> list[str]:
    """Which of ``watch`` (top-level names) are in sys.modules after running ``code``."""
    return loaded_at([code], watch)[-1]


@pytest.mark.timeout(180)
@pytest.mark.parametrize("package", ["omnifc", "protocols", "finite_field"])
def test_importing_a_package_loads_none_of_the_heavy_modules(package):
    allowed = {"finite_field": [], "protocols": [], "omnifc": []}[package]
    assert sorted(set(loaded_after(f"import {package}")) - set(allowed)) == []


@pytest.mark.timeout(180)
def test_the_check_sees_a_heavy_import():
    # The checks above can fail: touching a name that needs scikit-learn loads it.
    assert "sklearn" in loaded_after("import omnifc; omnifc.KFed")
    # a kernel loads numba when it first runs (finite_field._jit), not when it is named
    named, ran = loaded_at(["import finite_field; finite_field.sq_distances",
                            "finite_field.sq_distances([[1]], 7)"])
    assert "numba" not in named
    assert "numba" in ran


@pytest.mark.timeout(300)
@pytest.mark.parametrize("package", ["omnifc", "protocols", "finite_field"])
def test_every_public_name_resolves_and_star_import_works(package):
    code = (f"import importlib, {package} as pkg\n"
            "missing = [n for n in pkg.__all__ if not hasattr(pkg, n)]\n"
            "assert not missing, missing\n"
            "assert set(pkg.__all__) <= set(dir(pkg))\n"
            "namespace = {}\n"
            f"exec('from {package} import *', namespace)\n"
            "assert set(pkg.__all__) <= set(namespace), set(pkg.__all__) - set(namespace)\n"
            # a name resolves to the object its home module defines, cached after first use
            "for n in pkg.__all__:\n"
            "    assert getattr(pkg, n) is vars(pkg)[n]\n"
            "print('ok')")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=240)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-3000:]


def test_public_names_are_the_objects_of_their_home_modules():
    import omnifc
    import protocols
    from omnifc import _secure, adapters, audit
    from protocols import _party

    assert omnifc.secure_distance_matrix is _secure.secure_distance_matrix
    assert omnifc.audit is audit and omnifc.adapters is adapters
    assert protocols.Party is _party.Party
    assert omnifc.ParameterError is protocols.ParameterError


def test_an_unknown_name_raises_attribute_error_naming_it():
    import omnifc
    import protocols
    with pytest.raises(AttributeError, match="module 'omnifc' has no attribute 'no_such'"):
        omnifc.no_such  # noqa: B018
    with pytest.raises(AttributeError, match="'protocols' has no attribute 'Partyy'"):
        protocols.Partyy  # noqa: B018
    assert not hasattr(omnifc, "_secret_helper")


@pytest.mark.timeout(180)
@pytest.mark.parametrize("argv", [["--help"], ["--version"], ["demo", "--help"],
                                  ["audit", "--help"], ["simulate", "--help"],
                                  ["reproduce", "--help"], ["serve", "--help"]])
def test_cli_help_loads_none_of_the_heavy_modules(argv):
    code = ("import sys\nfrom omnifc.cli import main\n"
            f"sys.argv = ['omnifc', *{argv!r}]\n"
            "try:\n    main()\nexcept SystemExit as exit:\n    assert exit.code == 0\n")
    # The parameter table needs numpy, and the config schema the protocol version (which
    # lives with the AEAD primitives, ~10 ms); nothing else heavy, no X.509 parsing.
    watch = [w for w in HEAVY if w != "cryptography"] + ["cryptography.x509"]
    assert loaded_after(code, watch) == []


@pytest.mark.timeout(180)
def test_a_party_process_imports_neither_the_oracle_nor_the_layers_above():
    # galois is the test oracle; scikit-learn and scipy.stats belong to omnifc's clustering
    # and audit: a party process (python -m protocols._grpc_party) loads none of them.
    watch = ["galois", "sklearn", "scipy.stats", "omnifc"]
    party, audit = loaded_at(["import protocols._grpc_party", "import omnifc.audit._run"],
                             watch)
    assert party == []
    assert audit == ["galois", "omnifc", "scipy.stats"]
