"""Privacy core: budgets, calibration, noise and accounting. Imports no capability."""

from userdp.privacy.accountant import Cost, PrivacyAccountant, event_cost
from userdp.privacy.budget import (
    MAX_EPSILON,
    PrivacyBudget,
    approximate_budget,
    check_epsilon_limit,
)
from userdp.privacy.calibrate import (
    SAFE_NOISE_INFLATION,
    calibrate_noise_scale,
    gaussian_delta,
    gaussian_sigma,
    grid_noise_scale,
    grid_spacing,
    laplace_scale,
    laplace_threshold,
    partition_threshold,
)
from userdp.privacy.checks import ACCOUNTANT, check_accountant, check_budget
from userdp.privacy.events import (
    ExponentialMechanismDpEvent,
    LaplaceThresholdDpEvent,
    ThresholdedGaussianDpEvent,
    WeightAndThresholdDpEvent,
)
from userdp.privacy.noise import (
    NoiseSource,
    add_on_grid,
    gaussian_on_grid,
    laplace_on_grid,
    snap_to_grid,
    spawn_generator,
)
from userdp.privacy.recording import Release, record, recording

__all__ = [
    "ACCOUNTANT",
    "MAX_EPSILON",
    "SAFE_NOISE_INFLATION",
    "Cost",
    "ExponentialMechanismDpEvent",
    "LaplaceThresholdDpEvent",
    "NoiseSource",
    "PrivacyAccountant",
    "PrivacyBudget",
    "Release",
    "ThresholdedGaussianDpEvent",
    "WeightAndThresholdDpEvent",
    "add_on_grid",
    "approximate_budget",
    "calibrate_noise_scale",
    "check_accountant",
    "check_budget",
    "check_epsilon_limit",
    "event_cost",
    "gaussian_delta",
    "gaussian_on_grid",
    "gaussian_sigma",
    "grid_noise_scale",
    "grid_spacing",
    "laplace_on_grid",
    "laplace_scale",
    "laplace_threshold",
    "partition_threshold",
    "record",
    "recording",
    "snap_to_grid",
    "spawn_generator",
]
