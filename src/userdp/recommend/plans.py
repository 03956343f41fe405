"""Budget splits of the private training runs, calibrated by search with the accountant.

Both recommenders split their (epsilon, delta) budget in *precision* shares (1/z^2, the RDP
budget of a Gaussian) over the private counts, the private mean and the training releases
(Krichene et al. 2023, Section 5: 12-20 % to the counts), then find one noise scale by
bisection so the composition meets the target (:func:`~userdp.privacy.calibrate_noise_scale`).
:func:`plan_noise` plans :class:`~userdp.recommend.MatrixFactorization` (Algorithm 3's DPALS
and DPSGD families), :func:`plan_ssp_noise` plans the public-feature recommender (AM-SSP,
Krichene et al. 2023b, Algorithms 2, 3 and 5).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import dp_accounting

from userdp._validation import check_choice, check_int, check_real
from userdp.exceptions import InvalidParameterError
from userdp.privacy.budget import PrivacyBudget
from userdp.privacy.calibrate import calibrate_noise_scale

__all__ = ["SSPPlan", "TrainingPlan", "plan_noise", "plan_ssp_noise"]


@dataclass(frozen=True)
class TrainingPlan:
    """Noise multipliers of every Gaussian release of a private training run.

    Each release has l2 sensitivity 1 after scaling (the mechanisms divide by their own
    sensitivity), so the run is the composition of Gaussians with these noise multipliers.
    """

    counts: float
    center: float | None
    gram: float | None
    moment: float | None
    gradient: float | None
    steps: int
    sgd_steps: int
    gravity: float | None = None

    def event(self) -> dp_accounting.DpEvent:
        """The whole run as one composed dp-accounting event."""
        events: list[dp_accounting.DpEvent] = [dp_accounting.GaussianDpEvent(self.counts)]
        if self.center is not None:
            events.append(dp_accounting.GaussianDpEvent(self.center))
        per_step: list[dp_accounting.DpEvent] = []
        if self.gravity is not None:
            per_step.append(dp_accounting.GaussianDpEvent(self.gravity))
        if self.gram is not None:
            per_step += [
                dp_accounting.GaussianDpEvent(self.gram),
                dp_accounting.GaussianDpEvent(self.moment),
            ]
        if self.gradient is not None:
            per_step.append(
                dp_accounting.SelfComposedDpEvent(
                    dp_accounting.GaussianDpEvent(self.gradient), self.sgd_steps
                )
            )
        events.append(
            dp_accounting.SelfComposedDpEvent(dp_accounting.ComposedDpEvent(per_step), self.steps)
        )
        return dp_accounting.ComposedDpEvent(events)


def plan_noise(
    budget: PrivacyBudget,
    *,
    solver: str,
    steps: int,
    sgd_steps: int = 1,
    count_fraction: float = 0.15,
    center_fraction: float | None = 0.02,
    moment_share: float = 0.5,
    gravity_share: float | None = None,
) -> TrainingPlan:
    """Split a budget over the releases and calibrate the noise by search.

    The budget is split in *precision* (1/z^2, proportional to the RDP budget of a Gaussian):
    ``count_fraction`` to the private counts, ``center_fraction`` to the private mean (None: no
    mean), the rest evenly over the training steps (and within an SSP step, ``moment_share``
    to b, the rest to A; ``gravity_share`` of each step to the all-users Gram of the
    unobserved-item term, when there is one). One scale s is then found by bisection with the
    accountant so the composition meets (epsilon, delta): ``z_k = s * sqrt(releases_k / share_k)``.
    """

    def share(value: float, name: str) -> float:
        return check_real(
            value, name, "plan_noise", low=0.0, high=1.0, low_open=True, high_open=True
        )

    solver = check_choice(solver, "solver", "plan_noise", ["ssp", "gd"])
    steps = check_int(steps, "steps", "plan_noise", low=1)
    sgd_steps = check_int(sgd_steps, "sgd_steps", "plan_noise", low=1)
    cf = share(count_fraction, "count_fraction")
    mf = 0.0 if center_fraction is None else share(center_fraction, "center_fraction")
    ms = share(moment_share, "moment_share")
    gs = 0.0 if gravity_share is None else share(gravity_share, "gravity_share")
    train = 1.0 - cf - mf
    if train <= 0:
        raise InvalidParameterError(
            "count_fraction + center_fraction must leave part of the budget for training; got "
            f"{cf:g} + {mf:g}."
        )

    def make(scale: float) -> TrainingPlan:
        rest = train * (1.0 - gs)
        if solver == "ssp":
            gram = scale * math.sqrt(steps / (rest * (1.0 - ms)))
            moment = scale * math.sqrt(steps / (rest * ms))
            grad = None
        else:
            gram = moment = None
            grad = scale * math.sqrt(steps * sgd_steps / rest)
        return TrainingPlan(
            counts=scale / math.sqrt(cf),
            center=None if center_fraction is None else scale / math.sqrt(mf),
            gram=gram,
            moment=moment,
            gradient=grad,
            steps=steps,
            sgd_steps=sgd_steps,
            gravity=None if gravity_share is None else scale * math.sqrt(steps / (train * gs)),
        )

    scale = calibrate_noise_scale(lambda s: make(s).event(), budget.epsilon, budget.delta)
    return make(scale)


@dataclass(frozen=True)
class SSPPlan:
    """Noise multipliers of an AM-SSP run: counts, centre, and the per-release (A, b) pair.

    ``releases_per_step`` is 1 for SSP2 and mini-batch SSP2 (statistics reused) and the number
    of inner steps for SSP1 (fresh noise each step).
    """

    counts: float
    center: float | None
    gram: float | None
    moment: float | None
    steps: int
    releases_per_step: int
    gradient: float | None = None
    user_counts: float | None = None
    user_prior: float | None = None

    def event(self) -> dp_accounting.DpEvent:
        """The whole run as one composed dp-accounting event."""
        if self.gradient is not None:  # AM-DPSGD: one clipped gradient per release
            pair = dp_accounting.GaussianDpEvent(self.gradient)
        else:
            pair = dp_accounting.ComposedDpEvent(
                [
                    dp_accounting.GaussianDpEvent(self.gram),
                    dp_accounting.GaussianDpEvent(self.moment),
                ]
            )
        events: list[dp_accounting.DpEvent] = [dp_accounting.GaussianDpEvent(self.counts)]
        if self.center is not None:
            events.append(dp_accounting.GaussianDpEvent(self.center))
        events.append(dp_accounting.SelfComposedDpEvent(pair, self.steps * self.releases_per_step))
        if self.user_prior is not None:  # the private user-feature prior: counts once, then
            events.append(dp_accounting.GaussianDpEvent(self.user_counts))  # one table a step
            events.append(
                dp_accounting.SelfComposedDpEvent(
                    dp_accounting.GaussianDpEvent(self.user_prior), self.steps
                )
            )
        return dp_accounting.ComposedDpEvent(events)


def plan_ssp_noise(
    budget: PrivacyBudget,
    *,
    steps: int,
    releases_per_step: int = 1,
    count_fraction: float = 0.15,
    center_fraction: float | None = 0.02,
    moment_share: float = 0.5,
    gradient: bool = False,
    user_fraction: float | None = None,
) -> SSPPlan:
    """Split the budget in precision shares and calibrate by search (as ``plan_noise``).

    With ``gradient=True`` each release is one clipped gradient (AM-DPSGD) instead of an
    (A, b) pair. ``user_fraction`` reserves a share for the private user-feature prior: a
    quarter of it for the feature-value counts (released once), the rest for one prior table
    per outer step.
    """
    steps = check_int(steps, "steps", "plan_ssp_noise", low=1)
    releases_per_step = check_int(releases_per_step, "releases_per_step", "plan_ssp_noise", low=1)

    def share(value: float, name: str) -> float:
        return check_real(
            value, name, "plan_ssp_noise", low=0.0, high=1.0, low_open=True, high_open=True
        )

    cf = share(count_fraction, "count_fraction")
    mf = 0.0 if center_fraction is None else share(center_fraction, "center_fraction")
    ms = share(moment_share, "moment_share")
    uf = 0.0 if user_fraction is None else share(user_fraction, "user_fraction")
    train = 1.0 - cf - mf - uf
    if train <= 0:
        raise InvalidParameterError(
            "count_fraction + center_fraction + user_fraction must be below 1."
        )
    n_rel = steps * releases_per_step

    def make(scale: float) -> SSPPlan:
        return SSPPlan(
            counts=scale / math.sqrt(cf),
            center=None if center_fraction is None else scale / math.sqrt(mf),
            gram=None if gradient else scale * math.sqrt(n_rel / (train * (1.0 - ms))),
            moment=None if gradient else scale * math.sqrt(n_rel / (train * ms)),
            steps=steps,
            releases_per_step=releases_per_step,
            gradient=scale * math.sqrt(n_rel / train) if gradient else None,
            user_counts=None if user_fraction is None else scale / math.sqrt(0.25 * uf),
            user_prior=None if user_fraction is None else scale * math.sqrt(steps / (0.75 * uf)),
        )

    scale = calibrate_noise_scale(lambda s: make(s).event(), budget.epsilon, budget.delta)
    return make(scale)
