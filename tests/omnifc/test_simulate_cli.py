"""``omnifc simulate``: runs in process through omnifc.cli.main and reports an exact result."""

from __future__ import annotations

import re

import numpy as np
import pytest

import omnifc.cli.cmd_simulate as cmd_simulate
from omnifc import Dataset, load_dataset
from omnifc.cli import main

EXACT_YES = re.compile(r"^exact\s+yes: integer distances equal the plaintext quantized "
                       r"squared distances bit for bit$", re.MULTILINE)
MAX_ERROR = re.compile(r"^max error\s+(\S+) against float distances \(bound (\S+)\)$",
                       re.MULTILINE)


def check_report(out: str) -> None:
    assert EXACT_YES.search(out), out
    observed, bound = (float(v) for v in MAX_ERROR.search(out).groups())
    assert 0 <= observed <= bound
    assert re.search(r"^timings\s+.*shares .*s/.*MB", out, re.MULTILINE)


def test_iris_default(capsys):
    assert main(["simulate"]) == 0
    out = capsys.readouterr().out
    check_report(out)
    assert "iris: 150 rows x 4 features across 3 parties (50, 50, 50 rows)" in out
    assert re.search(r"^parameters\s+l=1 t=1 q=16 R=8\.0 primes=\[", out, re.MULTILINE)


@pytest.fixture
def small_digits(monkeypatch):
    """The digits data set cut to its first 400 rows.

    The full set (1797 rows) takes ~10 s and ~2 GB here, because the report's float
    reference builds an n x n x d array; the configuration under test is the same.
    """
    def load(name):
        data = load_dataset(name)
        return Dataset(data.name, data.features[:400], data.labels[:400], data.bound,
                       data.nonnegative)

    monkeypatch.setattr(cmd_simulate, "load_dataset", load)


@pytest.mark.slow
def test_digits_with_two_segments(capsys, small_digits):
    argv = ["simulate", "--dataset", "digits", "--segments", "2", "--noise-segments", "1",
            "--parties", "5"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    check_report(out)
    assert "digits: 400 rows x 64 features across 5 parties (80, 80, 80, 80, 80 rows)" in out
    assert re.search(r"^parameters\s+l=2 t=1 q=16 R=16\.0 primes=\[\d+, \d+\]", out,
                     re.MULTILINE)


def test_reports_a_mismatch_and_fails(capsys, monkeypatch):
    # The exactness check can fail: corrupt one reconstructed distance.
    # simulate imports it when it runs (start-up stays light): patch its home module.
    import omnifc._secure
    real = omnifc._secure.secure_distance_matrix

    def corrupted(*args, **kwargs):
        result = real(*args, **kwargs)
        result.integer_distances = result.integer_distances.copy()
        result.integer_distances[0, 1] += 1
        return result

    monkeypatch.setattr(omnifc._secure, "secure_distance_matrix", corrupted)
    assert main(["simulate"]) == 1
    out = capsys.readouterr().out
    assert re.search(r"^exact\s+NO", out, re.MULTILINE)
    assert not EXACT_YES.search(out)


def test_invalid_parameters_exit_1_with_a_message(capsys):
    assert main(["simulate", "--segments", "2"]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.strip() == ("omnifc simulate: error: at least 2l+2t-1 = 5 parties are "
                                    "needed for segments=2, noise_segments=1; got 3")


def test_no_command_prints_help(capsys):
    assert main([]) == 2
    assert "simulate" in capsys.readouterr().out


def test_plaintext_reference_is_independent(oracle):
    # The CLI's reference (plaintext quantized distances) agrees with the exact oracle.
    data = load_dataset("iris")
    x = data.features[:20]
    result = type("R", (), {"parameters": {"scale_bits": 16, "bound": 8.0,
                                           "nonnegative": True}})()
    got = cmd_simulate.plaintext_integer_distances(result, x)
    assert got.tolist() == oracle.sq_distances(oracle.quantize(x, 16, 8.0, nonnegative=True))
    assert np.array_equal(got, got.T)
