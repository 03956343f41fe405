"""Linear regression with label privacy: generalized weighted averaging (GWA) and sample limiting.

Epasto, Mahdian, Mao, Mirrokni and Ren, NeurIPS 2020, Section 5:
:class:`LabelPrivateLinearRegression` releases ``C y`` plus Laplace noise for a public ``C``
with ``C X = I``, planned by :func:`solve_gwa` (:mod:`userdp.estimate._gwa`) or by sample limiting
(:mod:`userdp.estimate._sample_limit`); the releases are in :mod:`userdp.estimate._label_release`.
The sensitivity, Theorem 6's objective and the centring are argued in docs/estimate.md.
"""

from __future__ import annotations

import math
import numbers
from typing import Any, ClassVar, cast

import numpy as np

from userdp._params import ParamsMixin
from userdp._validation import check_choice
from userdp.estimate._common import (
    EPSILON,
    LAPLACE_95,
    SEED,
    SELECTION_SHARE,
    Ledger,
    bounds_rule,
    budget_text,
    check_accountant,
    laplace_event,
    require_users,
)
from userdp.estimate._gwa import (
    GWASolution,
    _as_codes,
    _as_labels,
    _check_rank,
    _nonnegative,
    _solve_codes,
    clip_labels,
    gwa_matrix,
    gwa_objective,
    gwa_sensitivity,
    solve_gwa,
)
from userdp.estimate._label_release import (
    GWA_LINEAR_REGRESSION_PARAMETERS,
    LabelPrivateRegressionResult,
    gwa_linear_regression,
    private_noise_variance,
    release_coefficients,
)
from userdp.estimate._sample_limit import (
    SampleLimitDesign,
    _best_limit,
    _limit_design,
    _ols_on,
    best_limit_h_regression,
    sample_limit_design,
)
from userdp.estimate._scoring import r2_score, sklearn_tags
from userdp.estimate.weighting import check_bounds, check_features
from userdp.exceptions import DataError, InvalidParameterError, NotFittedError
from userdp.privacy.accountant import PrivacyAccountant
from userdp.privacy.noise import NoiseSource

__all__ = [
    "GWA_LINEAR_REGRESSION_PARAMETERS",
    "GWASolution",
    "LabelPrivateLinearRegression",
    "LabelPrivateRegressionResult",
    "SampleLimitDesign",
    "best_limit_h_regression",
    "gwa_linear_regression",
    "gwa_matrix",
    "gwa_objective",
    "gwa_sensitivity",
    "sample_limit_design",
    "solve_gwa",
]

_CALLER = "LabelPrivateLinearRegression"
METHODS = ("gwa", "sample-limit")


# -- the estimator ---------------------------------------------------------------------------------
def _check_h(h: object, name: str, caller: str) -> None:
    """Rule for ``h``: an int >= 1, ``"best"`` or ``"max"``."""
    if isinstance(h, str):
        check_choice(h, name, caller, ["best", "max"])
    elif isinstance(h, bool) or not isinstance(h, numbers.Integral) or h < 1:
        raise InvalidParameterError(
            f"The {name!r} parameter of {caller} must be an int in the range [1, inf), 'best' "
            f"or 'max'. Got {h!r} instead."
        )


def _check_noise_variance(value: object, name: str, caller: str) -> None:
    """Rule for ``noise_variance``: ``"estimate"`` or a float in ``[0, inf)``."""
    if isinstance(value, str):
        check_choice(value, name, caller, ["estimate"])
    else:
        _nonnegative(value, name, caller)


class LabelPrivateLinearRegression(ParamsMixin):
    """Linear regression with user-level label privacy (Epasto et al. 2020, Section 5).

    ``method="gwa"`` releases ``beta~ = C y + Lap(b)^d`` (Algorithm 3) with the ``C`` that
    minimises Theorem 6's total variance (:func:`solve_gwa`); ``method="sample-limit"`` is the
    baseline of Section 5.2: OLS on ``min(h, s_l)`` random records per user, released the
    same way.

    Parameters
    ----------
    epsilon : float
        Total epsilon, in (0, inf).
    label_range : (float, float)
        ``(lower, upper)``, lower < upper: labels are clipped to it (never read to set it);
        ``B = upper - lower``.
    method : {"gwa", "sample-limit"}, default="gwa"
    h : int, "best", "max" or None, default=None
        Sample limiting only (an error with ``"gwa"``): an integer threshold >= 1, ``"max"``
        (keep every record: plain OLS, the paper's ``h_max``), or ``"best"`` (the default
        when None): the integer minimising Section 5.2's variance
        (:func:`best_limit_h_regression`) for ``noise_variance``.
    noise_variance : float or "estimate", default="estimate"
        sigma^2, the label noise variance ``C`` is planned for. A float is treated as
        **public** (the paper's protocol: "we treat it as public knowledge and compute it with
        OLS regression"); passing the OLS residual variance of the very data being protected
        is *not* private unless that number is public. ``"estimate"`` spends
        ``selection_share`` of epsilon on a private estimate (see Notes). Not used (and no
        budget spent on it) by sample limiting with an integer ``h`` or ``"max"``.
    fit_intercept : bool, default=True
        Append a public column of ones to ``X`` (it is part of d in Theorem 6).
    selection_share : float, default=0.1
        Share of epsilon for the noise-variance estimate, in (0, 1).
    seed : int or None, default=None
        None draws noise from OS entropy. An integer is for tests and reproducible benchmarks
        only: a model fitted with a known seed offers no privacy.
        A seed may be used once per accountant: a second release with a seed its
        ``accountant`` already holds is refused before any data is read (the same seed
        draws the same noise, and differencing the two releases would cancel it).

    Attributes
    ----------
    coef_ : ndarray, shape (n_features,)
    intercept_ : float
        0.0 when ``fit_intercept`` is False.
    matrix_ : ndarray, shape (d, n)
        The public estimator ``C`` used (d = n_features + fit_intercept; the intercept is the
        last row). ``C X = I``.
    noise_scale_ : float
        Laplace scale ``b`` of every released coordinate: ``sensitivity_ / epsilon`` of the
        release.
    sensitivity_ : float
        l1 sensitivity of ``C y``: ``B max_l sum_j sum_{i in S_l} |c_ji|`` (Algorithm 3).
    noise_variance_ : float or None
        The sigma^2 used: the public value, or the released estimate; None when not needed.
    objective_ : float or None
        Theorem 6's total variance of the release at ``noise_variance_``.
    relative_gap_ : float or None
        GWA only: the solver's certified relative distance to the optimal ``C``.
    h_ : int or None
        Sample limiting's threshold.
    selection_epsilon_ : float
        Epsilon spent on ``noise_variance="estimate"`` (0 otherwise).
    budget_ : PrivacyBudget
        The ``(epsilon, 0)`` spent (pure DP), from the fit's own accountant; equals
        ``epsilon``.
    dp_event_ : dp_accounting.ComposedDpEvent
        Every release (Laplace events only); what ``fit(..., accountant=)`` charges.
    epsilon_ : float
        ``budget_.epsilon`` (a property).
    n_features_in_ : int

    Privacy
    -------
    Label privacy at the user level (Section 5): ``X``, the partition ``S_l`` (which records
    belong to which user, hence the sizes ``s_l``) and ``label_range`` are public;
    neighbouring datasets replace the labels of one user's records with any values in the
    range. ``C`` is computed from public values only (and the released sigma^2), so
    ``C y`` has l1 sensitivity ``B max_l sum_j sum_{i in S_l} |c_ji|``, computed from the
    final ``C`` itself, and gets Laplace noise of that over epsilon (Theorem 6): one
    ``LaplaceDpEvent``. With ``noise_variance="estimate"`` two more Laplace releases precede
    it (see Notes); the three compose to ``epsilon`` exactly (basic composition). A float
    ``noise_variance`` must itself be public. Sample limiting's record draw reads only the
    partition. There is no add/remove-user mode: ``C`` must be chosen from public data, so
    ``X`` and the partition (and with it every ``s_l``) are public by assumption.

    Notes
    -----
    ``noise_variance="estimate"`` spends ``eps_s = selection_share * epsilon`` in two halves:

    1. A pilot ``beta_0`` is released by GWA at ``eps_s / 2`` (Algorithm 3), its ``C`` planned
       for sigma^2 = B^2/4, the largest variance a label in the range can have.
    2. With predictions clipped to the range, ``r_i = (y_i - clip(x_i beta_0))^2 in [0, B^2]``.
       Their smoothly weighted mean ``sum_i w_i r_i / n_h`` (Lemma 3's ``w_i = min(h, s_l)/s_l``,
       public because the sizes are; ``h`` from Claim 1 for values in ``[0, B^2]``) has
       sensitivity ``B^2 max_l min(h, s_l) / n_h`` under replacement (``beta_0`` is already
       released, a fixed input by adaptive composition; Lemma 1) and is released with Laplace
       noise at ``eps_s / 2``.
    3. The estimate is clipped to ``[1e-6 B^2, B^2/4]`` (a positive floor keeps ``C`` away from
       the degenerate vertices of the ``sigma^2 = 0`` linear program).

    ``C`` is then planned for this sigma^2 and released with ``(1 - selection_share) epsilon``;
    the three Laplace releases compose to ``epsilon`` exactly. The pilot's own noise inflates
    the residuals, so at small budgets the estimate is biased *upwards* (a conservative plan:
    ``C`` closer to OLS) and often sits at ``B^2/4``; subtracting the pilot's known noise
    contribution (``2 b_0^2 ||x_i||^2``) was tried and over-corrects to the floor, because of the
    clipping. Why this is acceptable: measured on synthetic Zipf-user data (d = 8-10,
    epsilon 0.3-3, linear model true), planning ``C`` with the true sigma^2, with ``B^2/4``
    (5-25 times too large) or with ``1e-6 B^2`` (10^4-10^5 times too small) changed the final
    prediction error by at most ~13%, so most of the cost of ``"estimate"`` is the
    ``selection_share`` of the budget, not the estimate's error. Give a public bound on
    sigma^2 when one is known.

    Theorem 6 assumes ``y = X beta + noise`` with independent, equal-variance noise. When users
    differ systematically, ``C y`` estimates ``C E[y]``, which depends on ``C``: a ``C`` that
    caps heavy users down-weights them and its noise-free fit can be worse than OLS's. The
    error then has a bias part that Theorem 6 does not count.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(3000, 2))
    >>> users = rng.zipf(1.5, 3000) % 400
    >>> y = np.clip(5.0 + X @ [1.0, -1.0] + rng.normal(size=3000), 0.0, 10.0)
    >>> model = LabelPrivateLinearRegression(epsilon=1.0, label_range=(0.0, 10.0), seed=0)
    >>> model = model.fit(X, y, users)
    >>> round(model.budget_.epsilon, 9), model.budget_.delta
    (1.0, 0.0)
    >>> bool(np.abs(model.coef_ - [1.0, -1.0]).max() < 0.5)
    True
    """

    _parameter_constraints: ClassVar[dict[str, dict[str, Any]]] = {
        "epsilon": EPSILON,
        "label_range": {"check": bounds_rule, "cli": False},
        "method": {
            "choices": METHODS,
            "help": "gwa: generalized weighted averaging (the "
            "paper's Alg. 3); sample-limit: OLS on at most h rows per user (the "
            "baseline).",
        },
        "h": {"check": _check_h, "none": True, "cli": False},
        "noise_variance": {"check": _check_noise_variance, "cli": False},
        "fit_intercept": {
            "bool": True,
            "help": "Fit an intercept (a public column of ones). Default: fit one.",
        },
        "selection_share": {
            **SELECTION_SHARE,
            "help": "Share of epsilon spent on estimating "
            "the label noise variance privately, in (0, 1).",
        },
        "seed": SEED,
    }

    def __init__(
        self,
        *,
        epsilon: float,
        label_range: tuple[float, float],
        method: str = "gwa",
        h: int | str | None = None,
        noise_variance: float | str = "estimate",
        fit_intercept: bool = True,
        selection_share: float = 0.1,
        seed: int | None = None,
    ) -> None:
        self.epsilon = epsilon
        self.label_range = label_range
        self.method = method
        self.h = h
        self.noise_variance = noise_variance
        self.fit_intercept = fit_intercept
        self.selection_share = selection_share
        self.seed = seed

    # -- validation -------------------------------------------------------------------------
    def _validate_params(self) -> None:
        """The declared table, then the one rule across two parameters."""
        super()._validate_params()
        if self.method == "gwa" and self.h is not None:
            raise InvalidParameterError(
                f"The 'h' parameter of {_CALLER} is only used with method='sample-limit'; "
                f"got h={self.h!r} with method='gwa'. Leave h=None."
            )

    def _checked_params(self) -> tuple[tuple[float, float], int | str | None, float | None]:
        """Check every parameter; returns (bounds, h mode, public noise variance or None)."""
        self._validate_params()
        h_mode = None if self.method == "gwa" else ("best" if self.h is None else self.h)
        if isinstance(h_mode, numbers.Integral):
            h_mode = int(h_mode)
        nv = self.noise_variance
        public_variance = None if isinstance(nv, str) else float(nv)
        return check_bounds(self.label_range, _CALLER), h_mode, public_variance

    def _plan(self, h_mode: int | str | None, public_variance: float | None) -> tuple:
        """``(selection epsilon, events)`` from the parameters alone: the pilot and residual
        releases of ``noise_variance="estimate"`` (when ``C`` or ``h`` needs a variance), then
        Algorithm 3's release."""
        eps = float(self.epsilon)
        if public_variance is not None or h_mode not in (None, "best"):
            return 0.0, [laplace_event(eps)]  # an explicit h or "max" needs no variance
        selection = self.selection_share * eps
        pilot = 0.5 * selection
        events = [laplace_event(pilot), laplace_event(selection - pilot)]
        return selection, [*events, laplace_event(eps - selection)]

    def _validate_data(self, X: object, y: object, users: object) -> tuple:
        x = check_features(X, f"{_CALLER}.fit")
        labels = _as_labels(y, x.shape[0], f"{_CALLER}.fit")
        codes, sizes = _as_codes(users, x.shape[0], f"{_CALLER}.fit")
        if self.fit_intercept:
            x = np.column_stack([x, np.ones(x.shape[0])])
        _check_rank(x, f"{_CALLER}.fit")
        return x, labels, codes, sizes

    # -- fitting ----------------------------------------------------------------------------
    def fit(
        self,
        X: object,
        y: object,
        users: object = None,
        *,
        accountant: PrivacyAccountant | None = None,
    ) -> LabelPrivateLinearRegression:
        """Fit on public features ``X`` (n, p), private labels ``y`` (n,) and public ``users``.

        ``accountant``, if given, is charged with ``dp_event_``; if it holds a total budget
        that this fit would exceed, :class:`BudgetExceededError` is raised before the data are
        read.

        Raises
        ------
        InvalidParameterError
            A constructor parameter is out of range (checked before the data are read).
        BudgetExceededError
            ``accountant`` cannot afford ``epsilon`` (checked before the data are read).
        DataError
            ``users`` is missing, mismatched lengths, non-finite values, or a design without
            full column rank.
        """
        bounds, h_mode, public_variance = self._checked_params()
        require_users(users, f"{_CALLER}.fit")
        if accountant is not None:
            check_accountant(accountant, "accountant", f"{_CALLER}.fit")
        eps_sel, planned = self._plan(h_mode, public_variance)
        # refuses before any work (a budget it cannot afford, a seed it already holds)
        ledger = Ledger(accountant, planned, seed=self.seed, caller=f"{_CALLER}.fit")
        x, labels, codes, sizes = self._validate_data(X, y, users)
        labels = clip_labels(labels, bounds)
        width = bounds[1] - bounds[0]
        noise, acc = NoiseSource(self.seed), ledger.local
        eps = float(self.epsilon)
        # public, or estimated below whenever C or h needs it (see _plan)
        sigma2 = cast(float, public_variance)
        if eps_sel:
            sigma2 = private_noise_variance(x, labels, codes, sizes, bounds, eps_sel, noise, acc)
        eps_main = eps - eps_sel
        unit = width / eps_main
        self.h_, self.relative_gap_ = None, None
        if self.method == "gwa":
            solution = _solve_codes(x, codes, sizes, sigma2, unit, 1e-8, 500)
            matrix = solution.matrix
            self.relative_gap_ = solution.relative_gap
        else:
            if h_mode == "best":
                design = _best_limit(x, codes, sizes, sigma2, unit, noise)
            elif h_mode == "max":
                design = SampleLimitDesign(
                    int(sizes.max()),
                    np.ones(x.shape[0], dtype=bool),
                    # x has full column rank (checked): never None on all rows
                    cast(np.ndarray, _ols_on(x, np.ones(x.shape[0], dtype=bool))),
                )
            else:
                design = _limit_design(
                    x, codes, sizes, cast(int, h_mode), noise, f"{_CALLER}.fit"
                )  # an explicit h
            matrix, self.h_ = design.matrix, design.h
        beta, scale, sens = release_coefficients(
            matrix, labels, codes, bounds, eps_main, noise, acc
        )
        d = x.shape[1]
        self.coef_ = beta[: d - 1] if self.fit_intercept else beta
        self.intercept_ = float(beta[-1]) if self.fit_intercept else 0.0
        self.matrix_ = matrix
        self.noise_scale_ = scale
        self.sensitivity_ = sens
        self.noise_variance_ = sigma2
        self.objective_ = (
            None if sigma2 is None else float(sigma2 * np.vdot(matrix, matrix) + 2 * d * scale**2)
        )
        self.selection_epsilon_ = eps_sel
        self.budget_, self.dp_event_ = ledger.close()
        self.n_features_in_ = d - 1 if self.fit_intercept else d
        return self

    @property
    def epsilon_(self) -> float:
        """``budget_.epsilon``: the epsilon spent (derived from ``budget_``)."""
        self._check_fitted()
        return self.budget_.epsilon

    def summary(self) -> str:
        """One line of released facts: method, dimension, noise and budget."""
        self._check_fitted()
        h = "" if self.h_ is None else f", h={self.h_}"
        return (
            f"{self.method} label-private regression{h}, d={self.matrix_.shape[0]}, Laplace "
            f"scale {self.noise_scale_:.3g} (l1 sensitivity {self.sensitivity_:.3g}), "
            f"{budget_text(self.budget_)}; noise sd {math.sqrt(2.0) * self.noise_scale_:.3g} "
            f"per coefficient, 95% noise half-width {LAPLACE_95 * self.noise_scale_:.3g} (noise "
            "only, not the bias of bounding)"
        )

    # -- prediction -------------------------------------------------------------------------
    def _check_fitted(self) -> None:
        if not hasattr(self, "coef_"):
            raise NotFittedError(f"This {_CALLER} is not fitted yet; call fit first.")

    def predict(self, X: object) -> np.ndarray:
        """``X @ coef_ + intercept_``, shape (n,)."""
        self._check_fitted()
        x = check_features(X, f"{_CALLER}.predict")
        if x.shape[1] != self.n_features_in_:
            raise DataError(
                f"{_CALLER}.predict: X has {x.shape[1]} features; the model was fitted on "
                f"{self.n_features_in_}."
            )
        return x @ self.coef_ + self.intercept_

    _estimator_type = "regressor"  # scikit-learn < 1.6

    def __sklearn_tags__(self) -> object:
        """scikit-learn >= 1.6: a regressor (imports scikit-learn only when it asks)."""
        return sklearn_tags("regressor")

    def score(self, X: object, y: object, sample_weight: object = None) -> float:
        """Coefficient of determination R^2 of :meth:`predict` on ``X``, ``y`` (scikit-learn's
        ``RegressorMixin.score``), so ``cross_val_score`` and ``Pipeline.score`` work.

        Not a private release: it is computed exactly on the ``X`` and ``y`` given (a held-out
        set of the caller's), like any evaluation.
        """
        return r2_score(y, self.predict(X), sample_weight, f"{_CALLER}.score")
