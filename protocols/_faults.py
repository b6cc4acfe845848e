"""Coalitions of deviating parties, for tests and the audit: the strongest the bound allows.

Test hook only (the party processes' ``--fault coalition:PATTERN:MEMBERS`` and the
in-memory ``faults=``): every member of the coalition runs the real party and rewrites
what it sends, knowing the whole public structure (the code's points, the round's B, the
row offsets) and its fellow members. With X the members and B the responding set, K =
2l+2t-1 and s = |B| - K checks:

``random``      each member corrupts its own pseudo-random third of the entries;
``codeword``    every member adds delta * P(beta_j) to every entry, where P has degree
                <= K - 1 and vanishes at all honest points of B but the first s + 1 - |X|:
                the members' errors plus -P at those spared honest points form a codeword,
                so the syndromes look like errors at the spared honest parties only. This
                is the error that defeats a decoder whose radius reaches s + 1 - |X|;
``framing``     the members corrupt disjoint entries of the first honest party's rows, as
                a bad sender would (attribution with A < |X| names that honest party);
``mixed``       the first member alone corrupts the entries with an even row + column
                (locatable), all members the odd ones codeword-shaped (not locatable);
``bad-share``   each member sends the first honest party a share off its polynomial;
``bad-shares``  each member sends every honest party a share off its polynomial, shifted
                differently per recipient (one shift for all would just change the
                sender's own input consistently, which no protocol can detect).

Entry values are a fixed nonzero function of (row, column, prime), the same for every
member, so the members' contributions line up without communicating; the codeword is
scaled so that a decoder fooled by it moves D by 1..3 per entry, inside every range check.

Examples
--------
>>> coalition = Coalition.parse("coalition:codeword:party-1,party-3")
>>> coalition.pattern, coalition.members
('codeword', ('party-1', 'party-3'))
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from finite_field import ParameterError

__all__ = ["Coalition", "COALITION_PATTERNS"]

COALITION_PATTERNS = ("random", "codeword", "framing", "mixed", "bad-share", "bad-shares")


def _delta(rows, cols, k, p, salt=0):
    """A nonzero value per entry that every member of a coalition computes alike."""
    return 1 + (rows * 7919 + cols * 104729 + k * 13 + salt * 65537) % (p - 1)


@dataclass(frozen=True)
class Coalition:
    """Parties deviating together with one of :data:`COALITION_PATTERNS`."""

    pattern: str
    members: tuple

    def __post_init__(self) -> None:
        if self.pattern not in COALITION_PATTERNS:
            raise ParameterError(f"coalition pattern must be one of {COALITION_PATTERNS}, "
                                 f"got {self.pattern!r}")
        if not self.members or len(set(self.members)) != len(self.members):
            raise ParameterError(f"a coalition needs distinct members, got {self.members}")

    @classmethod
    def parse(cls, fault: str) -> "Coalition":
        """From ``coalition:PATTERN:NAME,NAME,...``."""
        _, pattern, members = fault.split(":", 2)
        return cls(pattern, tuple(members.split(",")))

    def spec(self) -> str:
        return f"coalition:{self.pattern}:{','.join(self.members)}"

    def honest(self, order) -> list:
        return [x for x in order if x not in self.members]

    def rewrite(self, party, env, corrupt):
        """What member ``party`` sends instead of ``env`` (``corrupt`` is the share fault)."""
        if party.party_id not in self.members:
            return env
        if self.pattern in ("bad-share", "bad-shares"):
            if not env.HasField("share"):
                return env
            targets = self.honest(party.names)
            for i, receiver in enumerate(targets[:1] if self.pattern == "bad-share"
                                         else targets):
                shift = 1 + (i ** 5 * 7919 + i ** 3 * 104729 + i) % 1000003
                env = corrupt(party, env, f"bad-share:{receiver}:{shift}")
            return env
        if env.HasField("tile"):
            self._tile(party, env.tile)
        return env

    def _tile(self, party, tile) -> None:
        k, a, b = tile.prime_index, tile.row_start, tile.row_stop
        p = party.plan.primes[k]
        n = party.n_total
        values = np.frombuffer(tile.values, dtype="<u4").astype(np.int64).reshape(b - a, n - a)
        rows, cols = np.meshgrid(np.arange(a, b), np.arange(a, n), indexing="ij")
        upper = cols > rows
        error = np.zeros_like(values)
        me = self.members.index(party.party_id)
        if self.pattern == "random":
            chosen = upper & ((rows * 31 + cols * 17 + 5 * me) % 3 == 0)
            error[chosen] = _delta(rows, cols, k, p, salt=me + 1)[chosen]
        elif self.pattern == "framing":
            victim = self.honest(party.names)[0]
            start = sum(party.rows_of[x] for x in party.names[:party.names.index(victim)])
            stop = start + party.rows_of[victim]
            theirs = ((rows >= start) & (rows < stop)) | ((cols >= start) & (cols < stop))
            chosen = upper & theirs & ((rows + cols) % len(self.members) == me)
            error[chosen] = _delta(rows, cols, k, p)[chosen]
        else:  # "codeword" on every entry, "mixed" on the odd ones
            scale = self._codeword_value(party, k, p)
            chosen = upper if self.pattern == "codeword" else upper & ((rows + cols) % 2 == 1)
            # a small shift of D per entry, so that a forged D stays within the no-wrap bound
            error[chosen] = (1 + (rows + cols) % 3)[chosen] * scale % p
            if self.pattern == "mixed" and me == 0:
                alone = upper & ((rows + cols) % 2 == 0)
                error[alone] = _delta(rows, cols, k, p, salt=7)[alone]
        tile.values = ((values + error) % p).astype("<u4").tobytes()

    def _codeword_value(self, party, k, p) -> int:
        """P(beta_me) / sum_o P(alpha_o) for the P of the module docstring: scaled so that
        a decoder that takes the pattern for errors at the spared honest parties shifts
        D by exactly the factor it is multiplied with (a small, in-range lie)."""
        code = party.plan.codes[k]
        order = party._responders
        point = {x: code.betas[party.names.index(x)] for x in order}
        honest = self.honest(order)
        zeros = [point[z] for z in honest[max(len(honest) - (code.min_responders - 1), 0):]]

        def P(x):
            value = 1
            for z in zeros:
                value = value * (x - z) % p
            return value
        total = sum(P(a) for a in code.alphas[:code.segments]) % p
        return P(point[party.party_id]) * pow(total, -1, p) % p if total else \
            P(point[party.party_id])
