"""Audit userdp's privacy guarantees from the outside: ``userdp audit`` and this package.

Four checks:

* :func:`audit_sensitivity` / :func:`run_audit`: a record/replay sensitivity audit. Every
  mechanism declares each noised statistic and its sensitivity through one hook
  (:func:`userdp.privacy.record`, called by the noise helpers). The auditor reruns a mechanism
  on neighbours of the data with the same seed, replaying the released outputs, and reports
  the largest change of each statistic against its declared bound (FAIL above it, and FAIL
  where a comparison could not be made: randomness not replayable, nothing compared; a
  mechanism that compared no statistic on any neighbour FAILs, one the data cannot feed is
  reported as not run, and an audit of nothing is refused).
* The float check, in the same runs: every released output lies on the grid its release
  declared, the grid and a published release's labels are the same on every neighbour
  (textbook float noise fails it).
* :func:`threshold_rows`: every planned weight-and-threshold round keeps a novel item's
  crossing probability within its threshold budget, computed exactly on the grid.
* :func:`run_experiment` over :data:`EXPERIMENTS`: empirical epsilon lower bounds
  (Clopper-Pearson, 95%) for the black-box selection and the mean/quantile releases on
  constructed hard neighbours, and the delta check at a declared delta of 0.05.

Neither proves privacy: they find violations. A pass means no neighbour tried moved a statistic
beyond its bound, and no event tried separated the hard neighbours by more than epsilon.
``tests/unit/test_audit_mutants.py`` plants known bugs and asserts each is caught.

Extending it: the audited configurations are one table, :data:`MECHANISMS` (built in
:mod:`userdp.audit.mechanisms`, whose docstring says how a new capability adds its entries).
"""

from userdp.audit.epsilon import EpsilonBound, clopper_pearson, epsilon_lower_bound
from userdp.audit.hard import EXPERIMENTS, Experiment, run_experiment
from userdp.audit.mechanisms import MECHANISMS, Mechanism, audit_table
from userdp.audit.neighbours import Neighbour, Table, neighbours
from userdp.audit.replay import AuditRow, audit_sensitivity
from userdp.audit.report import AuditReport, MechanismSummary, run_audit
from userdp.audit.threshold import ThresholdRow, threshold_rows

__all__ = [
    "EXPERIMENTS",
    "MECHANISMS",
    "AuditReport",
    "AuditRow",
    "EpsilonBound",
    "Experiment",
    "Mechanism",
    "MechanismSummary",
    "Neighbour",
    "Table",
    "ThresholdRow",
    "audit_sensitivity",
    "audit_table",
    "clopper_pearson",
    "epsilon_lower_bound",
    "neighbours",
    "run_audit",
    "run_experiment",
    "threshold_rows",
]
