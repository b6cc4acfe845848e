"""One spelling of --deadline in every command (issue 13, item 7): SECONDS for every phase or
PHASE=SECONDS for one, repeatable; demo, certs and session new agree."""

import pytest

from omnifc.cli import build_parser
from omnifc.cli.cmd_session import parse_deadlines
from protocols import Deadlines, ParameterError


def test_seconds_set_every_phase_and_phase_values_override():
    assert parse_deadlines(["45"]) == Deadlines(join=45, shares=45, evaluation=45, result=45)
    assert parse_deadlines(["45", "join=300"]) == Deadlines(join=300, shares=45,
                                                            evaluation=45, result=45)
    assert parse_deadlines(["evaluation=900"]) == Deadlines(evaluation=900)


@pytest.mark.parametrize("bad", ["soon", "lunch=5", "join=", "join=-1"])
def test_bad_deadlines_are_refused(bad):
    with pytest.raises(ParameterError, match="deadline"):
        parse_deadlines([bad])


@pytest.mark.parametrize("command", [["demo"], ["certs", "--out", "x", "--parties", "a,b,c"]])
@pytest.mark.parametrize("values", [["30"], ["join=300", "evaluation=40"]])
def test_demo_and_certs_accept_the_same_spellings(command, values):
    argv = list(command)
    for value in values:
        argv += ["--deadline", value]
    args = build_parser().parse_args(argv)
    assert args.deadline == values
    assert parse_deadlines(args.deadline)  # and they mean the same thing
