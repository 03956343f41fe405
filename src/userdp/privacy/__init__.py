"""Privacy core: budgets, calibration, noise and accounting. Imports no capability."""

from userdp.privacy.accountant import PrivacyAccountant
from userdp.privacy.budget import PrivacyBudget
from userdp.privacy.calibrate import (
    calibrate_noise_scale,
    gaussian_delta,
    gaussian_sigma,
    laplace_scale,
    laplace_threshold,
    partition_threshold,
)
from userdp.privacy.events import (
    ExponentialMechanismDpEvent,
    LaplaceThresholdDpEvent,
    ThresholdedGaussianDpEvent,
    WeightAndThresholdDpEvent,
)
from userdp.privacy.noise import NoiseSource

__all__ = [
    "ExponentialMechanismDpEvent",
    "LaplaceThresholdDpEvent",
    "NoiseSource",
    "PrivacyAccountant",
    "PrivacyBudget",
    "ThresholdedGaussianDpEvent",
    "WeightAndThresholdDpEvent",
    "calibrate_noise_scale",
    "gaussian_delta",
    "gaussian_sigma",
    "laplace_scale",
    "laplace_threshold",
    "partition_threshold",
]
