"""``benchmarks/_common.py``'s command-line lists, the one parser of every script's
``--seeds`` (and ``--clients``, ``--rows``, ``--classes``)."""

from __future__ import annotations

import itertools

import pytest

from benchmark_scripts import load_benchmark

common = load_benchmark("_common")


def test_int_list_is_the_concatenation_of_its_inclusive_ranges():
    pieces = [(lo, hi) for lo in range(0, 5) for hi in range(lo, 6)]
    for a, b in itertools.product(pieces, repeat=2):
        text = ",".join(f"{lo}-{hi}" if lo != hi else f"{lo}" for lo, hi in (a, b))
        want = list(range(a[0], a[1] + 1)) + list(range(b[0], b[1] + 1))
        assert common.int_list(text) == want, text
    assert common.int_list(" 3317 - 3319 , 20") == [3317, 3318, 3319, 20]
    assert common.int_list(500) == [500]


@pytest.mark.parametrize("text, says", [
    ("9-3", "lo <= hi"), ("3-", "an integer or a range"), ("", "an integer or a range"),
    ("1,,2", "an integer or a range"), ("a-b", "an integer or a range"),
    ("1.5", "an integer or a range"), ("1-2-3", "an integer or a range")])
def test_int_list_refuses_what_is_not_a_list_of_ranges(text, says):
    with pytest.raises(ValueError, match=says):
        common.int_list(text)


def test_int_list_names_the_part_it_refuses_and_shows_the_form():
    with pytest.raises(ValueError) as refused:
        common.int_list("3317-3328,x")
    assert str(refused.value) == ("'x': expected an integer or a range lo-hi "
                                  "(e.g. 3317-3328)")


@pytest.mark.parametrize("script, args", [
    ("bench_k_selection", ["--seeds", "9-3"]),
    ("flux_label_free_bound", ["--seeds", "9-3"]),
    ("flux_direction_free_bound", ["--told-covariance", "--seeds", "9-3", "--out", "{out}"]),
    ("flux_noise_level", ["--runs", "--seeds", "9-3", "--out", "{out}"]),
    ("flux_spiked_null", ["--runs", "--seeds", "9-3", "--out", "{out}"]),
    ("clove_label_reference", ["--seeds", "9-3", "--out", "{out}"]),
    ("_clove_transform", ["--seeds", "9-3", "--out", "{out}"]),
    ("_clove_probes", ["--seeds", "9-3", "--shift", "label", "--out", "{out}"]),
    ("_flux_assign", ["--seeds", "9-3"]),
    ("flux_k_grid", ["--seeds", "9-3"]),
    ("_flux_many_groups", ["--seeds", "9-3"]),
    ("_flux_split_half", ["--seeds", "9-3"]),
])
def test_every_script_reads_its_seeds_through_int_list(script, args, tmp_path):
    module = load_benchmark(script)
    argv = [a.replace("{out}", str(tmp_path / "out.jsonl")) for a in args]
    with pytest.raises(ValueError, match="'9-3': a range is written lo-hi"):
        module.main(argv)
