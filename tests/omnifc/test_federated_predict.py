"""``FederatedClustering.predict`` as a scikit-learn user writes it: one array of new rows,
and a Pipeline with a scaler; methods without a rule for new rows say so and how."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

import omnifc

Q = 12


def blobs(n=30, seed=3):
    rng = np.random.Generator(np.random.PCG64(seed))
    centres = np.array([[0.0, 0, 0, 0], [5, 5, 0, 0], [0, 5, 5, 0]])
    y = np.arange(n) % 3
    return centres[y] + rng.normal(scale=0.3, size=(n, 4))


def quantize(x):
    return np.round(x * 2**Q) / 2**Q


def nearest_centroid(train, labels, new):
    """Plaintext oracle: nearest centroid of the quantized training rows."""
    q, qn = quantize(train), quantize(new)
    centres = np.array([q[labels == k].mean(axis=0) for k in np.unique(labels)])
    return ((qn[:, None, :] - centres[None]) ** 2).sum(-1).argmin(axis=1)


NEW = np.random.Generator(np.random.PCG64(5)).uniform(-1, 6, (9, 4))


@pytest.mark.timeout(120)
def test_predict_on_one_array_of_new_rows():
    x = blobs()
    model = omnifc.FederatedClustering(n_clusters=3, bound=10.0, random_state=0,
                                       scale_bits=Q).fit([x[:10], x[10:20], x[20:]])
    predicted = model.predict(NEW)                      # as with any scikit-learn model
    assert predicted.shape == (9,)
    assert predicted.tolist() == nearest_centroid(x, model.labels_, NEW).tolist()
    assert model.predict(NEW[:1]).tolist() == predicted[:1].tolist()   # a single row too
    with pytest.raises(ValueError, match="4 features"):
        model.predict(NEW[:, :3])


@pytest.mark.timeout(120)
def test_pipeline_with_a_scaler_fits_with_owners_and_predicts_new_rows():
    x = blobs()
    owners = np.array(["a", "b", "c"] * 10)
    pipe = make_pipeline(StandardScaler(),
                         omnifc.FederatedClustering(n_clusters=3, bound=10.0, random_state=0,
                                                    scale_bits=Q))
    pipe.fit(x, federatedclustering__owners=owners)
    model = pipe[-1]
    assert model.party_names_ == ["a", "b", "c"]
    new = blobs(9, seed=8)                              # inside the bound once scaled
    predicted = pipe.predict(new)
    scaler = StandardScaler().fit(x)
    expected = nearest_centroid(scaler.transform(x), model.labels_, scaler.transform(new))
    assert predicted.tolist() == expected.tolist()


def test_pipeline_fit_without_owners_says_how_to_pass_them():
    pipe = make_pipeline(StandardScaler(), omnifc.FederatedClustering(n_clusters=3,
                                                                      bound=10.0))
    with pytest.raises(omnifc.InputError, match=r"<step name>__owners="):
        pipe.fit(blobs())


def test_methods_without_predict_name_predict_and_the_call_that_works():
    model = omnifc.FederatedClustering(method="spectral", n_clusters=3, bound=10.0)
    assert not hasattr(model, "predict")
    with pytest.raises(AttributeError, match=r"predict exists for method='kmeans' or "
                                             r"'kmedoids'.*fit\(\[\*parties, new_rows\]\)"):
        model.predict(NEW)


def test_readme_documents_predict():
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    assert "model.predict(X_new)" in readme
    assert "__owners=" in readme                        # how a Pipeline passes owners
