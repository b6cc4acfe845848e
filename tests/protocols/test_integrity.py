"""protocols/_integrity.py pinned down (issue 14, mutation testing).

Expectations recomputed here with Python integers from docs/protocol.md ("Integrity") and
docs/integrity.md, never with the module's helpers:

- W = [c; mu_1..mu_s] with c_j = sum_{o<=l} L_j^B(alpha_o) (Lagrange basis on the betas of
  B, in roster order) and mu_{k,j} = v_j beta_j^(k-1), v_j = 1 / prod_{i != j}(beta_j -
  beta_i), all mod p; s = |B| - (2l + 2t - 1), radius floor(s/2);
- every mask group's vector (zero outside its members) lies in W^perp;
- the member sets: the distinct groups as names, sorted by roster order;
- rho_G: AES-256-CTR (zero counter) under HKDF-Expand(seed, transcript("group-mask-stream",
  view digest, |members|, *members, which null vector of that member set, p, tile)), the
  32-bit little-endian words masked to the bit length of p - 1, kept below p;
- the accumulator's sums: sum over uploads of column[q] * upload, mod p;
- the findings: global (row, col) of each located error from the tile's offsets, mapped to
  the owning parties with the row offsets.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDFExpand

from finite_field import Decoding, MaskGroup
from protocols import SessionParameters
from protocols._crypto import MaskView
from protocols._integrity import (Findings, RoundChecks, TileAccumulator,
                                  group_coefficients, group_streams, round_checks, verdict)
from kat_helpers import transcript as _transcript
from oracles import mask_stream_elements, parity_rows

pytestmark = pytest.mark.timeout(120)

NAMES = ["ann", "bo", "cy", "di", "ed", "flo", "gus"]


def _params(**extra):
    base = dict(dim=2, bound=1.0, scale_bits=4, primes=(65521, 65519))
    return SessionParameters(**{**base, **extra})


def _weights(alphas, betas, p):
    out = []
    for j, bj in enumerate(betas):
        total = 0
        for a in alphas:
            num = den = 1
            for i, bi in enumerate(betas):
                if i != j:
                    num = num * (a - bi) % p
                    den = den * (bj - bi) % p
            total += num * pow(den, -1, p)
        out.append(total % p)
    return out


@pytest.mark.parametrize("m, responders, t", [
    (6, ["ed", "ann", "cy", "bo", "flo"], 1),      # B not a prefix, given out of order
    (6, NAMES[:6], 1),
    (7, ["gus", "flo", "ed", "di", "cy", "bo", "ann"], 1),
    (7, NAMES[:7], 2),                             # K = 5, s = 2
])
def test_round_checks_are_the_documented_rows_groups_and_member_sets(m, responders, t):
    names = NAMES[:m]
    params = _params(noise_segments=t)
    plan = params.plan(m)
    k = 2 * 1 + 2 * t - 1
    checks = round_checks(plan, params, names, responders)
    order = [n for n in names if n in responders]
    s = len(order) - k
    assert checks.responders == tuple(order)
    a = params.adversary_bound(m)  # default: A = r = m - K, so the radius is s - A <= 0
    assert (checks.checks, checks.radius) == (s, max(min(s // 2, s - a), 0))
    for declared in range(0, s + 1):  # the radius for any A the round withstands
        assert round_checks(plan, params, names, responders, adversaries=declared).radius \
            == min(s // 2, s - declared)
    assert len(checks.rows) == len(checks.codes) == len(checks.groups) == 2
    sets = set()
    for code, w, check, groups in zip(plan.codes, checks.rows, checks.codes, checks.groups):
        p = code.prime
        betas = [code.betas[names.index(n)] for n in order]
        assert [int(x) for x in check.points] == betas
        # c_j = sum over the l = 1 data points alpha_1..alpha_l (the t noise points are not
        # summed)
        assert w.tolist() == [_weights(code.alphas[:1], betas, p)] + parity_rows(betas, s, p)
        assert groups, "masked mode has mask groups"
        for group in groups:
            dense = [0] * len(order)
            for member, value in zip(group.members, group.vector):
                dense[member] = value
            for row in w.tolist():
                assert sum(a * b for a, b in zip(row, dense)) % p == 0
            sets.add(tuple(order[j] for j in sorted(group.members)))
        # every responder is in some group (its upload is masked)
        assert {j for g in groups for j in g.members} == set(range(len(order)))
    assert set(checks.member_sets) == sets
    assert list(checks.member_sets) == sorted(sets, key=lambda ms: [names.index(x) for x in ms])
    for members in checks.member_sets:
        assert list(members) == [n for n in names if n in members]   # roster order inside
    # index and my_sets
    for j, name in enumerate(order):
        assert checks.index(name) == j
        assert checks.my_sets(name) == [(i, ms) for i, ms in enumerate(checks.member_sets)
                                        if name in ms]


def test_member_sets_are_sorted_by_roster_order_not_by_name():
    # A roster whose order is not alphabetical: the sets follow the roster.
    names = ["zed", "yan", "xia", "wes", "val", "uma"]
    params = _params()
    checks = round_checks(params.plan(6), params, names, names[:5])
    assert checks.responders == ("zed", "yan", "xia", "wes", "val")
    keys = [[names.index(x) for x in ms] for ms in checks.member_sets]
    assert keys == sorted(keys) and len(keys) >= 2
    for ms in checks.member_sets:
        assert [names.index(x) for x in ms] == sorted(names.index(x) for x in ms)


def test_transparent_rounds_have_rows_but_no_groups():
    params = _params(mode="transparent")
    checks = round_checks(params.plan(6), params, NAMES[:6], NAMES[:6], adversaries=1)
    assert checks.groups == [[], []] and checks.member_sets == ()
    assert (checks.checks, checks.radius) == (3, 1)
    assert len(checks.rows) == 2 and checks.rows[0].shape == (4, 6)


@pytest.mark.parametrize("policy", ["detect", "correct"])
def test_every_checked_policy_has_checks(policy):
    params = _params(integrity=policy)
    assert round_checks(params.plan(5), params, NAMES[:5], NAMES[:5]).checks == 2


def test_nothing_to_check_gives_none():
    params = _params()
    plan = params.plan(5)
    assert round_checks(plan, params, NAMES[:5], NAMES[:3]) is None           # s = 0
    assert round_checks(plan, params, NAMES[:5], NAMES[:4]).checks == 1       # s = 1
    off = _params(integrity="off")
    assert round_checks(off.plan(5), off, NAMES[:5], NAMES[:5]) is None
    total = _params(kind="sum", integrity="detect")
    assert round_checks(total.plan(5), total, NAMES[:5], NAMES[:5]) is None


# -- group streams -------------------------------------------------------------------------

_stream = mask_stream_elements   # the documented stream, word by word (tests/oracles.py)


@pytest.mark.parametrize("m, t", [(6, 1), (7, 2)])
def test_group_streams_are_the_documented_keys_and_coefficients(m, t):
    params = _params(noise_segments=t)
    names = NAMES[:m]
    checks = round_checks(params.plan(m), params, names, names)
    seeds = {ms: hashlib.sha256(repr(ms).encode()).digest() for ms in checks.member_sets}
    roster = hashlib.sha256(b"roster").digest()
    view = MaskView("sess", 3, roster, checks.responders)
    view_digest = hashlib.sha256(_transcript("mask-view", "sess", 3, roster, m,
                                             *checks.responders)).digest()
    for prime_index, code in enumerate(params.plan(m).codes):
        p = code.prime
        for me in names:
            j = names.index(me)
            expected, seen = [], {}
            for i, group in enumerate(checks.groups[prime_index]):
                members = tuple(names[x] for x in sorted(group.members))
                which = seen.get(members, 0)
                seen[members] = which + 1
                if j in group.members:
                    info = _transcript("group-mask-stream", view_digest, len(members),
                                       *members, which, p, 5)
                    key = HKDFExpand(algorithm=hashes.SHA256(), length=32,
                                     info=info).derive(seeds[members])
                    z = group.vector[list(group.members).index(j)] % p
                    expected.append((i, _stream(key, p, 30), z))
            got = group_streams(checks, prime_index, me, seeds, view, 5)
            assert [(i, s.next(30).tolist(), z) for i, s, z in got] == expected
            assert all(type(z) is int for _, _, z in got)
            rho = group_coefficients(checks, prime_index, me, seeds, view, 5, 30)
            assert {i: r.tolist() for i, r in rho.items()} == {
                i: values for i, values, _ in expected}
            assert all(r.dtype == np.int64 and r.shape == (30,) for r in rho.values())


def test_a_member_set_with_two_null_vectors_has_one_stream_per_vector():
    # choose_mask_groups gives one MaskGroup per null vector of a group's restriction of
    # W: a member set can repeat (degenerate points). Each repeat is another vector index
    # of group_mask_key, in the order of the groups. Hand-built structure: groups 0 and 2
    # have the members {ann, bo, cy}, group 1 {bo, cy, di} (positions are unsorted).
    p = 65521
    groups = [MaskGroup(members=(2, 0, 1), vector=(3, 1, 2)),
              MaskGroup(members=(1, 2, 3), vector=(1, 5, p - 6)),
              MaskGroup(members=(0, 1, 2), vector=(7, p - 1, 4)),
              MaskGroup(members=(3, 1, 2), vector=(9, 1, 1))]
    responders = ("ann", "bo", "cy", "di")
    checks = RoundChecks(responders=responders, checks=1, radius=0, rows=[None],
                         codes=[_Code(p)], groups=[groups],
                         member_sets=(("ann", "bo", "cy"), ("bo", "cy", "di")))
    seeds = {("ann", "bo", "cy"): bytes(range(32)), ("bo", "cy", "di"): bytes(range(1, 33))}
    roster = bytes(32)
    view = MaskView("s", 2, roster, responders)
    view_digest = hashlib.sha256(_transcript("mask-view", "s", 2, roster, 4,
                                             *responders)).digest()

    def key(members, which):
        info = _transcript("group-mask-stream", view_digest, len(members), *members, which,
                           p, 1)
        return HKDFExpand(algorithm=hashes.SHA256(), length=32,
                          info=info).derive(seeds[members])

    abc, bcd = ("ann", "bo", "cy"), ("bo", "cy", "di")
    expected = {  # party: [(group index, key, z)]
        "ann": [(0, key(abc, 0), 1), (2, key(abc, 1), 7)],
        "bo": [(0, key(abc, 0), 2), (1, key(bcd, 0), 1), (2, key(abc, 1), p - 1),
               (3, key(bcd, 1), 1)],
        "di": [(1, key(bcd, 0), p - 6), (3, key(bcd, 1), 9)],
    }
    for me, wanted in expected.items():
        got = group_streams(checks, 0, me, seeds, view, 1)
        assert [(i, s.next(12).tolist(), z) for i, s, z in got] == [
            (i, _stream(k, p, 12), z) for i, k, z in wanted], me


class _Code:
    """The one attribute of a ReedSolomonCheck that group_streams reads."""

    def __init__(self, prime):
        self.prime = prime


# -- the coordinator's running sums -------------------------------------------------------------

def test_tile_accumulator_sums_column_times_upload_mod_p():
    p = 65521
    rng = np.random.default_rng(4)
    shape = (3, 5)
    acc = TileAccumulator(3, p, shape)
    assert acc.prime == p and acc.sums.shape == (3, 3, 5) and not acc.sums.any()
    expected = [[0] * 15 for _ in range(3)]
    for _ in range(4):
        column = [int(x) for x in rng.integers(0, p, 3)]
        upload = rng.integers(0, p, shape)
        acc.add(np.array(column), upload)
        for q in range(3):
            for e, u in enumerate(upload.reshape(-1).tolist()):
                expected[q][e] += column[q] * u
    out = acc.finish()
    assert out.shape == (3, 3, 5)
    assert out.reshape(3, -1).tolist() == [[x % p for x in row] for row in expected]
    # a list column and a list upload work the same
    acc2 = TileAccumulator(1, 13, (2,))
    acc2.add([5], [12, 7])
    acc2.add([12], [12, 1])
    assert acc2.finish().tolist() == [[(5 * 12 + 12 * 12) % 13, (5 * 7 + 12 * 1) % 13]]


# -- findings and verdict --------------------------------------------------------------------

def _decoding(shape, flagged, positions, correctable=None):
    flagged = np.array(flagged, dtype=np.int64)
    positions = np.array(positions, dtype=np.int64).reshape(len(flagged), -1 if flagged.size
                                                               else 1)
    if correctable is None:
        correctable = np.ones(len(flagged), dtype=bool)
    return Decoding(shape=shape, flagged=flagged, positions=positions,
                    errors=np.where(positions >= 0, 1, 0), correctable=np.array(correctable),
                    prime=13)


def test_findings_map_located_errors_to_owner_pairs_and_evaluators():
    # rows 0..9: owners by offsets [0, 4, 7] -> rows 0-3 party 0, 4-6 party 1, 7-9 party 2
    owners = np.array([0, 4, 7])
    responders = ("ann", "bo", "cy", "di")
    findings = Findings()
    assert findings.clean and findings.triples == set()
    # a (2, 5) tile at global rows 3.., columns 2..: flat 1 -> (3, 3), flat 7 -> (4, 4),
    # flat 9 -> (4, 6)
    tile = _decoding((2, 5), [1, 7, 9], [[2, -1], [0, 3], [-1, -1]], [True, True, False])
    findings.add(tile, 3, 2, owners, responders)
    assert (findings.flagged, findings.uncorrectable) == (3, 1)
    assert not findings.clean
    # (3, 3): owners 0, 0 by evaluator cy; (4, 4): owners 1, 1 by ann and di
    assert findings.triples == {(0, 0, "cy"), (1, 1, "ann"), (1, 1, "di")}
    # a second tile: (8, 1) -> owners (2, 0) stored as (0, 2), evaluator bo; duplicates
    # collapse
    second = _decoding((1, 10), [1, 1], [[1], [1]])
    findings.add(second, 8, 0, owners, responders)
    assert findings.triples == {(0, 0, "cy"), (1, 1, "ann"), (1, 1, "di"), (0, 2, "bo")}
    assert (findings.flagged, findings.uncorrectable) == (5, 1)


def test_findings_of_clean_or_unlocated_tiles_add_no_triples():
    owners = np.array([0, 2])
    findings = Findings()
    findings.add(_decoding((2, 2), [], []), 0, 0, owners, ("a", "b"))
    assert (findings.flagged, findings.uncorrectable, findings.triples) == (0, 0, set())
    findings.add(_decoding((2, 2), [0, 3], [[-1], [-1]], [False, False]), 0, 0, owners,
                 ("a", "b"))
    assert (findings.flagged, findings.uncorrectable, findings.triples) == (2, 2, set())
    assert not findings.clean


def test_a_flagged_entry_at_an_owner_boundary():
    # the first row of a party belongs to it (offsets are starts)
    owners = np.array([0, 3, 5])
    findings = Findings()
    findings.add(_decoding((1, 3), [0, 2], [[0], [1]]), 3, 2, owners, ("a", "b", "c"))
    # (3, 2): owners 1 and 0 -> (0, 1, "a"); (3, 4): owners 1, 1 -> (1, 1, "b")
    assert findings.triples == {(0, 1, "a"), (1, 1, "b")}


def test_verdict_names_the_party_in_every_explanation():
    names = ["ann", "bo", "cy", "di", "ed"]
    findings = Findings()
    # ann's evaluation is wrong on entries of three different owner pairs: only {ann}
    # explains them all with one deviator
    findings.triples = {(1, 2, "ann"), (3, 4, "ann"), (2, 3, "ann")}
    result = verdict(findings, names, 1)
    assert result.named == ("ann",) and result.explained
    # the declared A, not the radius, bounds the explanations: A = 0 explains nothing
    assert not verdict(findings, names, 0).explained
    # an already excluded party is known: the errors it can explain are its own
    assert verdict(findings, names, 2, known=["ann"]).clean
    # one off-polynomial share: bo wrong on cy's rows only at ed's evaluation -> suspects
    findings.triples = {(2, 2, "ed")}
    single = verdict(findings, names, 1)
    assert single.named == () and single.explained
    assert sorted(map(sorted, single.suspects)) == [["cy"], ["ed"]]


def test_verdict_with_two_adversaries_explains_what_one_cannot():
    names = ["ann", "bo", "cy", "di", "ed"]
    findings = Findings()
    findings.triples = {(0, 0, "cy"), (3, 3, "ed")}  # two unrelated errors
    assert not verdict(findings, names, 1).explained
    two = verdict(findings, names, 2)
    assert two.explained
    assert verdict(findings, names, np.int64(2)).explained
