"""How strong the mask graph must be in a distance session: ``mask_degree`` 0 or >= t + 1.

The coordinator chooses the responding set B. With |B| = 2l + 2t - 1 it leaves r = 0
redundant responders: no integrity checks run and each party of B uploads
c_j * g(beta_j) plus the pairwise masks of its neighbours in the Harary graph
H_{k,|B|} (protocols/_mask_graph.py). A coordinator colluding with a set C of parties
holds C's pair keys, so it removes every mask on the edges between C and an honest set S
that is a connected component of G - C, and reads the sum over S of c_j * g(beta_j). For
one honest party that is its whole weighted evaluation: per-segment noise distances and
cross terms <X_a - X_b, N_a - N_b>, which D does not give. H_{k,n} withstands k - 1
colluders, and t colluders are allowed by the shares' t-privacy, hence k >= t + 1.

The attack below runs through the real Party/Coordinator state machines (in memory); its
recovery is checked against each party's weighted evaluation recomputed independently
from the shares it holds (Python integers, exact-fraction Lagrange weights).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
import pytest

from finite_field import ParameterError
from protocols import SessionParameters, run_memory_session
from protocols._mask_graph import mask_edges

from oracles import graph_connected
from protocol_helpers import lagrange_weights, plaintext_sq_distances, random_data

pytestmark = pytest.mark.timeout(300)

DIM, BOUND, SCALE = 4, 1.0, 8


@dataclass
class Run:
    """One finished session as the coordinator and its colluders see it."""

    transcript: object
    outcome: object
    responders: list      # B, in roster order, chosen by the coordinator
    uploads: dict         # sender -> {(prime index, tile index): (row_start, row_stop, values)}
    segments: int
    degree: int

    @property
    def primes(self):
        return self.outcome.parameters["primes"]


def r0_session(m, segments, noise_segments, degree, seed=0):
    """A distance session whose coordinator picks |B| = 2l + 2t - 1 (r = 0: unchecked)."""
    data = random_data([2, 3, 1, 2, 3, 2, 1][:m], DIM, seed=seed)
    # An honest coordinator never starts a round with fewer than K + A responders; a
    # malicious one can (the parties accept any B of at least K). adversaries = 0 lets
    # the honest class play that coordinator here.
    params = SessionParameters(dim=DIM, bound=BOUND, scale_bits=SCALE, segments=segments,
                               noise_segments=noise_segments, mask_degree=degree,
                               chunk_bytes=4096, adversaries=0)
    assert params.integrity == "detect"  # the checks are on; the coordinator avoids them
    names = list(data)
    responders = names[:params.min_responders(m)]
    outcome, transcript = run_memory_session(data, params, responders=responders,
                                             record=True)
    rows = np.concatenate(list(data.values()))
    assert np.array_equal(outcome.integer, plaintext_sq_distances(rows, BOUND, SCALE))
    assert outcome.integrity.startswith("unchecked")  # r = 0: only the masks protect
    uploads = {}
    for message in transcript.of_kind("tile"):
        tile = message.envelope().tile
        assert tile.round == outcome.round
        uploads.setdefault(message.sender, {})[(tile.prime_index, tile.tile_index)] = (
            tile.row_start, tile.row_stop, np.frombuffer(tile.values, "<u4").astype(object))
    assert set(uploads) == set(responders)
    return Run(transcript, outcome, responders, uploads, segments, degree)


def weighted_evaluation(run, name):
    """c_j * g(beta_j) of party ``name``, per tile, recomputed from the shares it holds:
    squared distances with Python integers, c_j = sum_{o<=l} L_j^B(alpha_o) with exact
    fractions over the public points of B."""
    party = run.transcript.parties[name]
    n = sum(party.rows_of.values())
    out = {}
    for k, code in enumerate(party.plan.codes):
        p = run.primes[k]
        betas = [code.betas[party.names.index(r)] for r in run.responders]
        weights = [lagrange_weights(betas, code.alphas[o], p) for o in range(run.segments)]
        weight = sum(w[run.responders.index(name)] for w in weights) % p
        held = [[int(v) for v in row] for row in party.held[k]]
        g = [[sum((x - y) ** 2 for x, y in zip(held[a], held[b])) % p for b in range(n)]
             for a in range(n)]
        for (prime_index, tile_index), (a, b, _) in run.uploads[name].items():
            if prime_index == k:
                out[(k, tile_index)] = np.array(
                    [weight * g[i][j] % p for i in range(a, b) for j in range(a, n)],
                    dtype=object)
    return out


def truth(run, target):
    """The sum over ``target`` of the weighted evaluations (what unmasking would give)."""
    parts = [weighted_evaluation(run, s) for s in target]
    return {key: sum(part[key] for part in parts) % run.primes[key[0]] for key in parts[0]}


def attack(run, colluders, target):
    """What the coordinator computes with the colluders' pair keys for the honest set
    ``target``: per tile, the sum of its uploads minus every mask on an edge of the public
    mask graph between ``target`` and a colluder (each recomputed from the colluder's
    key with that party, for the colluder's own view of the round)."""
    edges = mask_edges(len(run.responders), run.degree)
    roster = run.transcript.parties[colluders[0]].names
    out = {}
    for key in run.uploads[target[0]]:
        k, tile_index = key
        p = run.primes[k]
        total = sum(run.uploads[s][key][2] for s in target) % p
        for s in target:
            for c in colluders:
                i, j = sorted((run.responders.index(s), run.responders.index(c)))
                if (i, j) not in edges:
                    continue
                colluder = run.transcript.parties[c]
                view = colluder._view(run.outcome.round, run.responders)
                mask = colluder.keys[s].mask(p, total.size, view=view, prime_index=k,
                                             tile_index=tile_index).astype(object)
                # s added +mask for a later peer in roster order, -mask for an earlier one
                sign = 1 if roster.index(c) > roster.index(s) else -1
                total = (total - sign * mask) % p
        out[key] = total
    return out


def same(got, want):
    return got.keys() == want.keys() and all(np.array_equal(got[k], want[k]) for k in got)


def matches(got, want):
    """How many entries of ``got`` equal ``want`` (by chance: each is uniform in GF(p))."""
    return sum(int((got[k] == want[k]).sum()) for k in got)


# --- the weak degree: 1 <= k <= t is refused before any session starts ----------------------
WEAK = r"mask_degree must be 0 \(every pair\) or at least t \+ 1 = {} \(noise_segments t = {}\), got {}"


def test_a_path_mask_graph_with_l_t_1_is_refused_before_the_session():
    # m = 4, l = t = 1, mask_degree = 1: H_{1,3} is the path B[0] - B[1] - B[2]. A
    # coordinator picking |B| = 3 (r = 0) and colluding with B[1], the only mask partner
    # of B[0] and B[2], read their c_j * g(beta_j) exactly (attack() above, before the
    # fix); now the session cannot be set up.
    with pytest.raises(ParameterError, match=WEAK.format(2, 1, 1)):
        r0_session(4, 1, 1, degree=1, seed=1)


@pytest.mark.parametrize("t", [1, 2, 3])
def test_every_degree_from_1_to_t_is_refused_and_t_plus_1_accepted(t):
    for k in range(1, t + 1):
        for mode in ("masked", "transparent"):
            with pytest.raises(ParameterError, match=WEAK.format(t + 1, t, k)) as error:
                SessionParameters(dim=4, bound=1.0, noise_segments=t, mask_degree=k, mode=mode)
            assert f"withstands only {k - 1} colluding parties" in str(error.value)
    for k in (0, t + 1, t + 5):
        assert SessionParameters(dim=4, bound=1.0, noise_segments=t,
                                 mask_degree=k).mask_degree == k
    # a secure sum has no t: any k >= 1 (up to m - 1) stays allowed
    assert SessionParameters(kind="sum", dim=2, bound=1.0, noise_segments=t,
                             mask_degree=1).mask_degree == 1


def test_a_party_refuses_a_roster_announcing_a_weak_degree():
    # from_proto is the same SessionParameters: a forged roster with k <= t fails to parse
    from protocols._generated import omnifc_pb2 as pb

    msg = pb.Parameters(kind="distance", mode="masked", dim=3, segments=1, noise_segments=1,
                        scale_bits=8, bound=1.0, chunk_bytes=4096, rows=1, mask_degree=1)
    with pytest.raises(ParameterError, match=WEAK.format(2, 1, 1)):
        SessionParameters.from_proto(msg)
    msg.mask_degree = 2
    assert SessionParameters.from_proto(msg).mask_degree == 2


def test_the_config_loader_refuses_a_weak_degree_by_its_key(tmp_path):
    from test_config import BASE, _write

    from protocols import load_session_config
    from protocols._config import ConfigParameters

    base = BASE.replace("enabled = true", "enabled = false")
    with pytest.raises(ParameterError, match=r"weak.toml': \[parameters\] " +
                       WEAK.format(2, 1, 1)):
        load_session_config(_write(tmp_path, base.replace(
            "primes = []", "primes = []\nmask_degree = 1"), "weak.toml"))
    with pytest.raises(ParameterError, match=r"^\[parameters\] " + WEAK.format(3, 2, 2)):
        ConfigParameters(noise_segments=2, mask_degree=2)
    assert ConfigParameters(noise_segments=2, mask_degree=3).mask_degree == 3
    assert load_session_config(_write(tmp_path, base.replace(
        "primes = []", "primes = []\nmask_degree = 2"), "ok.toml")).parameters.mask_degree == 2


def test_the_python_api_refuses_a_weak_degree_before_any_work(monkeypatch):
    import omnifc
    from omnifc import _secure

    def no_work(*args, **kwargs):
        raise AssertionError("the session work started")

    for name in ("normalize_parties", "make_plan", "clip_report", "_run"):
        monkeypatch.setattr(_secure, name, no_work)
    rows = [np.zeros((2, 3)) for _ in range(4)]
    with pytest.raises(ParameterError, match=WEAK.format(2, 1, 1)):
        omnifc.secure_distance_matrix(rows, bound=1.0, mask_degree=1)
    with pytest.raises(ParameterError, match=WEAK.format(3, 2, 2)):
        omnifc.secure_distance_matrix(rows, bound=1.0, noise_segments=2, mask_degree=2)
    with pytest.raises(AssertionError, match="the session work started"):  # k = 2: runs
        omnifc.secure_distance_matrix(rows, bound=1.0, mask_degree=2)
    from omnifc import _federated

    monkeypatch.setattr(_federated, "split_parties", no_work)
    with pytest.raises(ParameterError, match=WEAK.format(2, 1, 1)):
        omnifc.FederatedClustering(n_clusters=2, bound=1.0, mask_degree=1).fit(rows)


# --- at the bound: k = t + 1 withstands the coordinator with t colluders ----------------------
def d_tiles(run):
    """D mod p per tile, in the uploads' layout (what the coordinator learns anyway)."""
    d = run.outcome.integer.astype(object)
    n = d.shape[0]
    any_party = next(iter(run.uploads.values()))
    return {(k, tile_index): np.array([d[i, j] % run.primes[k] for i in range(a, b)
                                       for j in range(a, n)], dtype=object)
            for (k, tile_index), (a, b, _) in any_party.items()}


@pytest.mark.parametrize("segments, noise_segments", [(1, 1), (2, 1), (1, 2)])
def test_degree_t_plus_1_leaves_every_t_coalition_only_d(segments, noise_segments):
    t = noise_segments
    m = 2 * segments + 2 * t  # one more than |B| = 2l + 2t - 1, so B is a real choice
    run = r0_session(m, segments, t, degree=t + 1, seed=10 * segments + t)
    n = len(run.responders)
    edges = mask_edges(n, t + 1)
    everything = d_tiles(run)
    for coalition in itertools.combinations(range(n), t):
        colluders = [run.responders[i] for i in coalition]
        honest = [r for r in run.responders if r not in colluders]
        assert graph_connected(n, edges, set(coalition)), coalition
        for size in range(1, len(honest)):
            for part in itertools.combinations(honest, size):
                got = attack(run, colluders, list(part))
                assert matches(got, truth(run, list(part))) <= 2, (colluders, part)
        # all honest parties together: D minus the colluders' own evaluations, no more
        got = attack(run, colluders, honest)
        own = truth(run, colluders)
        assert same(got, truth(run, honest))
        assert same(got, {key: (everything[key] - own[key]) % run.primes[key[0]]
                          for key in got})


def _components(n, edges, removed):
    left, out = [v for v in range(n) if v not in removed], []
    while left:
        part, stack = {left[0]}, [left[0]]
        while stack:
            v = stack.pop()
            for a, b in edges:
                for x, y in ((a, b), (b, a)):
                    if x == v and y not in removed and y not in part:
                        part.add(y)
                        stack.append(y)
        out.append(sorted(part))
        left = [v for v in left if v not in part]
    return out


@pytest.mark.parametrize("segments, noise_segments", [(2, 1), (1, 2)])
def test_one_step_past_the_bound_t_plus_1_separating_colluders_get_partial_sums(
        segments, noise_segments):
    # The documented collusion threshold of H_{k,|B|} is k - 1: k = t + 1 colluders that
    # separate the graph read the sum over each component of the rest.
    t = noise_segments
    run = r0_session(2 * segments + 2 * t, segments, t, degree=t + 1, seed=7 + t)
    n = len(run.responders)
    edges = mask_edges(n, t + 1)
    cuts = [c for c in itertools.combinations(range(n), t + 1)
            if not graph_connected(n, edges, set(c))]
    assert cuts  # the bound is tight
    for cut in cuts:
        colluders = [run.responders[i] for i in cut]
        parts = _components(n, edges, set(cut))
        assert len(parts) >= 2
        for part in parts:
            names = [run.responders[i] for i in part]
            assert same(attack(run, colluders, names), truth(run, names)), (cut, part)


def test_audit_check_5_still_reads_a_weak_config_and_fails_it(tmp_path):
    # The config no longer loads; check 5 reads it leniently, reports the refusal and the
    # collusion threshold of its mask graph.
    from test_config import BASE, _write

    from omnifc.audit import AuditParameters
    from omnifc.audit._transport import check_transport

    text = BASE.replace("enabled = true", "enabled = false").replace(
        "primes = []", "primes = []\nmask_degree = 1")
    text += f'\n[[parties]]\nname = "x"\nidentity_public_key = "{"dd" * 32}"\n'
    check = check_transport(AuditParameters.from_config(_write(tmp_path, text)))
    assert check.failed
    reasons = " ".join(check.reasons)
    assert "the session config does not load" in reasons
    assert "[parameters] mask_degree must be 0 (every pair) or at least t + 1 = 2" in reasons
    assert "mask_degree = 1 withstands only 0 colluding parties, fewer than t = 1" in reasons
    [row] = [r for r in check.evidence["items"] if r[0] == "mask graph"]
    assert row[3] == "FAIL" and check.evidence["mask_collusion_threshold"] == 0
    legal = check_transport(AuditParameters.from_config(_write(
        tmp_path, text.replace("mask_degree = 1", "mask_degree = 2"), "legal.toml")))
    [row] = [r for r in legal.evidence["items"] if r[0] == "mask graph"]
    assert row[3] == "ok" and "up to 1 parties" in row[1]
    assert not any("does not load" in r for r in legal.reasons)
