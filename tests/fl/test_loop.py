"""The federated loop, the numpy models and the shifted data sets (omnifc.fl)."""

import numpy as np
import pytest

from finite_field import InputError, ParameterError
from omnifc import fl


def _numeric_gradient(model, params, x, y, step=1e-6):
    grad = np.zeros_like(params)
    for k in range(params.size):
        e = np.zeros_like(params)
        e[k] = step
        grad[k] = (model.loss(params + e, x, y) - model.loss(params - e, x, y)) / (2 * step)
    return grad


@pytest.mark.parametrize("model", [fl.SoftmaxRegression(5, 3), fl.MLP(5, 4, 3)])
def test_gradient_matches_finite_differences(model):
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(12, 5)), rng.integers(0, 3, 12)
    params = model.init(seed=1) + 0.1 * rng.normal(size=model.n_params)
    loss, grad = model.loss_and_gradient(params, x, y)
    assert loss == pytest.approx(model.loss(params, x, y), rel=1e-12)
    np.testing.assert_allclose(grad, _numeric_gradient(model, params, x, y), atol=1e-7)


def test_cross_entropy_against_direct_formula():
    model = fl.SoftmaxRegression(2, 2)
    params = np.array([1.0, -1.0, 0.5, 2.0, 0.1, -0.1])   # W = [[1,-1],[.5,2]], b = [.1,-.1]
    x, y = np.array([[1.0, 0.0], [0.0, 1.0]]), np.array([0, 1])
    z = np.array([[1.1, -1.1], [0.6, 1.9]])
    expected = -np.mean([z[0, 0] - np.log(np.exp(z[0]).sum()), z[1, 1] - np.log(np.exp(z[1]).sum())])
    assert model.loss(params, x, y) == pytest.approx(expected, rel=1e-14)


def test_fedavg_is_the_size_weighted_mean():
    out = fl.fedavg([np.array([0.0, 3.0]), np.array([6.0, 0.0])], [1, 2])
    assert out.tolist() == [4.0, 1.0]
    with pytest.raises(InputError):
        fl.fedavg([np.zeros(2)], [0])


def test_data_sets_are_seeded_and_planted():
    a = fl.make_federated("digits", shift="concept", n_groups=3, clients_per_group=2, seed=4)
    b = fl.make_federated("digits", shift="concept", n_groups=3, clients_per_group=2, seed=4)
    assert all(np.array_equal(p.x_train, q.x_train) and np.array_equal(p.y_train, q.y_train)
               for p, q in zip(a.clients, b.clients))
    assert a.groups.tolist() == [0, 0, 1, 1, 2, 2] and a.new_groups.tolist() == [0, 0, 1, 1, 2, 2]
    # concept shift: same kind of images, labels relabelled per group -> an oracle that
    # knows the permutation sees identical (x, y) statistics; the raw labels disagree
    pooled = [np.bincount(c.y_train, minlength=10) for c in a.clients]
    assert all(p.sum() == 150 for p in pooled)
    with pytest.raises(ParameterError):
        fl.make_federated("iris", shift="feature", feature_transform="rotate")
    with pytest.raises(ParameterError):
        fl.make_federated(shift="covariate")
    with pytest.raises(ParameterError):
        fl.make_federated(shift="label", label_floor=0.2)       # 10 classes x 0.2 > 1
    floored = fl.make_federated(shift="label", n_groups=2, clients_per_group=1,
                                client_concentration=1e9, train_samples=2000, seed=0,
                                label_floor=0.05)
    for c in floored.clients:
        assert np.bincount(c.y_train, minlength=10).min() >= 0.05 * 2000 * 0.6


def test_feature_rotation_group_zero_is_untouched_and_others_rotated():
    data = fl.make_federated("digits", shift="feature", n_groups=2, clients_per_group=1,
                             new_per_group=0, seed=0)
    pool_x, _ = fl.load_pool("digits")
    rows = {r.tobytes() for r in pool_x}
    assert all(r.tobytes() in rows for r in data.clients[0].x_train)
    rotated = data.clients[1].x_train.reshape(-1, 8, 8)[:, ::-1, ::-1].reshape(-1, 64)
    assert np.mean([r.tobytes() in rows for r in rotated]) > 0.9   # 180 deg = flip both axes


def test_label_shift_groups_have_different_priors():
    data = fl.make_federated("digits", shift="label", n_groups=2, clients_per_group=3,
                             train_samples=300, seed=0)
    hist = np.array([np.bincount(c.y_train, minlength=10) / 300 for c in data.clients])
    within = np.abs(hist[0] - hist[1]).sum()
    between = np.abs(hist[0] - hist[3]).sum()
    assert between > 2 * within


def test_local_training_uses_the_client_round_generator():
    data = fl.make_federated("digits", shift="none", clients_per_group=3, new_per_group=0,
                             train_samples=40, seed=1)
    model = fl.SoftmaxRegression(64, 10)
    train = fl.sgd_trainer(model, epochs=1, batch_size=10, learning_rate=0.5)
    start = model.init(seed=0)
    run = fl.run_federated(data.clients, [start], rounds=1, local_train=train, seed=7)
    updates = [fl.sgd(model, start, c.x_train, c.y_train, epochs=1, batch_size=10,
                      learning_rate=0.5, rng=np.random.default_rng([7, 0, i]))
               for i, c in enumerate(data.clients)]
    assert np.array_equal(run.models[0], fl.fedavg(updates, [40, 40, 40]))


def test_partial_participation_and_idle_models_keep_their_parameters():
    data = fl.make_federated("digits", shift="none", clients_per_group=6, new_per_group=0,
                             train_samples=30, seed=2)
    model = fl.SoftmaxRegression(64, 10)
    train = fl.sgd_trainer(model, epochs=1, batch_size=10, learning_rate=0.5)
    starts = [model.init(seed=0), model.init(seed=1), model.init(seed=2)]
    assignment = np.array([0, 0, 0, 1, 1, 1])
    run = fl.run_federated(data.clients, starts, rounds=3, local_train=train,
                           assign=fl.fixed_assign(assignment), participation=0.5, seed=3)
    assert all(r.participants.size == 3 for r in run.history)
    assert len({tuple(r.participants) for r in run.history}) > 1    # resampled each round
    assert np.array_equal(run.models[2], starts[2])                  # nobody assigned to 2
    # each client's update depends only on (seed, round, client): rerun equals
    again = fl.run_federated(data.clients, starts, rounds=3, local_train=train,
                             assign=fl.fixed_assign(assignment), participation=0.5, seed=3)
    assert all(np.array_equal(p, q) for p, q in zip(run.models, again.models))
    with pytest.raises(InputError):
        fl.run_federated(data.clients, starts, rounds=1, local_train=train,
                         assign=fl.fixed_assign(np.full(6, 3)))


def test_per_cluster_training_beats_fedavg_under_concept_shift():
    data = fl.make_federated("digits", shift="concept", n_groups=2, clients_per_group=3,
                             train_samples=120, test_samples=60, seed=0)
    model = fl.SoftmaxRegression(data.n_features, data.n_classes)
    train = fl.sgd_trainer(model, epochs=2, batch_size=20, learning_rate=0.5)
    evaluate = fl.accuracy_evaluator(model)
    plain = fl.run_federated(data.clients, [model.init(0)], rounds=8, local_train=train,
                             evaluate=evaluate, seed=0)
    oracle = fl.run_federated(data.clients, [model.init(0)] * 2, rounds=8, local_train=train,
                              assign=fl.fixed_assign(data.groups), evaluate=evaluate, seed=0)
    assert oracle.history[-1].metrics["accuracy"] > 0.85
    assert plain.history[-1].metrics["accuracy"] < 0.7
