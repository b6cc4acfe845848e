"""An actively malicious coordinator, run against real (unmodified) parties.

The masked protocol promises that the coordinator learns D and nothing else. A coordinator
that does not follow the protocol can try to break that promise by **equivocating the
responding set**: it tells party j that the responding set is B_j (a different set for
different parties, in the same round). If the pairwise masks did not depend on the exact
view, every pair that includes each other would cancel its masks and every pair that
excludes each other would add none, so the sum of the uploads would be the unmasked
linear functional ``sum_j c_j^{B_j} g(beta_j)`` of the per-party evaluations. A few such
rounds with different sets give ``2l+2t-1`` independent functionals of the degree-2(l+t-1)
polynomial g, hence g(alpha_a) for every a: each per-segment squared-distance matrix (what
transparent mode leaks).

:class:`EquivocatingCoordinator` is that attacker as a :class:`protocols.Coordinator`
subclass, usable in memory and behind the gRPC server (the parties stay real processes).
Views are given per round as symmetric graphs: party j is told ``B_j`` = j and its
neighbours. Two schedules:

- ``"shrinking"``: round 1 is honest (everyone), then each round removes one more perfect
  matching, so every party's B strictly shrinks (the strict-subset rule is respected);
  only masks bound to the view stop it.
- ``"pairings"``: every round removes a different perfect matching from the full set (B
  does not shrink: the strict-subset rule stops it after one round).

:func:`recover_segments` solves for g(alpha_a) from the round sums; it returns None
when the rounds do not determine it. Compare against :func:`plaintext_segments`.
"""

from __future__ import annotations

import numpy as np

from finite_field import symmetrize_mod
from protocols import Coordinator
from protocols import Outcome
from protocols import omnifc_pb2 as pb
from protocols import envelope, row_tiles

__all__ = ["EquivocatingCoordinator", "round_robin_matchings", "equivocation_views",
           "recover_segments", "plaintext_segments", "solve_mod", "run_equivocation",
           "run_roster_attacks", "check_active_coordinator"]


def round_robin_matchings(m: int) -> list[list[tuple[int, int]]]:
    """The 1-factorization of K_m (m even; for odd m one vertex sits out each matching)."""
    size = m if m % 2 == 0 else m + 1
    fixed, ring = size - 1, size - 1
    out = []
    for r in range(ring):
        pairs = [(r, fixed)] + [((r + i) % ring, (r - i) % ring) for i in range(1, size // 2)]
        out.append([(a, b) for a, b in pairs if a < m and b < m])
    return out


def _views_of(names, removed_edges) -> dict:
    index = {n: i for i, n in enumerate(names)}
    return {n: [k for k in names if k == n or
                frozenset((index[n], index[k])) not in removed_edges] for n in names}


def equivocation_views(names, need: int, schedule: str = "shrinking",
                       rounds: int | None = None) -> list[dict]:
    """Per-round views ``{party: B_j}`` of the equivocation attack.

    Every B_j keeps at least ``need`` parties (what an honest party checks). ``rounds``
    bounds the number of rounds (default: as many as the schedule allows, at most
    ``need + 1``: enough to solve for the degree-(need-1) polynomial g).
    """
    names = list(names)
    m = len(names)
    matchings = round_robin_matchings(m)
    limit = need + 1 if rounds is None else rounds
    views = [{n: list(names) for n in names}]  # round 1: honest
    removed: set = set()
    for matching in matchings:
        if len(views) >= limit:
            break
        edges = {frozenset(e) for e in matching}
        if schedule == "shrinking":
            trial = removed | edges
        elif schedule == "pairings":
            trial = edges
        else:
            raise ValueError(f"unknown schedule {schedule!r}")
        view = _views_of(names, trial)
        if min(len(b) for b in view.values()) < need:
            break
        removed = trial
        views.append(view)
    return views


def solve_mod(rows: list[list[int]], rhs: list[int], p: int):
    """A solution x of ``sum_i x_i rows[i] = rhs`` over GF(p), or None (Python ints)."""
    n_vars, n_eq = len(rows), len(rhs)
    # augmented matrix: one equation per coordinate e
    a = [[rows[i][e] % p for i in range(n_vars)] + [rhs[e] % p] for e in range(n_eq)]
    pivots, r = [], 0
    for c in range(n_vars):
        pivot = next((i for i in range(r, n_eq) if a[i][c]), None)
        if pivot is None:
            continue
        a[r], a[pivot] = a[pivot], a[r]
        inv = pow(a[r][c], -1, p)
        a[r] = [v * inv % p for v in a[r]]
        for i in range(n_eq):
            if i != r and a[i][c]:
                f = a[i][c]
                a[i] = [(v - f * w) % p for v, w in zip(a[i], a[r])]
        pivots.append(c)
        r += 1
    if any(a[i][n_vars] for i in range(r, n_eq)):
        return None
    x = [0] * n_vars
    for i, c in enumerate(pivots):
        x[c] = a[i][n_vars]
    return x


class EquivocatingCoordinator(Coordinator):
    """A coordinator that shows each party its own responding set (see module docstring).

    Parameters
    ----------
    *args, **kwargs
        As :class:`protocols.Coordinator`.
    views : list of dict
        Per round, ``{party: B_j}`` (from :func:`equivocation_views`).

    After the session, :attr:`round_sums` holds, per round and prime, the sum of every
    upload (symmetric (n, n) residues) and :attr:`coefficients` the matching functionals.
    """

    def __init__(self, *args, views, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.views = [dict(v) for v in views]
        self.round_sums: list = []
        self.coefficients: list = []
        self.rejected_by: dict = {}

    def _uploaders(self) -> list:
        view = self.views[self.round - 1]
        return [n for n in self.names if n in view[n]]

    def _start_round(self, responders) -> list:
        self.round += 1
        view = self.views[self.round - 1]
        self.responders = self._uploaders()
        self.tiles = row_tiles(self.n_total, self.parameters.chunk_bytes)
        self.sums = [np.zeros((self.n_total, self.n_total), dtype=np.int64)
                     for _ in self.plan.primes]
        self.delivered = {r: set() for r in self.responders}
        if self.phase != "evaluation":
            self._enter("evaluation")
        coefficients = []
        for code in self.plan.codes:
            weights = {}
            for name in self.responders:
                position = [self.names.index(r) for r in self.names if r in view[name]]
                weights[name] = int(code.decoding_weights(position)[
                    position.index(self.names.index(name))])
            coefficients.append(weights)
        self.coefficients.append(coefficients)
        return [self._send(name, envelope(round_start=pb.RoundStart(
            session_id=self.session_id, round=self.round,
            responders=[r for r in self.names if r in view[name]])))
            for name in self.alive]

    def _on_tile(self, sender, tile, payload) -> list:
        k, index = tile.prime_index, tile.tile_index
        p = self.plan.primes[k]
        a, b = self.tiles[index]
        n = self.n_total
        values = np.frombuffer(payload, dtype="<u4").astype(np.int64).reshape(b - a, n - a)
        self.sums[k][a:b, a:] = (self.sums[k][a:b, a:] + values) % p
        self.delivered[sender].add((k, index))
        if not all(self._complete(r) for r in self.responders):
            return []
        self.round_sums.append([symmetrize_mod(s, p) for s, p in zip(self.sums,
                                                                        self.plan.primes)])
        if self.round < len(self.views):
            return self._start_round(None)
        return self._end()

    def _end(self) -> list:
        self._enter("done")
        out = [self._send(name, envelope(result=pb.Result(
            session_id=self.session_id, party_id=name, round=self.round,
            responders=self.responders))) for name in self.alive]
        d = self.round_sums[0]
        self.outcome = Outcome(integer=d[0], values=d[0], labels=None,
                               party_names=list(self.names), row_offsets=list(self.row_offsets),
                               rows=list(self.rows), responders=list(self.responders),
                               round=self.round, parameters={})
        return out

    def _on_group_seed(self, sender, msg) -> list:
        # Integrity mode: relay every group seed where it is addressed, unchecked (the
        # attacker's best move: it cannot read or forge them, they are bound to the view).
        return [self._send(msg.receiver, envelope(group_seed=msg))]

    def _on_error(self, sender, report) -> list:
        self.rejected_by[sender] = report.message
        return super()._on_error(sender, report)


def recover_segments(coordinator: EquivocatingCoordinator, prime_index: int = 0):
    """g(alpha_a) for a = 1..l from the attacker's round sums, or None if undetermined.

    Round r gives S_r = sum_j c_j^(r) g(beta_j) = sum_e A_re h_e with g(z) = sum_e h_e z^e;
    solve ``sum_r lambda_r A_r = (alpha_a^e)_e`` over GF(p), then g(alpha_a) =
    sum_r lambda_r S_r.
    """
    code = coordinator.plan.codes[prime_index]
    p = code.prime
    degree = 2 * (code.segments + code.noise_segments - 1)
    rows = []
    for coefficients in coordinator.coefficients[:len(coordinator.round_sums)]:
        weights = coefficients[prime_index]
        rows.append([sum(c * pow(code.betas[coordinator.names.index(name)], e, p)
                         for name, c in weights.items()) % p for e in range(degree + 1)])
    sums = [r[prime_index] for r in coordinator.round_sums]
    out = []
    for alpha in code.alphas[:code.segments]:
        x = solve_mod(rows, [pow(alpha, e, p) for e in range(degree + 1)], p)
        if x is None:
            return None
        total = np.zeros_like(sums[0])
        for lam, s in zip(x, sums):
            total = (total + (lam * s) % p) % p
        out.append(total)
    return out


def plaintext_segments(quantized: np.ndarray, segments: int) -> list:
    """Per-segment squared distances of quantized rows (exact Python integers)."""
    q = np.asarray(quantized, dtype=object)
    width = -(-q.shape[1] // segments)
    out = []
    for a in range(segments):
        block = q[:, a * width:(a + 1) * width]
        out.append(np.array([[int(sum((u - v) ** 2 for u, v in zip(x, y))) for y in block]
                             for x in block], dtype=np.int64))
    return out


# -- the audit check ------------------------------------------------------------------------

def _session_parameters(params, mode: str = "masked"):
    from protocols import SessionParameters

    alphas, betas = params.raw_points()
    return SessionParameters(dim=params.dim, bound=params.bound, scale_bits=params.scale_bits,
                             segments=params.segments, noise_segments=params.noise_segments,
                             nonnegative=params.nonnegative, primes=params.session_primes(),
                             mode=mode, alphas=alphas, betas=betas,
                             integrity=getattr(params, "integrity", "detect"),
                             adversaries=getattr(params, "adversaries", None))


def _unmasked_functionals(coordinator, parties) -> list:
    """Per equivocated round: does its upload sum equal sum_j c_j^{B_j} g(beta_j)?

    Uses the parties' state (their shares) only to *verify* what the attacker obtained.
    """
    from finite_field import cross_sq_distances

    code = coordinator.plan.codes[0]
    p = code.prime
    g = {name: cross_sq_distances(party.held[0], party.held[0], p)
         for name, party in parties.items() if hasattr(party, "held")}
    out = []
    for r, (coefficients, sums) in enumerate(zip(coordinator.coefficients,
                                                 coordinator.round_sums)):
        if r == 0 or any(name not in g for name in coefficients[0]):
            continue
        expected = np.zeros_like(sums[0])
        for name, c in coefficients[0].items():
            expected = (expected + c * g[name]) % p
        out.append(bool(np.array_equal(np.triu(sums[0]), np.triu(expected))))
    return out


def run_equivocation(params, *, rows_per_party: int = 2, seed: int = 0,
                     schedule: str | None = None, integrity: str = "off") -> dict:
    """Run the equivocation attack with real in-memory parties; return what it obtained.

    ``integrity="off"`` attacks the weighted pairwise masks (what every round with
    r = 0 uses, and a coordinator can always shrink B to 2l+2t-1 parties); another policy
    attacks the integrity masks (group seeds bound to the view).
    """
    from dataclasses import replace

    from finite_field import OmniFCError
    from protocols import run_memory_session
    from protocols import Transcript

    m, l = params.parties, params.segments
    names = [f"party-{j + 1}" for j in range(m)]
    session = replace(_session_parameters(params), integrity=integrity,
                      adversaries=None if integrity == "off" else params.adversaries)
    need = session.min_responders(m)
    if m <= need:
        return {"applicable": False, "reason": f"m = {m} parties and decoding needs "
                f"2l+2t-1 = {need}: every round must include everyone, there is no set "
                "to equivocate"}
    if schedule is None:
        shrinking = equivocation_views(names, need, "shrinking")
        schedule = "shrinking" if len(shrinking) >= need + 1 else "pairings"
    views = equivocation_views(names, need, schedule)
    rng = np.random.default_rng(seed)
    q = params.quantizer
    data = {name: rng.uniform(q.lower, params.bound, (rows_per_party, params.dim))
            for name in names}

    def make(*args, **kwargs):
        return EquivocatingCoordinator(*args, views=views, **kwargs)
    seen = Transcript()
    refused = None
    try:
        run_memory_session(data, session, coordinator_class=make, observe=seen)
    except OmniFCError as error:
        refused = str(error)
    coordinator = seen.coordinator
    result = {"applicable": True, "schedule": schedule, "rounds_planned": len(views),
              "rounds_completed": len(coordinator.round_sums), "refused": refused,
              "unmasked_rounds": sum(_unmasked_functionals(coordinator, seen.parties))}
    recovered = recover_segments(coordinator) if coordinator.round_sums else None
    truth = plaintext_segments(np.concatenate([seen.parties[n].quantized for n in names]), l)
    result["segments_determined"] = recovered is not None
    result["segments_recovered_exactly"] = 0 if recovered is None else sum(
        bool(np.array_equal(np.triu(got), np.triu(want)))
        for got, want in zip(recovered, truth))
    return result


def run_roster_attacks(params, *, seed: int = 0) -> dict:
    """A reordered roster and a hello replayed from an earlier run, with real parties."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from finite_field import OmniFCError
    from protocols import run_memory_session
    from protocols import Transcript

    m = params.parties
    names = [f"party-{j + 1}" for j in range(m)]
    session = _session_parameters(params)
    rng = np.random.default_rng(seed)
    q = params.quantizer
    data = {name: rng.uniform(q.lower, params.bound, (2, params.dim)) for name in names}
    out = {}

    def reordered(session_id, parameters, order, pinned, **kwargs):
        return Coordinator(session_id, parameters, order[::-1], pinned, **kwargs)
    seen = Transcript()
    try:
        run_memory_session(data, session, coordinator_class=reordered, observe=seen)
        out["reordered_roster_refused"] = False
    except OmniFCError:
        out["reordered_roster_refused"] = all(p.phase == "failed" and not hasattr(p, "keys")
                                              for p in seen.parties.values())

    identities = {name: Ed25519PrivateKey.generate() for name in names}
    _, first = run_memory_session(data, session, session_id="audit-replay", record=True,
                                  identities=identities)
    old = {msg.sender: msg.envelope().hello for msg in first.of_kind("hello")}
    victim, replayed = names[0], names[-1]

    class Replaying(Coordinator):
        def _send_roster(self):
            result = []
            for dest, env in super()._send_roster():
                if dest == victim:
                    env = pb.Envelope.FromString(env.SerializeToString())
                    for entry in env.roster.parties:
                        if entry.hello.party_id == replayed:
                            entry.hello.CopyFrom(old[replayed])
                result.append((dest, env))
            return result
    seen = Transcript()
    try:
        run_memory_session(data, session, session_id="audit-replay", identities=identities,
                           coordinator_class=Replaying, observe=seen)
        out["replayed_hello_refused"] = False
    except OmniFCError:
        # nobody may hold a result (the victim's roster confirmation does not match the
        # others', so nobody encrypts a share)
        out["replayed_hello_refused"] = all(p.result is None for p in seen.parties.values())
    return out


def check_active_coordinator(params, *, seed: int = 0):
    """Check 8: an actively malicious coordinator against real parties (masked mode).

    Runs the responder-set equivocation attack (:class:`EquivocatingCoordinator`), a
    reordered roster and a hello replayed from an earlier run of the same session config
    with real, unmodified in-memory parties and the session's parameters, and reports
    whether the coordinator obtained anything beyond D. Passes when it did not.

    Examples
    --------
    >>> from omnifc.audit import AuditParameters
    >>> check = check_active_coordinator(AuditParameters(parties=6, segments=2, dim=4))
    >>> check.verdict, check.evidence["equivocation"]["segments_recovered_exactly"]
    ('pass', 0)
    """
    from omnifc.audit._model import FAIL, PASS, Check

    check = Check("active_coordinator", 8, "An actively malicious coordinator (masked mode)",
                  verdict=PASS)
    check.reproduce = (f"omnifc audit {params.cli_arguments()} --checks 8\n\n"
                       "from omnifc.audit import AuditParameters, check_active_coordinator\n"
                       f"check_active_coordinator({params.python_arguments()})")
    from finite_field import OmniFCError
    try:
        equivocation = run_equivocation(params, seed=seed)
        checked = None
        if getattr(params, "integrity", "off") != "off":
            checked = run_equivocation(params, seed=seed, integrity=params.integrity)
        roster = run_roster_attacks(params, seed=seed)
    except (OmniFCError, ValueError) as error:
        check.fail(f"not run: the protocol refuses these parameters ({error})")
        check.finding = check.reasons[0]
        return check
    check.evidence = {"equivocation": equivocation, "roster": roster}
    l = params.segments
    if checked is not None:
        check.evidence["equivocation_integrity"] = checked
        if checked["applicable"] and (checked["unmasked_rounds"] or
                                      (checked["segments_recovered_exactly"] and l > 1)):
            check.fail("equivocated views against the integrity masks gave the coordinator "
                       "more than D")
        if checked["applicable"]:
            check.details.append(
                f"Equivocation against the integrity masks (integrity = "
                f"\"{params.integrity}\"): the parties took part in "
                f"{checked['rounds_completed']} of {checked['rounds_planned']} rounds"
                + (f" and then refused ({checked['refused']})" if checked["refused"] else "")
                + f"; per-segment matrices recovered exactly: "
                f"{checked['segments_recovered_exactly']} of {l}.")
    if equivocation["applicable"]:
        if equivocation["unmasked_rounds"]:
            check.fail(f"{equivocation['unmasked_rounds']} equivocated rounds gave the "
                       "coordinator an unmasked combination of per-party evaluations")
        if equivocation["segments_recovered_exactly"] and l > 1:
            check.fail(f"the coordinator recovered {equivocation['segments_recovered_exactly']}"
                       f" of {l} per-segment distance matrices exactly")
        check.details.append(
            f"Equivocation ({equivocation['schedule']} schedule): the coordinator told each of "
            f"the m = {params.parties} parties its own responding set in "
            f"{equivocation['rounds_planned']} rounds; the parties took part in "
            f"{equivocation['rounds_completed']} "
            + (f"and then refused ({equivocation['refused']}). " if equivocation['refused']
               else "(every set was acceptable to an honest party). ")
            + f"Rounds whose upload sum was an unmasked functional: "
            f"{equivocation['unmasked_rounds']}; per-segment matrices recovered exactly: "
            f"{equivocation['segments_recovered_exactly']} of {l}.")
    else:
        check.details.append("Equivocation: not applicable: " + equivocation["reason"] + ".")
    if not roster["reordered_roster_refused"]:
        check.fail("a roster in another order than the session config's was accepted")
    if not roster["replayed_hello_refused"]:
        check.fail("a hello replayed from an earlier run was accepted")
    check.details.append(
        "Roster: a roster in reversed order was "
        + ("refused by every party before any key was derived" if
           roster["reordered_roster_refused"] else "ACCEPTED")
        + "; a hello replayed from an earlier run of the same config was "
        + ("never accepted (no party obtained a result)" if roster["replayed_hello_refused"]
           else "ACCEPTED") + ".")
    check.finding = ("nothing beyond D: equivocated views gave noise or refusals, the "
                     "reordered roster and the replayed hello were refused"
                     if check.verdict == PASS else check.reasons[0])
    return check
