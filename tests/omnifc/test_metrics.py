"""Kappa (Hungarian-matched Cohen's kappa), ARI and NMI against hand-computed values."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

import omnifc
from omnifc.experiments import align_labels


def test_kappa_hand_computed_two_classes():
    # aligned = [0,0,1,1,1,1]: p_o = 5/6, p_e = 3/6*2/6 + 3/6*4/6 = 1/2 -> (5/6-1/2)/(1/2)
    assert omnifc.kappa([0, 0, 0, 1, 1, 1], [5, 5, 7, 7, 7, 7]) == pytest.approx(2 / 3)


def test_kappa_hand_computed_three_classes():
    truth = [0, 0, 0, 0, 1, 1, 1, 2, 2, 2]
    pred = [2, 2, 2, 1, 0, 0, 0, 1, 1, 1]   # 2->0, 0->1, 1->2; one error
    # aligned = [0,0,0,2,1,1,1,2,2,2]; p_o = 9/10
    # p_e = (4*3 + 3*3 + 3*4) / 100 = 33/100
    expected = (0.9 - 0.33) / (1 - 0.33)
    assert omnifc.kappa(truth, pred) == pytest.approx(expected)
    assert align_labels(truth, pred).tolist() == [0, 0, 0, 2, 1, 1, 1, 2, 2, 2]


def test_kappa_perfect_and_chance():
    assert omnifc.kappa([0, 1, 2, 0, 1, 2], [4, 8, 6, 4, 8, 6]) == 1.0
    assert omnifc.kappa([0, 1, 0, 1], [0, 0, 0, 0]) == 0.0
    # overlap matrix [[1, 1], [1, 1]]: p_o = p_e = 1/2
    assert omnifc.kappa([0, 0, 1, 1], [0, 1, 0, 1]) == 0.0


def test_kappa_more_clusters_than_classes_pads():
    truth = [0, 0, 0, 1, 1, 1]
    pred = [0, 0, 1, 2, 2, 2]            # cluster 1 is unmatched -> a fresh label (2)
    assert align_labels(truth, pred).tolist() == [0, 0, 2, 1, 1, 1]
    # labels {0,1,2}: p_o = 5/6; p_e = (3*2 + 3*3 + 0*1) / 36 = 15/36
    expected = (5 / 6 - 15 / 36) / (1 - 15 / 36)
    assert omnifc.kappa(truth, pred) == pytest.approx(expected)


def test_kappa_fewer_clusters_than_classes_pads():
    truth = [0, 0, 1, 1, 2, 2]
    pred = [0, 0, 0, 0, 1, 1]            # 0->0 or 0->1 (tie, overlap 2), 1->2
    aligned = align_labels(truth, pred)
    assert aligned[4:].tolist() == [2, 2]
    # p_o = 4/6; p_e = (2*4 + 2*0 + 2*2) / 36 = 12/36
    assert omnifc.kappa(truth, pred) == pytest.approx((4 / 6 - 1 / 3) / (1 - 1 / 3))


def test_sdafc_matching_differs_only_when_counts_differ():
    truth = [0] * 6 + [1] * 2
    pred = [0] * 3 + [1] * 3 + [2] * 2
    # overlap: {0->0 (3), 2->1 (2)} ; SDA-FC cost |A|+|B|-2|AnB| is the same here
    assert omnifc.kappa(truth, pred) == omnifc.kappa(truth, pred, matching="sdafc")
    truth = [0, 0, 0, 0, 1, 1, 1, 1]
    pred = [0, 0, 0, 1, 1, 1, 2, 2]
    # SDA-FC prefers leaving the size-3 cluster unmatched: cost(0->0)=3+4-6=1,
    # cost(1->1)=3+4-2=5, cost(2->1)=2+4-4=2 -> matching {0->0, 2->1}, cluster 1 padded
    assert align_labels(truth, pred, matching="sdafc").tolist() == [0, 0, 0, 2, 2, 2, 1, 1]
    # overlap: 0->0 (3) + 1->1 (2) = 5 ties with 0->0 + 2->1 (2); either is optimal
    with pytest.raises(omnifc.ParameterError, match="matching"):
        omnifc.kappa(truth, pred, matching="greedy")


def test_kappa_invariant_to_label_permutation():
    rng = np.random.Generator(np.random.PCG64(7))
    truth = rng.integers(0, 4, size=60)
    pred = np.where(rng.random(60) < 0.7, truth, rng.integers(0, 4, size=60))
    reference = omnifc.kappa(truth, pred)
    for perm in itertools.permutations(range(4)):
        assert omnifc.kappa(truth, np.asarray(perm)[pred]) == pytest.approx(reference, abs=1e-15)
        assert omnifc.kappa(np.asarray(perm)[truth], pred) == pytest.approx(reference,
                                                                           abs=1e-15)


def test_ari_and_nmi_hand_computed():
    truth = [0, 0, 1, 1]
    pred = [0, 0, 0, 1]
    # contingency [[2,0],[1,1]]: sum C(n_ij,2)=1, rows C: 1+1=2, cols C(3,2)+0=3, C(4,2)=6
    # expected = 2*3/6 = 1; max = (2+3)/2 = 2.5; ARI = (1-1)/(2.5-1) = 0
    assert omnifc.adjusted_rand(truth, pred) == pytest.approx(0.0)
    # MI = 1/2 ln(2*4/(2*3)) + 1/4 ln(1*4/(2*3)) + 1/4 ln(1*4/(2*1))
    mi = 0.5 * math.log(4 / 3) + 0.25 * math.log(2 / 3) + 0.25 * math.log(2)
    h_true = math.log(2)
    h_pred = -(0.75 * math.log(0.75) + 0.25 * math.log(0.25))
    assert omnifc.nmi(truth, pred) == pytest.approx(mi / ((h_true + h_pred) / 2))
    assert omnifc.adjusted_rand([0, 0, 1], [3, 3, 9]) == 1.0
    assert omnifc.nmi([0, 0, 1], [3, 3, 9]) == pytest.approx(1.0)


def test_scores_bundle_and_bad_input():
    scores = omnifc.clustering_scores([0, 0, 1, 1], [1, 1, 0, 0])
    assert scores == {"kappa": 1.0, "nmi": pytest.approx(1.0), "ari": 1.0}
    with pytest.raises(omnifc.InputError, match="same length"):
        omnifc.kappa([0, 1], [0, 1, 1])
    with pytest.raises(omnifc.InputError, match="empty"):
        omnifc.kappa([], [])
    with pytest.raises(omnifc.InputError, match="1-D"):
        omnifc.nmi([[0, 1]], [[0, 1]])


def test_dbscan_noise_counts_as_a_cluster():
    # noise (-1) becomes its own cluster before matching
    assert omnifc.kappa([0, 0, 1, 1, 1], [0, 0, 1, 1, -1]) < 1.0
    assert align_labels([0, 0, 1, 1, 1], [0, 0, 1, 1, -1]).tolist()[:4] == [0, 0, 1, 1]
