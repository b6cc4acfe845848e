"""protocols._csv: a bad CSV cell by the 1-based line and column a user sees in the file."""

from __future__ import annotations

import numpy as np
import pytest

from finite_field import InputError
from protocols._csv import csv_problem
from protocols._party_data import load_party_data


@pytest.mark.parametrize("text, expected", [
    ("a,b\n1,2\n", "line 1, column 1: 'a' is not a number (the file must have no header "
                   "line)"),
    ("1,2\n3,x\n", "line 2, column 2: 'x' is not a number"),
    ("# note\n1,2\n\n3,inf\n", "line 4, column 2: 'inf' is not a finite number (every entry "
                               "must be a real number)"),
    ("1,2\n3,4,5\n", "line 2 has 3 values, line 1 has 2: every row needs the same number "
                     "of columns"),
    ("1,2\n3,4\n", None),
])
def test_the_first_problem_by_line_and_column(tmp_path, text, expected):
    path = tmp_path / "rows.csv"
    path.write_text(text)
    assert csv_problem(path) == expected


@pytest.mark.parametrize("text, says", [
    ("a,b\n1,2\n", "line 1, column 1"),
    ("1,2\n3,nan\n", "line 2, column 2: 'nan'"),
    ("1,2\n3,4,5\n", "line 2 has 3 values"),
])
def test_loading_refuses_with_the_users_coordinates(tmp_path, text, says):
    path = tmp_path / "rows.csv"
    path.write_text(text)
    with pytest.raises(InputError) as info:
        load_party_data(path)
    assert says in str(info.value) and "usecols" not in str(info.value)
    assert "row 0" not in str(info.value)


def test_a_good_csv_loads_as_before(tmp_path):
    path = tmp_path / "rows.csv"
    path.write_text("# comment\n1,2\n\n3,4.5\n")
    assert load_party_data(path).tolist() == [[1.0, 2.0], [3.0, 4.5]]
