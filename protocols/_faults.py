"""Test faults of a party: what a misbehaving or failing party sends, in one place.

Test hook only: the party processes' ``--fault SPEC`` (:func:`protocols._grpc_party.run_party`
``fault=``) and the in-memory ``run_memory_session(faults={name: SPEC})``. The production
state machines know nothing of them: a :class:`Fault` rewrites what the real
:class:`~protocols.Party` emits (:meth:`Fault.rewrite`), and over gRPC also delays or ends
the party process (:meth:`Fault.before_send`, :meth:`Fault.on_message`). Specs:

``exit-in-evaluation``   the process ends abruptly when the evaluation starts (a crash);
``stall-in-evaluation``  it stops answering then;
``exit-at-result``       the process ends abruptly when the result arrives, after its
                         whole upload (killed while the coordinator decoded);
``hold-tiles:PATH[:AFTER]``
                         its evaluation tiles after the first AFTER (default 0) are held
                         back until the file PATH exists (at most the session timeout),
                         then it uploads as usual;
``drop-stream-in-evaluation[:AFTER[:PAUSE]]``
                         its stream breaks once (cancelled by the party) right after
                         its AFTER-th evaluation tile (default 1) went into the stream;
                         it waits PAUSE seconds (default 0), then reconnects and resumes
                         within ``reconnect_grace`` (docs/protocol.md, "Reconnect");
``garbage-tiles``        uniformly random in-range evaluation tiles;
``oversized-hello``      a (validly signed) hello announcing 2^44 rows;
``corrupt-upload``, ``bad-share:RECEIVER[:AMOUNT]``, ``collude:PEER``
                         deviations the integrity checks must catch (:func:`corrupt`);
``coalition:PATTERN:MEMBERS``
                         several parties deviating together (:class:`Coalition`, below).

An unknown spec changes nothing.

Coalitions of deviating parties (also run by the audit): the strongest deviation the bound
allows. Every member of the coalition runs the real party and rewrites what it sends,
knowing the whole public structure (the code's points, the round's B, the row offsets)
and its fellow members. With X the members and B the responding set, K = 2l+2t-1 and
s = |B| - K checks:

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

import logging
import os
import pathlib
import time
from dataclasses import dataclass

import numpy as np

from finite_field import ParameterError, dual_multipliers

__all__ = ["Fault", "corrupt", "FAULT_STRIDE", "Coalition", "COALITION_PATTERNS"]

#: Every ``STRIDE``-th element of a corrupted evaluation tile is changed.
FAULT_STRIDE = 5


class Fault:
    """The test fault ``spec`` of one party (see the module docstring); None: no fault."""

    def __init__(self, spec: str | None) -> None:
        self.spec = spec or None
        self._tiles_sent = 0
        self._dropped = False

    def _drop_spec(self):
        if not self.spec or not self.spec.startswith("drop-stream-in-evaluation"):
            return None
        _, *rest = self.spec.split(":")
        after = int(rest[0]) if rest and rest[0] else 1
        pause = float(rest[1]) if len(rest) > 1 else 0.0
        return after, pause

    def drop_after(self, env) -> bool:
        """``drop-stream-in-evaluation``: True once, after the AFTER-th tile sent."""
        spec = self._drop_spec()
        if spec is None or self._dropped or not env.HasField("tile"):
            return False
        self._tiles_sent += 1
        if self._tiles_sent >= spec[0]:
            self._dropped = True
            return True
        return False

    def reconnect_pause(self) -> float:
        """Seconds to wait before reconnecting after the drop (``PAUSE``)."""
        spec = self._drop_spec()
        return spec[1] if spec is not None and self._dropped else 0.0

    def rewrite(self, party, env):
        """What the party sends instead of ``env`` (:func:`corrupt`)."""
        return corrupt(party, env, self.spec)

    def before_send(self, env, timeout: float) -> None:
        """``hold-tiles:PATH[:AFTER]``: wait before an evaluation tile after the first
        AFTER until PATH exists (at most ``timeout`` seconds)."""
        if self.spec and self.spec.startswith("hold-tiles:") and env.HasField("tile"):
            path, _, after = self.spec.split(":", 1)[1].partition(":")
            self._held_tiles = getattr(self, "_held_tiles", 0) + 1
            if self._held_tiles <= int(after or 0):
                return
            path = pathlib.Path(path)
            end = time.monotonic() + timeout
            while not path.exists() and time.monotonic() < end:
                time.sleep(0.05)

    def on_message(self, kind: str | None) -> None:
        """``exit-in-evaluation`` / ``stall-in-evaluation``: when the evaluation starts
        (a ``round_start`` arrives), end the process abruptly, or stop answering;
        ``exit-at-result``: end it abruptly when the result arrives, before reading it."""
        if kind == "result" and self.spec == "exit-at-result":
            logging.shutdown()
            os._exit(3)
        if kind != "round_start":
            return
        if self.spec == "exit-in-evaluation":
            logging.shutdown()
            os._exit(3)
        if self.spec == "stall-in-evaluation":
            while True:
                time.sleep(3600)


def corrupt(party, env, fault: str | None):
    """What a misbehaving ``party`` sends instead of ``env`` under the test fault ``fault``.

    Integrity faults (docs/protocol.md, "Integrity"): ``corrupt-upload`` adds a nonzero
    error to every FAULT_STRIDE-th element of every uploaded tile (a party that computes
    wrongly); ``bad-share:RECEIVER`` sends RECEIVER a share off this party's polynomial
    (one value of its first share chunk changed by 1, or by AMOUNT with
    ``bad-share:RECEIVER:AMOUNT``, re-encrypted under the pair key);
    ``collude:PEER`` adds errors e at the same elements as PEER (run with
    ``collude:THIS``), chosen so that v_j e_j + v_PEER e_PEER = 0: they cancel in the
    first parity check and only a second check sees them. ``coalition:PATTERN:MEMBERS``
    (on every member's process) is the strongest deviation of several parties together
    (:class:`Coalition`). ``garbage-tiles`` and ``oversized-hello``: see the module
    docstring. Any other fault leaves ``env`` as it is.
    """
    if not fault:
        return env
    if fault.startswith("coalition:"):  # several parties deviating together
        return Coalition.parse(fault).rewrite(party, env)
    if fault == "garbage-tiles" and env.HasField("tile"):
        p = party.plan.primes[env.tile.prime_index]
        values = np.frombuffer(os.urandom(len(env.tile.values)), dtype="<u4") % np.uint32(p)
        env.tile.values = values.astype("<u4").tobytes()
    elif fault == "oversized-hello" and env.HasField("hello"):
        from ._identity import sign
        from ._roster_transcripts import hello_transcript

        env.hello.n_rows = 1 << 44
        env.hello.signature = sign(party._identity, hello_transcript(env.hello))
    elif fault == "corrupt-upload" and env.HasField("tile"):
        _add_error(party, env, np.int64(1 + 7919 * (env.tile.tile_index + 1)))
    elif fault.startswith("collude:") and env.HasField("tile"):
        peer = fault.split(":", 1)[1]
        order = party._responders
        if peer in order:
            p = party.plan.primes[env.tile.prime_index]
            betas = party.plan.codes[env.tile.prime_index].betas
            v = dual_multipliers([betas[party.names.index(r)] for r in order], p)
            mine, theirs = order.index(party.party_id), order.index(peer)
            delta = 123457 % p
            sign = 1 if mine < theirs else p - 1
            _add_error(party, env, np.int64(delta * sign % p * pow(v[mine], -1, p) % p))
    elif fault.startswith("bad-share:") and env.HasField("share"):
        chunk = env.share
        _, receiver, *amount = fault.split(":", 2)
        if chunk.receiver == receiver and chunk.prime_index == 0 and \
                chunk.chunk_index == 0:
            from cryptography.hazmat.primitives.ciphers.aead import AESGCM

            keys = party.keys[chunk.receiver]
            aad = keys._aad(party.party_id, chunk.receiver, 0, 0, 0)
            box = AESGCM(keys.encryption_key)
            plain = bytearray(box.decrypt(bytes(chunk.nonce), bytes(chunk.ciphertext), aad))
            values = np.frombuffer(bytes(plain), dtype="<u4").copy()
            shift = int(amount[0]) if amount else 1  # off the polynomial
            values[0] = (int(values[0]) + shift) % party.plan.primes[0]
            chunk.ciphertext = box.encrypt(bytes(chunk.nonce), values.tobytes(), aad)
    return env


def _add_error(party, env, error) -> None:
    p = party.plan.primes[env.tile.prime_index]
    values = np.frombuffer(env.tile.values, dtype="<u4").astype(np.int64)
    values[::FAULT_STRIDE] = (values[::FAULT_STRIDE] + int(error)) % p
    env.tile.values = values.astype("<u4").tobytes()

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

    def rewrite(self, party, env):
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
