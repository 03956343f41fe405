"""The estimators work with scikit-learn's tools: ``score`` (R^2 / accuracy), cross_val_score,
Pipeline.score, and the scikit-learn estimator checks that apply to them.

Checks that apply (run here): construction, cloning, repr, get/set_params, no attributes set
in ``__init__``, tags. Skipped, by design: every check that calls ``fit(X, y)`` without
``users`` (the privacy unit is a required argument: treating each row as its own user would
silently change the guarantee), the ``sample_weight`` checks (the private algorithm chooses
the weights; ``fit`` takes none), and the checks that expect a ``ValueError`` on NaN, sparse
or empty input (userdp raises its own ``DataError``, checked in its own tests).
"""

from __future__ import annotations

import numpy as np
import pytest

from userdp.estimate import LabelPrivateLinearRegression, WeightedERM

sklearn = pytest.importorskip("sklearn")
from sklearn.metrics import accuracy_score, r2_score  # noqa: E402
from sklearn.model_selection import cross_val_score  # noqa: E402
from sklearn.pipeline import Pipeline  # noqa: E402
from sklearn.preprocessing import StandardScaler  # noqa: E402
from sklearn.utils import estimator_checks  # noqa: E402

APPLICABLE = [
    "check_estimator_cloneable",
    "check_estimator_repr",
    "check_get_params_invariance",
    "check_set_params",
    "check_no_attributes_set_in_init",
    "check_parameters_default_constructible",
    "check_do_not_raise_errors_in_init_or_set_params",
    "check_mixin_order",
    "check_valid_tag_types",
    "check_estimator_tags_renamed",
]


def _estimators():
    return [
        LabelPrivateLinearRegression(epsilon=5.0, label_range=(-10.0, 10.0)),
        WeightedERM(loss="logistic", epsilon=5.0, delta=1e-6),
        WeightedERM(loss="squared", epsilon=5.0, delta=1e-6),
    ]


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(1200, 3))
    users = np.repeat(np.arange(300), 4)
    y = np.clip(X @ [1.0, -2.0, 0.5] + rng.normal(size=1200), -10, 10)
    return X, y, (X @ [1.0, -2.0, 0.5] > 0).astype(float), users


@pytest.mark.parametrize("check", APPLICABLE)
@pytest.mark.parametrize("estimator", _estimators(), ids=lambda e: f"{type(e).__name__}")
def test_scikit_learn_checks_that_apply(check, estimator):
    if not hasattr(estimator_checks, check):
        pytest.skip(f"{check} is not in scikit-learn {sklearn.__version__}")
    getattr(estimator_checks, check)(type(estimator).__name__, estimator)


def test_score_is_r2_and_accuracy(data):
    X, y, labels, users = data
    reg = LabelPrivateLinearRegression(epsilon=5.0, label_range=(-10.0, 10.0), seed=0)
    reg.fit(X, y, users)
    assert reg.score(X, y) == pytest.approx(r2_score(y, reg.predict(X)))
    w = np.linspace(0.5, 2.0, y.size)
    assert reg.score(X, y, w) == pytest.approx(r2_score(y, reg.predict(X), sample_weight=w))
    clf = WeightedERM(loss="logistic", epsilon=5.0, delta=1e-6, seed=0).fit(X, labels, users)
    assert clf.score(X, labels) == pytest.approx(accuracy_score(labels, clf.predict(X)))
    sq = WeightedERM(loss="squared", epsilon=5.0, delta=1e-6, seed=0).fit(X, y / 10, users)
    assert sq.score(X, y / 10) == pytest.approx(r2_score(y / 10, sq.predict(X)))


def test_cross_val_score_and_pipeline(data):
    X, y, labels, users = data
    reg = LabelPrivateLinearRegression(epsilon=5.0, label_range=(-10.0, 10.0), seed=0)
    scores = cross_val_score(reg, X, y, params={"users": users}, cv=3)
    assert scores.shape == (3,) and np.all(scores > 0.5)
    clf = WeightedERM(loss="logistic", epsilon=5.0, delta=1e-6, seed=0)
    assert np.all(cross_val_score(clf, X, labels, params={"users": users}, cv=3) > 0.8)
    pipe = Pipeline([("scale", StandardScaler()), ("model", reg)])
    pipe.fit(X, y, model__users=users)
    assert pipe.score(X, y) == pytest.approx(r2_score(y, pipe.predict(X)))
