"""Attribution: who can have caused the located errors, and who is certainly at fault.

A located error is a triple (a, b, e): entry (a, b) of the distance matrix (global rows)
was wrong in the evaluation of evaluator e. Two faults produce errors:

* evaluator e computed wrongly: errors at evaluator e, in any entries;
* owner o sent evaluator e a share off its polynomial (for some of o's rows): errors at
  e, confined to entries whose row or column belongs to o.

A set X of parties *explains* the errors when every error (a, b, e) has e in X,
owner(a) in X or owner(b) in X. Assuming at most A parties deviate (the plan's
adversaries), the truth is one of the explanations of size <= A, so

* a party in *every* explanation of size <= A is certainly at fault: it is *named*;
* the inclusion-minimal explanations of size <= A are the *suspects*; a party that is in
  some but not all of them is never named alone.

This gives the cases of the design: errors at one evaluator across the rows of several
owners name that evaluator; errors at several evaluators confined to one owner's rows name
that owner (with A = 1); errors at one evaluator confined to one owner's rows leave the
pair (owner, evaluator) as suspects, because a sender can make one honest recipient look
wrong on the sender's rows, and the two cannot be told apart (unless they are the same
party). With a larger A fewer parties can be named: two colluding evaluators can forge
exactly the pattern of a bad sender.

Examples
--------
>>> owner = ["a", "a", "b", "b", "c", "c"]                  # rows 0-1: a, 2-3: b, 4-5: c
>>> attribute([(0, 2, "e"), (2, 4, "e"), (0, 5, "e")], owner).named
('e',)
>>> attribute([(0, 2, "e"), (1, 4, "e")], owner).suspects   # only a's rows, one evaluator
(('a',), ('e',))
>>> attribute([(0, 2, "d"), (1, 4, "e")], owner).named       # a's rows, two evaluators
('a',)
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass


from ._errors import ParameterError

__all__ = ["Attribution", "attribute", "located_errors"]


@dataclass(frozen=True)
class Attribution:
    """The verdict on a set of located errors (see the module docstring).

    Attributes
    ----------
    named : tuple
        Parties certainly at fault (in every explanation of size <= adversaries).
    suspects : tuple of tuple
        The inclusion-minimal explanations of size <= adversaries, smallest first.
    explained : bool
        False when no explanation has at most ``adversaries`` parties (more deviate).
    roles : dict
        For each named party, "evaluator" (errors at its own evaluations outside its own
        rows), "sender" (errors at other evaluators on its rows) or "evaluator and sender".
    """

    named: tuple
    suspects: tuple
    explained: bool
    roles: dict

    @property
    def clean(self) -> bool:
        return not self.suspects and self.explained

    def describe(self) -> str:
        if not self.explained:
            return "more parties deviate than the tolerated number of adversaries"
        if self.named:
            return "; ".join(f"party {party!r} deviated ({self.roles[party]})"
                             for party in self.named)
        if self.suspects:
            return "cannot be attributed to one party; one of " + " or ".join(
                "{" + ", ".join(repr(x) for x in s) + "}" for s in self.suspects)
        return "no errors"


def _key(party):
    return (str(type(party)), party)


def attribute(errors, row_owner, *, adversaries: int = 1, known=()) -> Attribution:
    """Name who deviated, or the suspects, from located errors.

    Parameters
    ----------
    errors : iterable of (row, col, evaluator)
        Global row and column of the wrong entry and the party whose evaluation was wrong.
    row_owner : sequence
        ``row_owner[row]`` is the party that owns (and encoded) that global row.
    adversaries : int
        A, the most parties assumed to deviate together (>= 0).
    known : iterable, optional
        Parties already known to have deviated (named in an earlier round). They count
        against A and explain every error they can: the verdict is over the explanations
        that contain them, and it names only parties beyond them.

    Examples
    --------
    >>> owner = ["a", "b", "c", "d"]
    >>> attribute([(0, 1, "c"), (0, 2, "b")], owner, adversaries=2, known=["a"]).clean
    True
    >>> attribute([(0, 1, "d"), (1, 1, "d"), (2, 2, "d")], owner, adversaries=2,
    ...           known=["a"]).named
    ('d',)
    """
    adversaries = int(adversaries)
    known = set(known)
    if adversaries < 0:
        raise ParameterError(f"adversaries must be >= 0, got {adversaries}")
    budget = adversaries - len(known)
    if budget < 0:
        raise ParameterError(f"{len(known)} parties are known to have deviated, more than "
                             f"the bound A = {adversaries}")
    triples = set()
    for a, b, e in errors:
        a, b = int(a), int(b)
        if not (0 <= a < len(row_owner) and 0 <= b < len(row_owner)):
            raise ParameterError(
                f"rows must be in [0, {len(row_owner)}), got entry ({a}, {b})")
        owners_and_evaluator = (row_owner[a], row_owner[b], e)
        if not known.intersection(owners_and_evaluator):
            triples.add(owners_and_evaluator)
    if not triples:
        return Attribution(named=(), suspects=(), explained=True, roles={})
    candidates = sorted({x for t in triples for x in t}, key=_key)
    minimal = []
    for size in range(1, min(budget, len(candidates)) + 1):
        for subset in itertools.combinations(candidates, size):
            chosen = set(subset)
            if any(set(m) <= chosen for m in minimal):
                continue
            if all(o1 in chosen or o2 in chosen or e in chosen for o1, o2, e in triples):
                minimal.append(subset)
    if not minimal:
        return Attribution(named=(), suspects=(), explained=False, roles={})
    named = set(minimal[0]).intersection(*map(set, minimal[1:]))
    roles = {}
    for party in named:
        as_evaluator = any(e == party and party not in (o1, o2) for o1, o2, e in triples)
        as_sender = any(party in (o1, o2) and e != party for o1, o2, e in triples)
        roles[party] = ("evaluator and sender" if as_evaluator and as_sender
                        else "evaluator" if as_evaluator
                        else "sender" if as_sender else "evaluator")
    return Attribution(named=tuple(sorted(named, key=_key)),
                       suspects=tuple(sorted(minimal, key=lambda s: (len(s), [_key(x) for x in s]))),
                       explained=True, roles=roles)


def located_errors(decoding, *, row_offset: int = 0, col_offset: int = 0,
                   evaluators=None) -> list[tuple[int, int, object]]:
    """(row, col, evaluator) triples from a :class:`Decoding` of a 2-D tile.

    Parameters
    ----------
    decoding : Decoding
        Of a tile of shape (rows, cols) whose first entry is global (row_offset, col_offset).
    evaluators : sequence, optional
        Party ids in the order of the responding set B (default: the indices into B).
    """
    if len(decoding.shape) != 2:
        raise ParameterError(f"a 2-d tile is needed, got entries of shape {decoding.shape}")
    cols = decoding.shape[1]
    out = []
    for flat, j in decoding.located():
        row, col = divmod(int(flat), cols)
        party = j if evaluators is None else evaluators[j]
        out.append((row_offset + row, col_offset + col, party))
    return out
