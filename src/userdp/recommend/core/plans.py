"""The noise planner of every private recommender run: one plan type, one function.

Every recommender splits its (epsilon, delta) budget in *precision* shares (1/z^2, the RDP
budget of a Gaussian) over the private counts, the private mean and the training releases
(Krichene et al. 2023, Section 5: 12-20 % to the counts), then finds one noise scale by
bisection so the composition meets the target (:func:`~userdp.privacy.calibrate_noise_scale`).
:func:`plan_noise` plans :class:`~userdp.recommend.MatrixFactorization` (Algorithm 3's DPALS and
DPSGD families) and the public-feature recommenders (AM-SSP, Krichene et al. 2023b,
Algorithms 2, 3 and 5, and AM-DPSGD) alike: the same inputs give the same :class:`NoisePlan`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import dp_accounting

from userdp._validation import check_choice, check_int, check_real
from userdp.exceptions import InvalidParameterError
from userdp.privacy.budget import PrivacyBudget
from userdp.privacy.calibrate import calibrate_noise_scale

__all__ = ["NoisePlan", "SSPPlan", "TrainingPlan", "plan_noise", "plan_ssp_noise"]

_CALLER = "plan_noise"


@dataclass(frozen=True)
class NoisePlan:
    """Noise multipliers of every Gaussian release of a private training run.

    Each release has l2 sensitivity 1 after scaling (the mechanisms divide by their own
    sensitivity), so the run is the composition of Gaussians with these noise multipliers:
    the counts and the centre once, then per alternating step ``releases_per_step`` releases
    of the item statistics -- an (A, b) pair (``gram``, ``moment``) or one clipped gradient
    (``gradient``) -- plus, when planned, the all-users Gram of the unobserved-item term
    (``gravity``, once a step), and the user-feature prior (``user_counts`` once,
    ``user_prior`` once a step).

    ``grouped`` only shapes the recorded event, not the privacy: True composes each step's
    releases into one per-step event (``MatrixFactorization``'s record, which has the gravity
    term), False counts the releases flat (the public-feature recommenders' record). Both
    describe the same Gaussian composition; each recommender keeps the shape it always
    recorded, so its calibrated scale and its saved event are unchanged.
    """

    counts: float
    center: float | None
    gram: float | None
    moment: float | None
    steps: int
    releases_per_step: int = 1
    gradient: float | None = None
    gravity: float | None = None
    user_counts: float | None = None
    user_prior: float | None = None
    grouped: bool = False

    @property
    def sgd_steps(self) -> int:
        """Gradient steps per alternating step (``releases_per_step``, the DPSGD name)."""
        return self.releases_per_step

    def event(self) -> dp_accounting.DpEvent:
        """The whole run as one composed dp-accounting event."""
        gaussian = dp_accounting.GaussianDpEvent
        events: list[dp_accounting.DpEvent] = [gaussian(self.counts)]
        if self.center is not None:
            events.append(gaussian(self.center))
        if self.grouped:
            per_step: list[dp_accounting.DpEvent] = []
            if self.gravity is not None:
                per_step.append(gaussian(self.gravity))
            if self.gram is not None:
                pair = [gaussian(self.gram), gaussian(self.moment)]
                if self.releases_per_step == 1:
                    per_step += pair
                else:
                    per_step.append(
                        dp_accounting.SelfComposedDpEvent(
                            dp_accounting.ComposedDpEvent(pair), self.releases_per_step
                        )
                    )
            if self.gradient is not None:
                per_step.append(
                    dp_accounting.SelfComposedDpEvent(
                        gaussian(self.gradient), self.releases_per_step
                    )
                )
            events.append(
                dp_accounting.SelfComposedDpEvent(
                    dp_accounting.ComposedDpEvent(per_step), self.steps
                )
            )
        else:
            if self.gradient is not None:  # one clipped gradient per release
                release: dp_accounting.DpEvent = gaussian(self.gradient)
            else:
                release = dp_accounting.ComposedDpEvent(
                    [gaussian(self.gram), gaussian(self.moment)]
                )
            events.append(
                dp_accounting.SelfComposedDpEvent(release, self.steps * self.releases_per_step)
            )
            if self.gravity is not None:
                events.append(dp_accounting.SelfComposedDpEvent(gaussian(self.gravity), self.steps))
        if self.user_prior is not None:  # the private user-feature prior: counts once, then
            events.append(gaussian(self.user_counts))  # one table a step
            events.append(dp_accounting.SelfComposedDpEvent(gaussian(self.user_prior), self.steps))
        return dp_accounting.ComposedDpEvent(events)


#: The former names of :class:`NoisePlan` (one type now), kept for old imports.
TrainingPlan = NoisePlan
SSPPlan = NoisePlan


def plan_noise(
    budget: PrivacyBudget,
    *,
    steps: int,
    solver: str = "ssp",
    releases_per_step: int = 1,
    count_fraction: float = 0.15,
    center_fraction: float | None = 0.02,
    moment_share: float = 0.5,
    gravity_share: float | None = None,
    user_fraction: float | None = None,
    grouped: bool = False,
) -> NoisePlan:
    """Split a budget over the releases and calibrate the noise by search.

    The budget is split in *precision* (1/z^2, proportional to the RDP budget of a Gaussian):
    ``count_fraction`` to the private counts, ``center_fraction`` to the private mean (None: no
    mean), ``user_fraction`` to the user-feature prior (None: none; a quarter of it for the
    feature-value counts, released once, the rest for one prior table per step), the rest
    evenly over the ``steps * releases_per_step`` training releases: ``solver="ssp"``, an
    (A, b) pair each, ``moment_share`` of it to b and the rest to A; ``solver="gd"``, one
    clipped gradient each. ``gravity_share`` of the training share goes to the all-users Gram
    of the unobserved-item term, once a step, when there is one. One scale s is then found by
    bisection with the accountant so the composition meets (epsilon, delta):
    ``z_k = s * sqrt(releases_k / share_k)``. ``grouped``: the event's shape
    (:class:`NoisePlan`).
    """

    def share(value: float, name: str) -> float:
        return check_real(value, name, _CALLER, low=0.0, high=1.0, low_open=True, high_open=True)

    solver = check_choice(solver, "solver", _CALLER, ["ssp", "gd"])
    steps = check_int(steps, "steps", _CALLER, low=1)
    releases_per_step = check_int(releases_per_step, "releases_per_step", _CALLER, low=1)
    cf = share(count_fraction, "count_fraction")
    mf = 0.0 if center_fraction is None else share(center_fraction, "center_fraction")
    ms = share(moment_share, "moment_share")
    gs = 0.0 if gravity_share is None else share(gravity_share, "gravity_share")
    uf = 0.0 if user_fraction is None else share(user_fraction, "user_fraction")
    train = 1.0 - cf - mf - uf
    if train <= 0:
        raise InvalidParameterError(
            "count_fraction + center_fraction + user_fraction must leave part of the budget "
            f"for training; got {cf:g} + {mf:g} + {uf:g}."
        )
    n_rel = steps * releases_per_step
    gradient = solver == "gd"

    def make(scale: float) -> NoisePlan:
        rest = train * (1.0 - gs)
        return NoisePlan(
            counts=scale / math.sqrt(cf),
            center=None if center_fraction is None else scale / math.sqrt(mf),
            gram=None if gradient else scale * math.sqrt(n_rel / (rest * (1.0 - ms))),
            moment=None if gradient else scale * math.sqrt(n_rel / (rest * ms)),
            steps=steps,
            releases_per_step=releases_per_step,
            gradient=scale * math.sqrt(n_rel / rest) if gradient else None,
            gravity=None if gravity_share is None else scale * math.sqrt(steps / (train * gs)),
            user_counts=None if user_fraction is None else scale / math.sqrt(0.25 * uf),
            user_prior=None if user_fraction is None else scale * math.sqrt(steps / (0.75 * uf)),
            grouped=grouped,
        )

    scale = calibrate_noise_scale(lambda s: make(s).event(), budget.epsilon, budget.delta)
    return make(scale)


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
) -> NoisePlan:
    """:func:`plan_noise` under its former public-feature name (``gradient=True`` is
    ``solver="gd"``), kept for old callers: the same planner, the same plan."""
    return plan_noise(
        budget,
        steps=steps,
        solver="gd" if gradient else "ssp",
        releases_per_step=releases_per_step,
        count_fraction=count_fraction,
        center_fraction=center_fraction,
        moment_share=moment_share,
        user_fraction=user_fraction,
    )
