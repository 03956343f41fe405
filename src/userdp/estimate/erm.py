"""Weighted empirical risk minimisation with user-level DP (Epasto et al., NeurIPS 2020, Sec. 4).

:class:`WeightedERM` runs Algorithm 2 as full-batch noisy projected gradient descent on the
user-weighted loss (smooth weights or sample limiting); its noise plan and the "Tradeoff
weights" choice of ``h`` are in :mod:`userdp.estimate._erm_plan`, and the argument for both
(and an erratum of Sec. 4) in docs/estimate.md and docs/papers.md.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import dp_accounting
import numpy as np
from scipy import special

from userdp._params import ParamsMixin
from userdp._validation import MAX_ITERATIONS
from userdp.estimate._common import (
    EPSILON,
    PUBLIC_USER_SIZES,
    SEED,
    SELECTION_SHARE,
    Ledger,
    budget_text,
    check_accountant,
    laplace_event,
    require_users,
)
from userdp.estimate._erm_plan import _noise_plan, _tradeoff_h
from userdp.estimate._gradient import noisy_projected_gd, weighted_gradient_sum
from userdp.estimate._scoring import accuracy_score, r2_score, sklearn_tags
from userdp.estimate.weighting import (
    check_features,
    effective_count,
    factorize_users,
    limit_mask,
    private_size_histogram,
    smooth_weights,
)
from userdp.exceptions import DataError, InvalidParameterError, NotFittedError
from userdp.privacy.accountant import PrivacyAccountant
from userdp.privacy.noise import NoiseSource

__all__ = ["LOSSES", "WEIGHTINGS", "WeightedERM", "weighted_gradient_sum"]

LOSSES = ("logistic", "squared")
WEIGHTINGS = ("smooth", "limit")
_CALLER = "WeightedERM"


#: The declared label sets of the logistic loss (public schema).
CLASSES = ((0, 1), (-1, 1))


def _check_classes(value: object, name: str, caller: str) -> None:
    """Rule for ``classes``: one of :data:`CLASSES`."""
    if value not in CLASSES:
        raise InvalidParameterError(
            f"The {name!r} parameter of {caller} must be one of "
            f"{', '.join(map(repr, CLASSES))}. Got {value!r} instead."
        )


class WeightedERM(ParamsMixin):
    """Linear model trained by weighted ERM with user-level differential privacy (Alg. 2).

    Minimises ``sum_i c_i l(theta; x_i, y_i)`` over ``||theta||_2 <= radius`` by full-batch
    noisy projected gradient descent on the user-level loss of Algorithm 2, with smooth weights
    ``c_i = min(h, s_l) / (s_l n_h)`` (Lemma 3) or the sample-limiting baseline (Sec. 3.2).

    Parameters
    ----------
    loss : {"logistic", "squared"}, default="logistic"
        ``log(1 + exp(-y theta.x))`` with labels in ``classes``, or ``(theta.x - y)^2 / 2``.
    classes : (0, 1) or (-1, 1), default=(0, 1)
        The logistic loss's label set, declared (public schema): ``classes_`` is this, never
        read from the data, so a user holding a label nobody else has cannot change it.
        Labels outside it are refused; the second class is the positive one.
    epsilon : float
        Total epsilon, in (0, inf).
    delta : float
        Total delta, in (0, 1); all of it goes to the Gaussian releases.
    lipschitz : float, default=1.0
        L: every per-example gradient is clipped to this l2 norm, which makes the loss
        L-Lipschitz in effect (Sec. 4's assumption) for any features and labels. Clipping, not
        a label or feature range, is what bounds the sensitivity, so labels of the squared loss
        need no declared range.
    radius : float, default=10.0
        B: the domain ``||theta||_2 <= B`` (intercept included); every iterate is projected.
    weighting : {"smooth", "limit"}, default="smooth"
        ``"smooth"``: weights ``min(h, s_l)/s_l`` per record; ``"limit"``: sample limiting,
        ``floor(h)`` random records per user with unit weights.
    h : float or None, default=None
        Contribution bound (each user's weights sum to at most h; ``>= 1`` for ``"limit"``).
        None chooses it by "Tradeoff weights" (docs/estimate.md, "Weighted ERM") from the user
        sizes: the public ones, or a private size histogram that spends ``selection_share`` of
        epsilon.
    steps : int, default=100
        T, the number of noisy gradient releases.
    learning_rate : float or None, default=None
        eta. None uses ``radius / sqrt(T (L^2 + d sigma_hat^2))`` with ``sigma_hat`` the
        per-coordinate noise of the normalised gradient: the step minimising the projected
        stochastic subgradient bound ``B^2/(2 eta T) + eta G^2 / 2`` of the averaged iterate,
        ``G^2 = L^2 + d sigma_hat^2`` bounding ``E||g||^2``. The model is the average of the
        last half of the iterates.
    fit_intercept : bool, default=True
        Append a constant feature 1 (its coefficient is ``intercept_``).
    public_user_sizes : bool, default=False
        The paper's setting: the partition S_l (which records belong to which user) is public
        and neighbouring datasets replace the values of one user's records. Then sizes and n_h
        are used exactly, and the gradient sensitivity doubles to ``2 L h``.
    selection_share : float, default=0.1
        Share of epsilon spent on the private size histogram when ``h`` is None and sizes are
        private; in (0, 1).
    seed : int or None, default=None
        None draws noise from OS entropy. An integer is for tests and reproducible benchmarks
        only: a model trained with a known seed offers no privacy.
        A seed may be used once per accountant: a second release with a seed its
        ``accountant`` already holds is refused before any data is read (the same seed
        draws the same noise, and differencing the two releases would cancel it).

    Attributes
    ----------
    coef_ : ndarray, shape (n_features,)
    intercept_ : float
        0.0 when ``fit_intercept`` is False.
    classes_ : ndarray, shape (2,)
        The declared ``classes`` (logistic loss).
    h_ : float
        The contribution bound used (released; chosen from public or privatized sizes).
    noise_multiplier_ : float
        z: per-step noise standard deviation over the per-step sensitivity.
    sensitivity_ : float
        l2 sensitivity of one step's gradient sum: ``L h`` (``2 L h`` with public sizes).
    noise_scale_ : float
        Per-step noise standard deviation, ``noise_multiplier_ * sensitivity_``.
    count_ : float
        The n_h the gradients are divided by: released with Gaussian noise (private sizes) or
        exact (public sizes).
    learning_rate_ : float
    budget_ : PrivacyBudget
        ``(epsilon, delta)`` spent, from the fit's own :class:`~userdp.privacy.PrivacyAccountant`
        (the Gaussians converted at ``delta``).
    dp_event_ : dp_accounting.ComposedDpEvent
        Everything released: size histogram (Laplace), count (Gaussian), ``steps`` gradients;
        what ``fit(..., accountant=)`` charges.
    epsilon_ : float
        ``budget_.epsilon`` (a property).
    n_features_in_ : int

    Privacy
    -------
    Neighbours add or remove one user with all their records (user sizes are private), unless
    ``public_user_sizes=True`` (replace the values of one user's records; partition public).
    Each user's weights sum to at most h, so a step's clipped gradient sum has l2 sensitivity
    ``L h`` (``2 L h`` under replacement; :func:`weighted_gradient_sum`) and gets
    ``N(0, (z L h)^2 I)``; n_h has sensitivity h and gets ``N(0, (z_n h)^2)``; the size
    histogram (only when h is chosen from private sizes) is a Laplace release of l1
    sensitivity 1. The Gaussians compose exactly; the histogram's epsilon adds to theirs
    (basic composition). Public: the feature dimension, epsilon, delta, L, B, T, eta, h when
    given, and the label encoding.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(2000, 3))
    >>> y = (X @ [1.0, -1.0, 0.5] > 0).astype(int)
    >>> users = rng.integers(0, 400, 2000)
    >>> model = WeightedERM(epsilon=1.0, delta=1e-6, seed=0).fit(X, y, users)
    >>> round(model.budget_.epsilon, 6), model.budget_.delta
    (1.0, 1e-06)
    >>> bool(np.mean(model.predict(X) == y) > 0.8)
    True
    """

    _parameter_constraints: ClassVar[dict[str, dict[str, Any]]] = {
        "loss": {"choices": LOSSES, "help": "The loss: logistic or squared."},
        "classes": {"check": _check_classes, "cli": False},
        "epsilon": EPSILON,
        "delta": {
            "low": 0.0,
            "high": 1.0,
            "low_open": True,
            "high_open": True,
            "metavar": "D",
            "help": "Total delta, in (0, 1).",
        },
        "lipschitz": {
            "low": 0.0,
            "low_open": True,
            "high": math.inf,
            "high_open": True,
            "help": "Per-example gradient clipping norm L.",
        },
        "radius": {
            "low": 0.0,
            "low_open": True,
            "high": math.inf,
            "high_open": True,
            "help": "Radius B of the ball the coefficients are projected onto.",
        },
        "weighting": {"choices": WEIGHTINGS, "help": "smooth weights or sample limiting."},
        "h": {
            "low": 0.0,
            "low_open": True,
            "high": math.inf,
            "high_open": True,
            "none": True,
            "help": "Contribution bound h (>= 1 with weighting='limit'); default: chosen.",
        },
        "steps": {
            "int": True,
            "low": 1,
            "high": MAX_ITERATIONS,
            "help": "Number of noisy gradient steps T.",
        },
        "learning_rate": {
            "low": 0.0,
            "low_open": True,
            "high": math.inf,
            "high_open": True,
            "none": True,
            "help": "Step size eta; default: from the noise.",
        },
        "fit_intercept": {"bool": True, "help": "Fit an intercept."},
        "public_user_sizes": PUBLIC_USER_SIZES,
        "selection_share": SELECTION_SHARE,
        "seed": SEED,
    }

    def __init__(
        self,
        *,
        loss: str = "logistic",
        classes: tuple[int, int] = (0, 1),
        epsilon: float,
        delta: float,
        lipschitz: float = 1.0,
        radius: float = 10.0,
        weighting: str = "smooth",
        h: float | None = None,
        steps: int = 100,
        learning_rate: float | None = None,
        fit_intercept: bool = True,
        public_user_sizes: bool = False,
        selection_share: float = 0.1,
        seed: int | None = None,
    ) -> None:
        self.loss = loss
        self.classes = classes
        self.epsilon = epsilon
        self.delta = delta
        self.lipschitz = lipschitz
        self.radius = radius
        self.weighting = weighting
        self.h = h
        self.steps = steps
        self.learning_rate = learning_rate
        self.fit_intercept = fit_intercept
        self.public_user_sizes = public_user_sizes
        self.selection_share = selection_share
        self.seed = seed

    # -- validation -------------------------------------------------------------------------
    def _validate_params(self) -> None:
        """The declared table, then the one rule across two parameters."""
        super()._validate_params()
        if self.weighting == "limit" and self.h is not None and self.h < 1:
            raise InvalidParameterError(
                f"The 'h' parameter of {_CALLER} must be a float in the range [1, inf) with "
                f"weighting='limit'. Got {self.h!r} instead."
            )

    def _plan(self) -> tuple[float, float, float | None, list[dp_accounting.DpEvent]]:
        """``(histogram epsilon, z, z_n, Gaussian events)`` from the parameters alone: the size
        histogram (private sizes, ``h`` not given; 0 otherwise), then the count's and the
        ``steps`` gradients' Gaussian events."""
        public = bool(self.public_user_sizes)
        histogram = self.selection_share * self.epsilon if self.h is None and not public else 0.0
        prior = [laplace_event(histogram)] if histogram else []
        z, z_n, events = _noise_plan(self.epsilon, self.delta, self.steps, prior, not public)
        return histogram, z, z_n, events

    def _validate_data(
        self, X: object, y: object, users: object
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``(X, labels, users, usable)``: ``usable`` marks the records whose features and
        label are finite (and, for the logistic loss, a declared class). The others are
        records without a usable value (the non-finite policy, docs/guarantees.md): left out,
        or, with public user sizes, kept at weight 0; never an error that one user's record
        could trigger."""
        x = check_features(X, f"{_CALLER}.fit", finite=False)
        labels = _as_float(y, "y")
        users = np.asarray(users)
        if users.ndim != 1:
            raise DataError(f"{_CALLER}.fit: 'users' must be 1-D; got shape {users.shape}.")
        if not (x.shape[0] == labels.size == users.size):
            raise DataError(
                f"{_CALLER}.fit: X, y and users must have the same length; got "
                f"{x.shape[0]}, {labels.size} and {users.size}."
            )
        if x.shape[0] == 0:
            raise DataError(f"{_CALLER}.fit: at least one record is required; got 0.")
        if users.dtype.kind == "f" and not np.all(np.isfinite(users)):
            raise DataError(f"{_CALLER}.fit: 'users' contains NaN or infinite ids.")
        usable = np.isfinite(x).all(axis=1) & np.isfinite(labels)
        if self.loss == "logistic":
            neg, pos = (float(c) for c in self.classes)
            usable &= np.isin(labels, (neg, pos))
            labels = np.where(usable, labels, pos)
            labels = self._encode_labels(labels)
        x = np.where(usable[:, None], x, 0.0)
        labels = np.where(usable, labels, 0.0 if self.loss == "squared" else labels)
        return x, labels, users, usable

    def _encode_labels(self, labels: np.ndarray) -> np.ndarray:
        """Map labels in the declared ``classes`` to {-1, +1}; ``classes_`` is the declaration."""
        neg, pos = (float(c) for c in self.classes)
        outside = ~np.isin(labels, (neg, pos))
        if outside.any():
            raise DataError(
                f"{_CALLER}.fit: loss='logistic' needs labels in classes={tuple(self.classes)!r}; "
                f"{int(outside.sum())} row(s) are not (first at row {int(np.argmax(outside))}). "
                "Declare classes=(-1, 1) for labels in {-1, +1}."
            )
        self.classes_ = np.array(self.classes)
        return np.where(labels == pos, 1.0, -1.0)

    # -- fitting ----------------------------------------------------------------------------
    def fit(
        self,
        X: object,
        y: object,
        users: object = None,
        *,
        accountant: PrivacyAccountant | None = None,
    ) -> WeightedERM:
        """Train on features ``X`` (n, d), labels ``y`` (n,) and user ids ``users`` (n,).

        ``accountant``, if given, is charged with ``dp_event_``; if it holds a total budget
        that this fit would exceed, :class:`BudgetExceededError` is raised before the data are
        read.

        Raises
        ------
        InvalidParameterError
            A constructor parameter is out of range (checked before the data are read).
        BudgetExceededError
            ``accountant`` cannot afford ``(epsilon, delta)`` (checked before the data are read).
        DataError
            ``users`` is missing, shapes or lengths disagree, values are not finite, no
            records, or logistic labels are not binary.
        """
        self._validate_params()
        require_users(users, f"{_CALLER}.fit")
        if accountant is not None:
            check_accountant(accountant, "accountant", f"{_CALLER}.fit")
        eps_hist, z, z_n, gaussians = self._plan()
        histogram_event = [laplace_event(eps_hist)] if eps_hist else []
        # refuses before any work (a budget it cannot afford, a seed it already holds)
        ledger = Ledger(
            accountant, [*histogram_event, *gaussians], seed=self.seed, caller=f"{_CALLER}.fit"
        )
        x, labels, users, usable = self._validate_data(X, y, users)
        if not self.public_user_sizes:  # as if those records had never been given
            x, labels, users = x[usable], labels[usable], users[usable]
            usable = usable[usable]
            if x.shape[0] == 0:
                raise DataError(f"{_CALLER}.fit: at least one usable record is required; got 0.")
        try:
            codes, sizes = factorize_users(users)
        except TypeError as err:  # e.g. a mix of strings and None
            raise DataError(f"{_CALLER}.fit: 'users' ids must be sortable ({err}).") from err
        noise = NoiseSource(self.seed)
        public = bool(self.public_user_sizes)
        dim = x.shape[1] + int(self.fit_intercept)
        if eps_hist:
            histogram = private_size_histogram(sizes, eps_hist, noise, ledger.local)
            size_values, size_counts = histogram.representatives, histogram.counts
        else:
            size_values, size_counts = sizes, None
        factor = 2.0 if public else 1.0  # replacement doubles the l2 sensitivity
        if self.h is None:
            h = _tradeoff_h(
                size_values,
                size_counts,
                self.weighting,
                dim=dim,
                z_total=factor * z / math.sqrt(self.steps),
            )
        else:
            h = float(math.floor(self.h)) if self.weighting == "limit" else float(self.h)
        x, labels, w = self._record_weights(x, labels, codes, sizes, h, noise, usable)
        count = self._count(sizes, h, z_n, noise)
        sensitivity = factor * self.lipschitz * h
        sigma = z * sensitivity
        lr = self.learning_rate
        if lr is None:
            per_coordinate = sigma / count
            lr = self.radius / math.sqrt(self.steps * (self.lipschitz**2 + dim * per_coordinate**2))
        theta = noisy_projected_gd(
            x,
            labels,
            w,
            loss=self.loss,
            lipschitz=self.lipschitz,
            fit_intercept=self.fit_intercept,
            radius=self.radius,
            steps=self.steps,
            learning_rate=lr,
            sigma=sigma,
            count=count,
            noise=noise,
            sensitivity=sensitivity,
            neighbours="replace-values" if public else "add-remove",
        )
        for event in gaussians:
            ledger.local.compose(event)
        self.coef_ = theta[: x.shape[1]].copy()
        self.intercept_ = float(theta[-1]) if self.fit_intercept else 0.0
        self.n_features_in_ = x.shape[1]
        self.h_ = h
        self.noise_multiplier_ = z
        self.sensitivity_ = sensitivity
        self.noise_scale_ = sigma
        self.count_ = count
        self.learning_rate_ = float(lr)
        self.budget_, self.dp_event_ = ledger.close(self.delta)
        return self

    @property
    def epsilon_(self) -> float:
        """``budget_.epsilon``: the epsilon spent at ``delta`` (derived from ``budget_``)."""
        self._check_fitted()
        return self.budget_.epsilon

    def summary(self) -> str:
        """One line of released facts: loss, weighting, h, steps, noise and budget."""
        self._check_fitted()
        return (
            f"{self.loss} weighted ERM ({self.weighting}, h={self.h_:.4g}), {self.steps} steps, "
            f"noise multiplier {self.noise_multiplier_:.3g}, {budget_text(self.budget_)}"
        )

    def _record_weights(
        self,
        x: np.ndarray,
        labels: np.ndarray,
        codes: np.ndarray,
        sizes: np.ndarray,
        h: float,
        noise: NoiseSource,
        usable: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Unnormalised weights (each user's sum <= h; an unusable record's is 0); sample
        limiting keeps a subset."""
        if self.weighting == "smooth":
            # Lemma 3 up to 1/n_h: w_i = min(h, s_l) / s_l.
            return x, labels, smooth_weights(codes, sizes, h) * usable
        keep = limit_mask(codes, sizes, h, noise)  # Sec. 3.2: floor(h) records per user
        return x[keep], labels[keep], usable[keep].astype(np.float64)

    def _count(self, sizes: np.ndarray, h: float, z_n: float | None, noise: NoiseSource) -> float:
        """n_h, exact from public sizes or released as ``n_h + N(0, (z_n h)^2)`` (clipped at 1)."""
        n_h = float(effective_count(sizes, h))
        if z_n is None:
            return n_h
        return max(1.0, float(noise.add_gaussian(n_h, z_n * h, statistic="erm.count", l2=h)))

    # -- prediction -------------------------------------------------------------------------
    def _check_fitted(self) -> None:
        if not hasattr(self, "coef_"):
            raise NotFittedError(f"This {_CALLER} is not fitted yet; call fit first.")

    def decision_function(self, X: object) -> np.ndarray:
        """``X @ coef_ + intercept_``, shape (n,)."""
        self._check_fitted()
        x = check_features(X, f"{_CALLER}.decision_function")
        if x.shape[1] != self.n_features_in_:
            raise DataError(
                f"{_CALLER}.decision_function: X has {x.shape[1]} features; the model was "
                f"fitted on {self.n_features_in_}."
            )
        return x @ self.coef_ + self.intercept_

    def predict_proba(self, X: object) -> np.ndarray:
        """Class probabilities (columns in ``classes_`` order), logistic loss only."""
        self._check_fitted()
        if self.loss != "logistic":
            raise InvalidParameterError(
                f"{_CALLER}.predict_proba needs loss='logistic'; this model has loss={self.loss!r}."
            )
        p = special.expit(self.decision_function(X))
        return np.column_stack([1.0 - p, p])

    def predict(self, X: object) -> np.ndarray:
        """Class labels (logistic, in ``classes_``) or predicted values (squared)."""
        scores = self.decision_function(X)
        if self.loss == "logistic":
            return self.classes_[(scores > 0).astype(np.int64)]
        return scores

    @property
    def _estimator_type(self) -> str:  # scikit-learn < 1.6
        return "classifier" if self.loss == "logistic" else "regressor"

    def __sklearn_tags__(self) -> object:
        """scikit-learn >= 1.6: a classifier (logistic loss) or a regressor (squared)."""
        return sklearn_tags(self._estimator_type)

    def score(self, X: object, y: object, sample_weight: object = None) -> float:
        """Accuracy (logistic loss) or R^2 (squared loss) of :meth:`predict` on ``X``, ``y``,
        as scikit-learn's ``ClassifierMixin.score`` / ``RegressorMixin.score``, so
        ``cross_val_score`` and ``Pipeline.score`` work.

        Not a private release: it is computed exactly on the ``X`` and ``y`` given (a held-out
        set of the caller's), like any evaluation.
        """
        predicted = self.predict(X)
        if self.loss == "logistic":
            return accuracy_score(y, predicted, sample_weight, f"{_CALLER}.score")
        return r2_score(y, predicted, sample_weight, f"{_CALLER}.score")


def _as_float(values: object, name: str) -> np.ndarray:
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim != 1:
        raise DataError(f"{_CALLER}.fit: {name!r} must be 1-D; got shape {arr.shape}.")
    return arr  # non-finite values: the caller's policy (``_validate_data``)
